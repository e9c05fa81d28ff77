//! `snapbus detach`: stopping a consumer (SIGTERM, then SIGKILL after a grace period) and
//! answering once its process has exited.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::process::{has_exited, pidfd};
use crate::broker::Broker;
use crate::control::{AfterEnd, Conn, DETACH_GRACE, DetachOutcome, FromBroker};

/// A `detach` request waiting for a consumer process to exit.
pub(in crate::broker) struct Detaching {
    /// A supervised consumer (by id), or an unsupervised one (its pidfd).
    target: Target,
    pub(super) pidfd: Option<OwnedFd>,
    conn: Conn,
    deadline: Instant,
    killed: bool,
}

enum Target {
    Supervised(u64),
    Unsupervised,
}

impl Broker {
    /// SIGTERM to a consumer; the reply waits until its process has exited. An id that names
    /// no running consumer is refused (never guessed).
    pub(in crate::broker) fn detach(&mut self, conn: Conn, consumer_id: u64) {
        let refuse = |conn: &Conn, message: String| {
            let _ = conn.send(&FromBroker::Error { message }, &[]);
        };
        if let Some(s) = self
            .supervised
            .iter_mut()
            .find(|s| s.kept.id == consumer_id)
        {
            // Waiting to be restarted: it is simply not restarted.
            if s.respawn_at.is_some() {
                s.respawn_at = None;
                s.stopping = true;
                let ending = s.end(s.how_it_ended(), AfterEnd::NotRestarted);
                self.dirty = true;
                let outcome = DetachOutcome::Ended {
                    ending,
                    killed: false,
                };
                let _ = conn.send(&FromBroker::Detached(outcome), &[]);
                return;
            }
            if let Some(status) = &s.kept.status {
                return refuse(
                    &conn,
                    format!("consumer {consumer_id} has already ended ({status})"),
                );
            }
            if s.attach.is_some() {
                return refuse(
                    &conn,
                    format!("consumer {consumer_id} is still starting; try again"),
                );
            }
            s.stopping = true;
            s.signal(Signal::TERM);
            crate::say!(
                "snapbus broker: detaching {} {consumer_id} (pid {})",
                s.kept.kind,
                s.kept.pid
            );
            self.detaching.push(Detaching {
                target: Target::Supervised(consumer_id),
                pidfd: None,
                conn,
                deadline: Instant::now() + DETACH_GRACE,
                killed: false,
            });
            return;
        }
        // An unsupervised consumer: the one connected with this id, signalled through a
        // pidfd (a pid that was reused in the meantime is never signalled).
        let Some(pid) = self
            .consumers
            .values()
            .find(|c| c.id == consumer_id)
            .map(|c| c.info.pid)
        else {
            return refuse(
                &conn,
                format!(
                    "no consumer {consumer_id} on bus '{}' (`snapbus ls` lists them)",
                    self.dir.name()
                ),
            );
        };
        let Some(fd) = pidfd(pid) else {
            return refuse(
                &conn,
                format!("consumer {consumer_id} (pid {pid}) has already exited"),
            );
        };
        let _ = rustix::process::pidfd_send_signal(&fd, Signal::TERM);
        crate::say!("snapbus broker: detaching consumer {consumer_id} (pid {pid})");
        self.detaching.push(Detaching {
            target: Target::Unsupervised,
            pidfd: Some(fd),
            conn,
            deadline: Instant::now() + DETACH_GRACE,
            killed: false,
        });
    }

    /// Answers the `detach` requests whose consumer has exited; kills those past the grace
    /// period.
    pub(in crate::broker) fn serve_detaching(&mut self, now: Instant) {
        let mut k = 0;
        while k < self.detaching.len() {
            let d = &mut self.detaching[k];
            let exited = match d.target {
                Target::Supervised(id) => self
                    .supervised
                    .iter()
                    .find(|s| s.kept.id == id)
                    .and_then(|s| s.kept.status.clone())
                    .map(|ending| DetachOutcome::Ended {
                        ending,
                        killed: d.killed,
                    }),
                Target::Unsupervised => d
                    .pidfd
                    .as_ref()
                    .is_none_or(has_exited)
                    .then_some(DetachOutcome::Exited { killed: d.killed }),
            };
            if let Some(outcome) = exited {
                let _ = d.conn.send(&FromBroker::Detached(outcome), &[]);
                self.detaching.swap_remove(k);
                continue;
            }
            if now > d.deadline && !d.killed {
                match d.target {
                    Target::Supervised(id) => {
                        if let Some(s) = self.supervised.iter().find(|s| s.kept.id == id) {
                            s.signal(Signal::KILL);
                        }
                    }
                    Target::Unsupervised => {
                        if let Some(fd) = &d.pidfd {
                            let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
                        }
                    }
                }
                d.killed = true;
                d.deadline = now + Duration::from_secs(5);
            } else if now > d.deadline {
                let _ = d.conn.send(
                    &FromBroker::Error {
                        message: "the consumer's process did not exit".to_owned(),
                    },
                    &[],
                );
                self.detaching.swap_remove(k);
                continue;
            }
            k += 1;
        }
    }
}

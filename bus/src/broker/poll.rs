//! The loop's turn: one poll set with a token per entry, served by token; the first message
//! of a connection; housekeeping.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use rustix::event::{PollFd, PollFlags};

use super::{Broker, MAX_PENDING, PENDING_TIMEOUT, Slot};
use crate::control::{Conn, FromBroker, Listener, PROTOCOL_VERSION, ProducerStatus, ToBroker};

/// What an entry of the poll set stands for. Entries are keyed by slot, so serving one (and
/// removing it) never changes what another token names.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The listening socket (new connections are accepted every turn).
    Listener,
    /// A connection that has not said what it is.
    Pending(Slot),
    /// A producer's connection.
    Producer(Slot),
    /// The pidfd of a producer whose connection closed before its process had fully exited:
    /// readable when it has.
    ProducerExit(Slot),
    /// A consumer's connection.
    Consumer(Slot),
    /// The pidfd of a consumer process the supervisor watches (served in `supervise`).
    Watched,
}

impl Broker {
    /// One turn of the loop: wait for any socket (or 250 ms), then serve what is ready.
    pub(super) fn turn(&mut self, listener: &Listener) {
        let Some(ready) = self.wait(listener) else {
            return;
        };
        // In the order of the poll set: exited producers, consumers, producers, pending.
        for source in ready {
            match source {
                Source::ProducerExit(k) => self.producer_exited(k),
                Source::Consumer(k) => self.serve_consumer(k),
                Source::Producer(k) => self.serve_producer(k),
                Source::Pending(k) => {
                    if let Some((conn, since)) = self.pending.remove(&k) {
                        self.serve_new(conn, since);
                    }
                }
                Source::Listener | Source::Watched => {}
            }
        }
        // A new connection's first message is usually there already.
        let mut accepted = Vec::new();
        while let Ok(Some(conn)) = listener.accept() {
            accepted.push(conn);
        }
        for conn in accepted {
            self.serve_new(conn, Instant::now());
        }
        self.trim_pending();
        self.supervise(listener);
        self.housekeeping();
    }

    /// Polls every socket and pidfd (250 ms at most); the sources that are ready, in the
    /// order they are served. `None`: the poll failed (a signal).
    fn wait(&self, listener: &Listener) -> Option<Vec<Source>> {
        let mut set: Vec<(Source, BorrowedFd<'_>)> = vec![(Source::Listener, listener.fd())];
        for (&k, p) in &self.producers {
            if let (None, ProducerStatus::Disconnected, Some(fd)) = (&p.conn, p.status, &p.pidfd) {
                set.push((Source::ProducerExit(k), fd.as_fd()));
            }
        }
        for (&k, c) in &self.consumers {
            set.push((Source::Consumer(k), c.conn.fd()));
        }
        for (&k, p) in &self.producers {
            if let Some(c) = &p.conn {
                set.push((Source::Producer(k), c.fd()));
            }
        }
        for (&k, (c, _)) in &self.pending {
            set.push((Source::Pending(k), c.fd()));
        }
        for fd in self.watched_pidfds() {
            set.push((Source::Watched, fd.as_fd()));
        }
        let mut fds: Vec<PollFd<'_>> = set
            .iter()
            .map(|&(_, fd)| PollFd::from_borrowed_fd(fd, PollFlags::IN))
            .collect();
        let ts = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 250_000_000,
        };
        rustix::event::poll(&mut fds, Some(&ts)).ok()?;
        Some(
            set.iter()
                .zip(&fds)
                .filter(|(_, fd)| !fd.revents().is_empty())
                .map(|(&(source, _), _)| source)
                .collect(),
        )
    }

    /// Keeps a connection that has not said what it is yet.
    pub(super) fn add_pending(&mut self, conn: Conn, since: Instant) {
        let k = self.new_slot();
        self.pending.insert(k, (conn, since));
    }

    /// At most [`MAX_PENDING`] connections that have not said what they are: the oldest go.
    fn trim_pending(&mut self) {
        let Some(excess) = self.pending.len().checked_sub(MAX_PENDING) else {
            return;
        };
        let mut by_age: Vec<(Instant, Slot)> = self
            .pending
            .iter()
            .map(|(&k, (_, since))| (*since, k))
            .collect();
        by_age.sort_unstable();
        for (_, k) in &by_age[..excess] {
            self.pending.remove(k);
        }
    }

    /// The first message on a connection says what it is.
    pub(super) fn serve_new(&mut self, mut conn: Conn, since: Instant) {
        let (msg, fds) = match conn.try_recv::<ToBroker>() {
            Ok(Some(m)) => m,
            Ok(None) => {
                self.add_pending(conn, since);
                return;
            }
            Err(_) => return,
        };
        let version = match &msg {
            ToBroker::HelloProducer { version, .. }
            | ToBroker::HelloConsumer { version, .. }
            | ToBroker::Ls { version, .. }
            | ToBroker::Descriptors { version, .. }
            | ToBroker::SetFilter { version, .. }
            | ToBroker::Shutdown { version, .. }
            | ToBroker::Attach { version, .. }
            | ToBroker::Detach { version, .. }
            | ToBroker::Exiting { version, .. } => Some(*version),
            ToBroker::ConsumerStats { .. }
            | ToBroker::Subscribed
            | ToBroker::ProducerFilter { .. } => None,
        };
        if version != Some(PROTOCOL_VERSION) {
            crate::say!(
                "snapbus broker: refused a connection (pid {}) speaking protocol version {} \
                 (this broker speaks {PROTOCOL_VERSION}): another snapbus release",
                conn.peer_pid()
                    .map_or_else(|| "?".into(), |p| p.to_string()),
                version.map_or_else(|| "none".into(), |v| v.to_string()),
            );
            let _ = conn.send(
                &FromBroker::Error {
                    message: format!(
                        "protocol version {version:?} is not this broker's ({PROTOCOL_VERSION}); \
                         use matching snapbus versions"
                    ),
                },
                &[],
            );
            return;
        }
        match msg {
            ToBroker::HelloProducer {
                info, previous_id, ..
            } => self.add_producer(conn, info, fds, previous_id),
            ToBroker::HelloConsumer {
                info,
                previous_id,
                counters,
                lanes,
                ..
            } => self.add_consumer(conn, info, previous_id, (counters, lanes)),
            ToBroker::Ls { census, .. } => {
                let state = self.state(census);
                self.keep_shown_counters(&state);
                let _ = conn.send(&FromBroker::State(Box::new(state)), &[]);
            }
            ToBroker::Descriptors { id, .. } => {
                let found = self.descriptors(&id);
                let _ = conn.send(&FromBroker::Descriptors(found), &[]);
            }
            ToBroker::SetFilter { directives, .. } => {
                let reply = match crate::level::check_filter_size(&directives) {
                    Ok(()) => {
                        self.set_filter(directives);
                        FromBroker::Ok
                    }
                    Err(message) => FromBroker::Error { message },
                };
                let _ = conn.send(&reply, &[]);
            }
            ToBroker::Shutdown { keep_consumers, .. } => {
                let _ = conn.send(&FromBroker::Ok, &[]);
                self.shutdown = true;
                self.keep_consumers = keep_consumers;
            }
            ToBroker::Exiting { exit_code, .. } => self.exiting(conn.peer_pid(), exit_code),
            ToBroker::Attach { request, .. } => self.attach(conn, request),
            ToBroker::Detach { consumer_id, .. } => self.detach(conn, consumer_id),
            ToBroker::ConsumerStats { .. }
            | ToBroker::Subscribed
            | ToBroker::ProducerFilter { .. } => {}
        }
    }

    /// The bus filter: kept (and saved) for producers to come, sent to those connected.
    pub(super) fn set_filter(&mut self, directives: String) {
        self.filter = directives.clone();
        self.dirty = true;
        for p in self.producers.values() {
            if let Some(c) = &p.conn {
                let _ = c.send(
                    &FromBroker::Filter {
                        directives: directives.clone(),
                    },
                    &[],
                );
            }
        }
    }

    /// Forgetting dead producers after the retention period, and dropping connections that
    /// never said what they are.
    fn housekeeping(&mut self) {
        let now = Instant::now();
        self.read_counters(now);
        self.pending
            .retain(|_, (_, since)| now.duration_since(*since) < PENDING_TIMEOUT);
        let retention = self.retention;
        self.producers
            .retain(|_, p| p.gone_at.is_none_or(|t| now.duration_since(t) < retention));
        self.stop_when_idle(now);
    }

    /// With an idle limit: shuts down once no producer but the ones this broker supervises has
    /// been connected, and no consumer but those (a `--record` recorder would otherwise keep it
    /// forever), for that long. A `snapbus echo` left running keeps the bus; so does a script
    /// that starts within the limit after the last one ended.
    fn stop_when_idle(&mut self, now: Instant) {
        let Some(limit) = self.idle_exit else { return };
        // Supervised consumers that emit (the aggregator's summaries) do not count either.
        let supervised = |pid: u32| {
            self.supervised
                .iter()
                .any(|s| s.running() && s.kept.pid == pid)
        };
        let busy = self
            .producers
            .values()
            .any(|p| p.gone_at.is_none() && !supervised(p.info.pid))
            || self
                .consumers
                .values()
                .any(|c| self.supervised_by_id(c.id).is_none())
            || !self.detaching.is_empty();
        if busy {
            self.idle_since = None;
            return;
        }
        let since = *self.idle_since.get_or_insert(now);
        if now.duration_since(since) >= limit {
            crate::say!(
                "snapbus broker: bus '{}' idle for {} s (no producer, no consumer): stopping",
                self.dir.name(),
                limit.as_secs()
            );
            self.shutdown = true;
        }
    }
}

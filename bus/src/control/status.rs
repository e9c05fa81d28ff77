//! Statuses of producers and consumers as `snapbus ls` shows them: enums on the wire, rendered
//! as text (`live`, `running (restarted 1x)`, `exited 1; restart 2 of 5 in 2s`) by their
//! `Display`, never parsed back.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A producer's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProducerStatus {
    /// Connected and writing.
    Live,
    /// Its process is gone; its lane is marked dead and stays readable for the retention.
    Dead,
    /// Alive, but its connection closed.
    Disconnected,
    /// It closed its lane (it writes nothing more).
    Closed,
}

impl ProducerStatus {
    /// `live`, `dead`, `disconnected` or `closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProducerStatus::Live => "live",
            ProducerStatus::Dead => "dead",
            ProducerStatus::Disconnected => "disconnected",
            ProducerStatus::Closed => "closed",
        }
    }

    /// Whether it may still write records (not closed, not dead).
    pub fn writing(self) -> bool {
        !matches!(self, ProducerStatus::Closed | ProducerStatus::Dead)
    }
}

impl fmt::Display for ProducerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a consumer's process runs: restarts under supervision, and whether this broker took it
/// over from an earlier one (the default: never restarted, started by this broker or not
/// supervised).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// How many times the broker restarted it.
    pub restarts: u32,
    /// Re-adopted from an earlier broker of the bus (not this broker's child).
    pub readopted: bool,
}

impl fmt::Display for Run {
    /// `running`, `running (re-adopted)`, `running (restarted 2x)`,
    /// `running (restarted 2x, re-adopted)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.restarts, self.readopted) {
            (0, false) => f.write_str("running"),
            (0, true) => f.write_str("running (re-adopted)"),
            (n, false) => write!(f, "running (restarted {n}x)"),
            (n, true) => write!(f, "running (restarted {n}x, re-adopted)"),
        }
    }
}

/// A consumer's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsumerStatus {
    /// Connected and reporting its counters.
    Running(Run),
    /// Connected, but it has not reported its counters for a while (stopped, hung or stuck in
    /// its own code).
    Stale {
        /// Seconds since its last report.
        silent_secs: u64,
        /// How it runs.
        run: Run,
    },
    /// Supervised and running, but not connected (re-adopted and not rejoined yet).
    NotConnected(Run),
    /// Supervised, and its process has ended (it may be due for a restart: see
    /// [`Ending::next`]).
    Ended(Ending),
}

impl ConsumerStatus {
    /// Running (connected or not), stale excepted: what `ls` shows as `running…`.
    pub fn is_running(&self) -> bool {
        matches!(
            self,
            ConsumerStatus::Running(_) | ConsumerStatus::NotConnected(_)
        )
    }
}

impl fmt::Display for ConsumerStatus {
    /// `running`, `stale (no report for 7 s; running)`, `running (re-adopted) (not
    /// connected)`, or the [`Ending`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerStatus::Running(run) => write!(f, "{run}"),
            ConsumerStatus::Stale { silent_secs, run } => {
                write!(f, "stale (no report for {silent_secs} s; {run})")
            }
            ConsumerStatus::NotConnected(run) => write!(f, "{run} (not connected)"),
            ConsumerStatus::Ended(ending) => write!(f, "{ending}"),
        }
    }
}

/// How a supervised consumer's process ended, and what the broker does about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    /// How it ended.
    pub how: End,
    /// What follows.
    pub next: AfterEnd,
}

impl fmt::Display for Ending {
    /// `exited 1; restart 2 of 5 in 2s`, `killed by signal 9; not restarted`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.how, self.next)
    }
}

/// How a supervised consumer's process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// `exited N`.
    Exited(i32),
    /// `killed by signal N`.
    Signalled(i32),
    /// `ended` (neither an exit code nor a signal).
    Ended,
    /// A re-adopted consumer that ended without saying its exit code: killed, presumably.
    Unsaid,
    /// It exited with this code while no broker was running (it left a note).
    ExitedUnwatched(i32),
    /// It ended while no broker was running, without a note.
    EndedUnwatched,
    /// Its first start failed (the `attach` fails; the entry goes).
    FailedToStart,
    /// A restart could not start it (why).
    RestartFailed(String),
    /// `snapbus down` killed it: it did not exit within the grace period of SIGTERM.
    KilledAfterTerm,
    /// A re-adopted consumer `snapbus down` stopped (its exit status is unknown).
    Stopped,
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Exited(code) => write!(f, "exited {code}"),
            End::Signalled(sig) => write!(f, "killed by signal {sig}"),
            End::Ended => f.write_str("ended"),
            End::Unsaid => f.write_str("ended without saying how (killed?)"),
            End::ExitedUnwatched(code) => write!(f, "exited {code} while no broker was running"),
            End::EndedUnwatched => {
                f.write_str("ended while no broker was running (exit status unknown)")
            }
            End::FailedToStart => f.write_str("failed to start"),
            End::RestartFailed(why) => write!(f, "could not be restarted: {why}"),
            End::KilledAfterTerm => f.write_str("killed: it did not exit within 10 s of SIGTERM"),
            End::Stopped => f.write_str("stopped"),
        }
    }
}

/// What follows the end of a supervised consumer's process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AfterEnd {
    /// Nothing (it succeeded, has no restart policy, or was asked to stop).
    Nothing,
    /// It is restarted: restart `restart` of `of`, in `in_secs` seconds.
    Restart {
        /// Which restart this will be (1 for the first).
        restart: u32,
        /// The most restarts there are.
        of: u32,
        /// Seconds until it.
        in_secs: u64,
    },
    /// Not restarted: it exited with the code that says a restart cannot fix it.
    Unfixable,
    /// Not restarted: it ended before it subscribed.
    BeforeSubscribed,
    /// Not restarted again after this many restarts.
    RestartsExhausted(u32),
    /// Not restarted: detached while waiting for its restart.
    NotRestarted,
    /// Not restarted: the bus stopped while it waited for its restart.
    BusStopped,
    /// `snapbus down` stopped it.
    ByDown,
}

impl fmt::Display for AfterEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AfterEnd::Nothing => Ok(()),
            AfterEnd::Restart {
                restart,
                of,
                in_secs,
            } => write!(f, "; restart {restart} of {of} in {in_secs}s"),
            AfterEnd::Unfixable => {
                f.write_str(" (a restart cannot fix this; see its log); not restarted")
            }
            AfterEnd::BeforeSubscribed => f.write_str(" before it subscribed; not restarted"),
            AfterEnd::RestartsExhausted(n) => {
                write!(f, "; not restarted again after {n} restarts")
            }
            AfterEnd::NotRestarted => f.write_str("; not restarted"),
            AfterEnd::BusStopped => f.write_str("; not restarted (bus stopped)"),
            AfterEnd::ByDown => f.write_str(" (by `snapbus down`)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts `ls` has always shown (scripts and tests read them).
    #[test]
    fn statuses_render_as_before() {
        let run = |restarts, readopted| Run {
            restarts,
            readopted,
        };
        let cases: Vec<(ConsumerStatus, &str)> = vec![
            (ConsumerStatus::Running(run(0, false)), "running"),
            (
                ConsumerStatus::Running(run(2, true)),
                "running (restarted 2x, re-adopted)",
            ),
            (
                ConsumerStatus::Stale {
                    silent_secs: 7,
                    run: run(0, false),
                },
                "stale (no report for 7 s; running)",
            ),
            (
                ConsumerStatus::NotConnected(run(0, true)),
                "running (re-adopted) (not connected)",
            ),
            (
                ConsumerStatus::Ended(Ending {
                    how: End::Exited(1),
                    next: AfterEnd::Restart {
                        restart: 2,
                        of: 5,
                        in_secs: 2,
                    },
                }),
                "exited 1; restart 2 of 5 in 2s",
            ),
            (
                ConsumerStatus::Ended(Ending {
                    how: End::Signalled(9),
                    next: AfterEnd::NotRestarted,
                }),
                "killed by signal 9; not restarted",
            ),
            (
                ConsumerStatus::Ended(Ending {
                    how: End::Exited(78),
                    next: AfterEnd::Unfixable,
                }),
                "exited 78 (a restart cannot fix this; see its log); not restarted",
            ),
        ];
        for (status, text) in cases {
            assert_eq!(status.to_string(), text);
        }
        assert_eq!(ProducerStatus::Live.to_string(), "live");
        assert_eq!(ProducerStatus::Disconnected.as_str(), "disconnected");
    }
}

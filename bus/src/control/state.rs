//! What the broker tells its clients, as data: who the producers and consumers are, the bus's
//! state as `snapbus ls` shows it, and the outcomes of `attach` and `detach`. These travel in
//! the control messages ([`super::msg`]) but are not the protocol: the client
//! ([`crate::client`]) hands them to users as they are.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::status::{ConsumerStatus, Ending, ProducerStatus};
use crate::status::StatusEntry;

/// How long a detached consumer may take to flush and exit before the broker kills it.
pub(crate) const DETACH_GRACE: Duration = Duration::from_secs(10);

/// What a producer says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerInfo {
    /// Process id.
    pub pid: u32,
    /// A short name (the program's, unless the experiment sets one).
    pub name: String,
    /// The command line.
    pub cmdline: Vec<String>,
    /// Run metadata: a session tag (groups runs of one study).
    pub session_tag: Option<String>,
    /// Run metadata: a performance tag (e.g. the hardware or config variant).
    pub perf_tag: Option<String>,
    /// The lane's identity (its commit-tag salt): the same across broker restarts.
    pub lane_id: u64,
    /// When the producer started, CLOCK_REALTIME nanoseconds.
    pub started_nanos: u64,
    /// Its records are re-emitted from another machine's bus (by `snapbus bridge --receive`):
    /// bridges never send them out again, so two bridges on one bus cannot relay each other's
    /// records in a loop.
    #[serde(default)]
    pub relayed: bool,
}

/// What a consumer says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerInfo {
    /// Process id.
    pub pid: u32,
    /// Its kind (`echo`, `hz`, `recorder`, …).
    pub kind: String,
    /// Schema id globs it subscribes to (empty: everything).
    pub subscriptions: Vec<String>,
}

/// A lane a consumer refused to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedLane {
    /// The lane ([`ProducerInfo::lane_id`]).
    pub lane_id: u64,
    /// Its producer, as `'name' (pid N)`.
    pub producer: String,
    /// Why (the validation error).
    pub reason: String,
}

/// A producer as `snapbus ls` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProducerState {
    /// The broker's id.
    pub id: u64,
    /// What it said about itself.
    pub info: ProducerInfo,
    /// Live, dead (process gone), disconnected (alive, connection closed) or closed (it
    /// closed its lane).
    pub status: ProducerStatus,
    /// Records committed to its lane.
    pub frames: u64,
    /// Records per second over the last few seconds: the change of the lane's commit counter
    /// between two of the broker's readings of it (no ring is scanned for it).
    pub rate_hz: f64,
    /// Records dropped: refused by the lane (lap guard, oversize) or aborted (did not encode).
    pub dropped: u64,
    /// Lane capacity in bytes.
    pub lane_bytes: u64,
    /// Seconds between the oldest and the newest record its lane holds now: how far back a
    /// consumer starting from the oldest record, or a `snapshot`, can see (0 with fewer than
    /// two records).
    pub history_secs: f64,
    /// When the oldest record its lane holds was written (CLOCK_REALTIME nanoseconds), if any.
    pub history_start_nanos: Option<u64>,
    /// Records its lane holds now.
    pub history_records: u64,
    /// The sequence number of the oldest record its lane holds, if any: above 0 once older
    /// records were overwritten (the ring has wrapped).
    pub history_first_seq: Option<u64>,
    /// Seconds since the ring census behind the `history_*` fields and the schemas' rates and
    /// records in rings was taken (`None`: none was, yet). See [`Census`].
    pub census_age_secs: Option<f64>,
    /// The level filter in force in the producer (the bus filter if one is set, else its
    /// own), as it reported it; `None` if it did not (not a `snapbus` telemetry producer).
    pub filter: Option<String>,
    /// The producer's own filter (`SNAPBUS_FILTER`), in force whenever the bus has none.
    pub own_filter: Option<String>,
}

/// A consumer as `snapbus ls` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerState {
    /// The broker's id.
    pub id: u64,
    /// What it said about itself.
    pub info: ConsumerInfo,
    /// Records delivered.
    pub delivered: u64,
    /// Records lost: those it counted, plus those the rings have overwritten past its last
    /// reported cursors (which it will count when it reads on).
    pub lost: u64,
    /// Records lost to damaged memory in the rings (not in `lost`).
    pub damaged: u64,
    /// Garbage spots it skipped in the rings.
    pub garbage: u64,
    /// Records it skipped because their schema key is not in their producer's catalog (a
    /// producer's bug or damage): never delivered, so counted here rather than lost silently.
    #[serde(default)]
    pub unknown_keys: u64,
    /// Bytes behind the lanes' tails, from its last reported cursors and the tails now.
    pub lag_bytes: u64,
    /// Seconds since its last report.
    pub report_age_secs: f64,
    /// Lanes it refused to read, as `producer 'name' (pid N): why`.
    pub refused: Vec<String>,
    /// Started by `snapbus attach` and supervised by the broker.
    pub supervised: bool,
    /// Running, stale (it stopped reporting: stopped, hung or stuck in its own code), or how
    /// a supervised consumer ended (`exited 0`, `killed by signal 9`); its `Display` is the
    /// text `ls` shows.
    pub status: ConsumerStatus,
    /// A supervised consumer's output.
    pub log: Option<String>,
    /// Its own status board as last reported ([`crate::status`]): an exporter's state and
    /// counters, a recorder's file.
    pub board: Vec<StatusEntry>,
}

/// A schema as `snapbus ls` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemaState {
    /// Schema id.
    pub id: String,
    /// Version.
    pub version: u32,
    /// Descriptor fingerprint (hex).
    pub fingerprint: String,
    /// The descriptor's type, as text (`struct { episode: u32, … }`).
    pub descriptor: String,
    /// Another producer registered this id and version with a different descriptor: the two
    /// cannot be mixed (each is still decoded with its own descriptor).
    pub conflict: bool,
    /// Ids of the producers that registered it.
    pub producers: Vec<u64>,
    /// Records of this schema per second, from the timestamps in the rings (as of the
    /// producers' last ring census: see [`Census`]).
    pub rate_hz: f64,
    /// Records of it in the rings now.
    pub in_rings: u64,
}

/// The reply to `Ls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusState {
    /// The bus name.
    pub bus: String,
    /// The broker's pid.
    pub broker_pid: u32,
    /// The bus filter: directives in force in every producer, present and future, overriding
    /// their own `SNAPBUS_FILTER` until `snapbus filter --reset` (empty: none, every producer
    /// uses its own).
    pub filter: String,
    /// Producers, live and recently dead.
    pub producers: Vec<ProducerState>,
    /// Consumers.
    pub consumers: Vec<ConsumerState>,
    /// Schemas.
    pub schemas: Vec<SchemaState>,
    /// Ring censuses the broker has run since it started (each reads every frame header of
    /// one ring, on the broker's one thread): what asking for [`Census::Fresh`] costs.
    pub census_runs: u64,
    /// Producers the broker refused (the most recent few), as `producer 'name' (pid N): why
    /// (refused K times)`: their records are in their lanes, but no consumer is handed them.
    #[serde(default)]
    pub refused_producers: Vec<String>,
}

/// How fresh the ring census in a [`BusState`] must be. The census reads the frame headers of
/// a producer's ring (up to millions of frames, on the broker's one thread) for what only it
/// can tell: the history a ring holds (`history_*`), and each schema's rate and records in
/// the rings. Everything else, the producers' rates included, comes from counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Census {
    /// Run none: the census fields are those of each ring's last census, if any (monitors that
    /// poll, such as the Prometheus exporter's health thread).
    Skip,
    /// Run a ring's census again only if its last is older than a few seconds (`snapbus ls`).
    #[default]
    Recent,
    /// Run every ring's census now (`snapbus ls --history`).
    Fresh,
}

/// What the broker starts for [`BusClient::attach`](crate::client::BusClient::attach): its own
/// snapbus executable with `args`, in `cwd`, supervised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachRequest {
    /// The consumer's kind (`recorder`, …), for messages.
    pub kind: String,
    /// Arguments of the snapbus executable (`["record", "-o", …]`).
    pub args: Vec<String>,
    /// Working directory (relative paths in `args` are the user's).
    pub cwd: String,
    /// Restart the consumer when it fails (exits non-zero or is killed), with backoff.
    pub restart: bool,
}

/// A consumer the broker started, once it is subscribed and reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attached {
    /// The broker's id of the consumer (for [`detach`](crate::client::BusClient::detach)).
    pub id: u64,
    /// Its process id.
    pub pid: u32,
    /// Where its output goes.
    pub log: String,
}

/// How a detached consumer's process ended. Its `Display` is what `snapbus detach` prints:
/// `exited 0`, `killed by signal 15; not restarted`, `exited, killed after 10s without
/// exiting`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DetachOutcome {
    /// A supervised consumer ended (or, waiting for a restart, is not restarted): how.
    Ended {
        /// How it ended, and that nothing follows.
        ending: Ending,
        /// It did not exit within the grace period after SIGTERM and was killed.
        killed: bool,
    },
    /// An unsupervised consumer's process exited (its exit status is its parent's to read).
    Exited {
        /// It did not exit within the grace period after SIGTERM and was killed.
        killed: bool,
    },
}

impl DetachOutcome {
    /// Whether the broker had to kill it (SIGKILL after the grace period of SIGTERM).
    pub fn killed(&self) -> bool {
        match self {
            DetachOutcome::Ended { killed, .. } | DetachOutcome::Exited { killed } => *killed,
        }
    }
}

impl fmt::Display for DetachOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DetachOutcome::Ended { ending, .. } => write!(f, "{ending}")?,
            DetachOutcome::Exited { .. } => f.write_str("exited")?,
        }
        if self.killed() {
            write!(f, ", killed after {DETACH_GRACE:?} without exiting")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::status::{AfterEnd, End};

    /// `snapbus detach` prints what it printed when the outcome travelled as text.
    #[test]
    fn detach_outcomes_render_as_before() {
        let ended = |killed| DetachOutcome::Ended {
            ending: Ending {
                how: End::Signalled(15),
                next: AfterEnd::NotRestarted,
            },
            killed,
        };
        assert_eq!(
            ended(false).to_string(),
            "killed by signal 15; not restarted"
        );
        assert_eq!(
            ended(true).to_string(),
            "killed by signal 15; not restarted, killed after 10s without exiting"
        );
        assert!(ended(true).killed());
        assert_eq!(
            DetachOutcome::Exited { killed: false }.to_string(),
            "exited"
        );
        assert_eq!(
            DetachOutcome::Exited { killed: true }.to_string(),
            "exited, killed after 10s without exiting"
        );
    }
}

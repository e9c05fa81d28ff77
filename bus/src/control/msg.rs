//! Control messages, postcard-encoded, one per packet. Every first message of a connection
//! carries [`PROTOCOL_VERSION`]: a broker answers another version with an `Error` naming both
//! versions. A packet that does not decode (garbage, or a message this broker does not know)
//! closes that connection, nothing else; postcard is not self-describing, so any change to a
//! message bumps the version.

use serde::{Deserialize, Serialize};

use super::status::{ConsumerStatus, ProducerStatus};
use crate::status::StatusEntry;

/// Bumped on any incompatible change; the broker refuses other versions with a clear error.
pub const PROTOCOL_VERSION: u32 = 4;

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

/// A lane as the broker describes it to consumers (sent with two fds: the data lane and the
/// producer's catalog lane).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneInfo {
    /// The broker's id for the producer.
    pub producer_id: u64,
    /// The producer.
    pub producer: ProducerInfo,
    /// Whether the producer is gone (its lane is kept readable for a while).
    pub dead: bool,
}

/// A consumer's cursor in one lane (in [`ToBroker::ConsumerStats`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneCursor {
    /// The lane ([`ProducerInfo::lane_id`]).
    pub lane_id: u64,
    /// The absolute lane position of the next frame it reads.
    pub position: u64,
    /// The sequence number of the next record it expects, once known: every record before it
    /// was read or counted as lost.
    pub expected_seq: Option<u64>,
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

/// Messages to the broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToBroker {
    /// A producer joins (fds: data lane, catalog lane).
    HelloProducer {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// Who it is.
        info: ProducerInfo,
        /// The id an earlier broker of this bus gave it (it rejoins after a broker restart):
        /// the broker gives it back unless another peer holds it.
        previous_id: Option<u64>,
    },
    /// A consumer joins.
    HelloConsumer {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// Who it is.
        info: ConsumerInfo,
        /// The id an earlier broker of this bus gave it (it rejoins after a broker restart):
        /// the broker gives it back unless another peer holds it.
        previous_id: Option<u64>,
    },
    /// A consumer's counters and cursors (sent about twice a second while it reads; a
    /// consumer that stops sending them is shown stale, and the broker works out from its
    /// last cursors what the rings have overwritten since).
    ConsumerStats {
        /// Records delivered.
        delivered: u64,
        /// Records lost (overwritten before they were read, or left unfinished by a dead
        /// producer).
        lost: u64,
        /// Records lost to damaged memory in the rings (garbage where they were), not counted
        /// in `lost`.
        damaged: u64,
        /// Garbage spots skipped in the rings.
        garbage: u64,
        /// Where it is in each lane it still reads.
        lanes: Vec<LaneCursor>,
        /// Lanes it refused to read (their header did not validate), with why.
        refused: Vec<RefusedLane>,
        /// Its own status board ([`crate::status`]): what it says about its work.
        board: Vec<StatusEntry>,
    },
    /// The CLI asks for the bus's state.
    Ls {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
    },
    /// The CLI sets the level filter of every producer, present and future, overriding their
    /// own (already validated by the CLI); empty directives remove the bus filter, and every
    /// producer goes back to its own (`snapbus filter --reset`).
    SetFilter {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// Directives (`SNAPBUS_FILTER` syntax); empty: reset.
        directives: String,
    },
    /// The CLI stops the broker. Supervised consumers are stopped first (SIGTERM; they
    /// finish their files) unless `keep_consumers`, in which case they keep running and the
    /// next broker of the bus re-adopts them.
    Shutdown {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// Leave supervised consumers running.
        keep_consumers: bool,
    },
    /// The CLI asks the broker to start a consumer it supervises: the broker's own snapbus
    /// executable with `args`, in `cwd`. Answered with `Attached` once the consumer is
    /// subscribed and reading (or `Error`).
    Attach {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// The consumer's kind (`recorder`, …), for messages.
        kind: String,
        /// Arguments of the snapbus executable (`["record", "-o", …]`).
        args: Vec<String>,
        /// Working directory (relative paths in `args` are the user's).
        cwd: String,
        /// Restart the consumer when it fails (exits non-zero or is killed), with backoff.
        restart: bool,
    },
    /// The CLI asks the broker to stop a consumer (SIGTERM: it flushes and exits); answered
    /// with `Detached` once the process has exited.
    Detach {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// The broker's id of the consumer.
        consumer_id: u64,
    },
    /// A consumer has mapped every lane the broker sent before its `Ok` and is reading:
    /// nothing written from now on will be missed.
    Subscribed,
    /// A supervised consumer is about to exit with `exit_code` (sent on a connection of its
    /// own, just before the process exits). A broker that re-adopted the consumer after a
    /// restart is not its parent and cannot read its exit status: this is how it learns it. A
    /// re-adopted consumer that ends without saying it was killed, and counts as failed.
    Exiting {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// The process's exit code.
        exit_code: i32,
    },
    /// A producer's level filters (after its hello, and whenever they change), for `ls`.
    ProducerFilter {
        /// Its own filter (`SNAPBUS_FILTER`, or what the program set), in force whenever the
        /// bus has no filter.
        own: String,
        /// The filter in force now: the bus filter if one is set, else its own.
        effective: String,
    },
}

/// Messages from the broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromBroker {
    /// Reply to `HelloProducer` (fd: the doorbell page).
    WelcomeProducer {
        /// The broker's id for this producer.
        producer_id: u64,
        /// The bus name.
        bus: String,
        /// The filter directives in force (empty: keep your own).
        filter: String,
        /// Doorbells to ring after each record.
        wake_mask: u64,
    },
    /// Reply to `HelloConsumer` (fd: the doorbell page).
    WelcomeConsumer {
        /// The broker's id for this consumer.
        consumer_id: u64,
        /// The bus name.
        bus: String,
        /// This consumer's doorbell in the page.
        bell: u32,
    },
    /// A lane to read (fds: data lane, catalog lane).
    Lane(LaneInfo),
    /// A producer died; its lane stays readable.
    LaneDead {
        /// The broker's id for the producer.
        producer_id: u64,
    },
    /// New filter directives for a producer (empty: go back to your own filter).
    Filter {
        /// Directives.
        directives: String,
    },
    /// A producer's new wake mask.
    WakeMask {
        /// Doorbells to ring after each record.
        mask: u64,
    },
    /// Reply to `Ls`.
    State(Box<BusState>),
    /// Reply to `Attach`: the consumer is subscribed and reading.
    Attached {
        /// The broker's id of the consumer (for `detach`).
        consumer_id: u64,
        /// Its process id.
        pid: u32,
        /// Where its output goes.
        log: String,
    },
    /// Reply to `Detach`: the consumer's process has exited.
    Detached {
        /// How it exited (`exited 0`, `killed by signal 9`, …).
        status: String,
    },
    /// A request done.
    Ok,
    /// A request refused.
    Error {
        /// Why.
        message: String,
    },
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
    /// Records per second over the last few seconds.
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
    /// Records of this schema per second, from the timestamps in the rings.
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
}

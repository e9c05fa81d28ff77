//! Control messages, postcard-encoded, one per packet. Every first message of a connection
//! carries [`PROTOCOL_VERSION`]: a broker answers another version with an `Error` naming both
//! versions. A packet that does not decode (garbage, or a message this broker does not know)
//! closes that connection, nothing else; postcard is not self-describing, so any change to a
//! message bumps the version.

use serde::{Deserialize, Serialize};

use super::state::{
    AttachRequest, Attached, BusState, Census, ConsumerInfo, DetachOutcome, ProducerInfo,
    RefusedLane,
};
use crate::status::StatusEntry;

/// Bumped on any incompatible change; the broker refuses other versions with a clear error.
pub(crate) const PROTOCOL_VERSION: u32 = 7;

/// A lane as the broker describes it to consumers (sent with two fds: the data lane and the
/// producer's catalog lane).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LaneInfo {
    /// The broker's id for the producer.
    pub producer_id: u64,
    /// The producer.
    pub producer: ProducerInfo,
    /// Whether the producer is gone (its lane is kept readable for a while).
    pub dead: bool,
}

/// A consumer's counters, as it says them when it (re)joins a broker: a restarted broker's
/// `ls` starts from them, so they never go backwards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConsumerCounters {
    /// Records delivered.
    pub delivered: u64,
    /// Records lost (overwritten, or left unfinished by a dead producer).
    pub lost: u64,
    /// Records lost to damaged memory in the rings.
    pub damaged: u64,
    /// Garbage spots skipped in the rings.
    pub garbage: u64,
    /// Records of a schema key no catalog explained.
    #[serde(default)]
    pub unknown_keys: u64,
}

/// A consumer's cursor in one lane (in [`ToBroker::ConsumerStats`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LaneCursor {
    /// The lane ([`ProducerInfo::lane_id`]).
    pub lane_id: u64,
    /// The absolute lane position of the next frame it reads.
    pub position: u64,
    /// The sequence number of the next record it expects, once known: every record before it
    /// was read or counted as lost.
    pub expected_seq: Option<u64>,
}

/// Messages to the broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum ToBroker {
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
        /// Its counters so far (zero on its first join).
        counters: ConsumerCounters,
        /// Where it is in each lane it reads (none on its first join).
        lanes: Vec<LaneCursor>,
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
        /// Records skipped because their schema key is not in their producer's catalog.
        unknown_keys: u64,
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
        /// How fresh the ring census must be.
        census: Census,
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
        /// What to start.
        request: AttachRequest,
    },
    /// The CLI asks the broker to stop a consumer (SIGTERM: it flushes and exits); answered
    /// with `Detached` once the process has exited.
    Detach {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// The broker's id of the consumer.
        consumer_id: u64,
    },
    /// A producer asks which descriptors the bus knows under schema `id` (every producer's
    /// catalog, gone producers' too while they are kept), to check a new layout against them
    /// before its first record. Answered with `Descriptors`.
    Descriptors {
        /// [`PROTOCOL_VERSION`] of the sender.
        version: u32,
        /// The schema id.
        id: String,
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
pub(crate) enum FromBroker {
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
    /// Reply to `Descriptors`: each distinct descriptor of the id, once, in its canonical
    /// bytes.
    Descriptors(Vec<Vec<u8>>),
    /// Reply to `Attach`: the consumer is subscribed and reading.
    Attached(Attached),
    /// Reply to `Detach`: the consumer's process has exited.
    Detached(DetachOutcome),
    /// A request done.
    Ok,
    /// A request refused.
    Error {
        /// Why.
        message: String,
    },
}

//! How to run a consumer, and what a run says when it returns.

use std::time::Duration;

use snapbus_bus::lane::StartAt;
use snapbus_bus::status::StatusBoard;
use snapbus_bus::subscriber::{BatchReads, SubscribeError, SubscribeOptions};
use thiserror::Error;

use super::HookError;

/// How to run a consumer ([`run`](crate::run)) or read a bus ([`Reader`](crate::Reader)).
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// What to subscribe to: the consumer's kind (for `snapbus ls`), schema-id globs (empty:
    /// everything), where to start, a cut, lanes to skip, history counted as lost.
    pub subscribe: SubscribeOptions,
    /// How often [`Consumer::flush`](crate::Consumer::flush) is called while running
    /// ([`Item::Flush`](crate::Item::Flush)).
    pub flush_every: Duration,
    /// Return once every producer on the bus has ended.
    pub until_end: bool,
    /// Return on SIGINT or SIGTERM (after a flush). Off when the caller handles signals.
    pub handle_signals: bool,
    /// The consumer's own status board, sent with its counters so that `snapbus ls` shows it
    /// (see [`snapbus_bus::status`]); keep a clone to update it from any thread.
    pub status: Option<StatusBoard>,
    /// Read in batches (see [`BatchReads`]): for consumers that do not need microseconds (a
    /// recorder, an aggregator, an exporter). `None` (the default): each record at once.
    pub batch: Option<BatchReads>,
    /// On a signal or the stop flag, first read what the producers had emitted until then
    /// (their lanes cut where they were, [`Subscriber::cut_now`]), for at most this long (a
    /// second signal ends it); what is left unread then is reported
    /// ([`RunSummary::unread_bytes`]). Zero: stop at once. Lanes reaching their cut are not
    /// reported to the consumer as ended: their producers go on.
    ///
    /// [`Subscriber::cut_now`]: snapbus_bus::subscriber::Subscriber::cut_now
    pub drain_on_stop: Duration,
}

impl RunOptions {
    /// Every schema, from the latest record, flushing every second, until interrupted.
    pub fn new(kind: impl Into<String>) -> RunOptions {
        RunOptions {
            subscribe: SubscribeOptions {
                kind: kind.into(),
                globs: Vec::new(),
                start: StartAt::Latest,
                cut: false,
                skip_lanes: Vec::new(),
                count_history_as_lost: false,
            },
            flush_every: Duration::from_secs(1),
            until_end: false,
            handle_signals: true,
            status: None,
            batch: None,
            drain_on_stop: DRAIN_ON_STOP,
        }
    }
}

/// How long a stopped run goes on reading what was emitted before the stop, by default.
pub const DRAIN_ON_STOP: Duration = Duration::from_secs(2);

/// Why the run loop stopped with an error.
#[derive(Debug, Error)]
pub enum RunError {
    /// Subscribing or reading failed (no bus running, the broker refused, …).
    #[error(transparent)]
    Subscribe(#[from] SubscribeError),
    /// A hook failed.
    #[error("the consumer failed: {0}")]
    Hook(HookError),
    /// The signal handler could not be installed.
    #[error("installing a signal handler: {0}")]
    Signals(std::io::Error),
}

/// Why the run loop returned normally, and what it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// Records delivered.
    pub delivered: u64,
    /// Of those, the records whose numbers were taken where they lay in the ring
    /// ([`Consumer::extract`](crate::Consumer::extract)).
    pub read_in_place: u64,
    /// Records lost (reported to `on_lag`).
    pub lost: u64,
    /// Why it returned.
    pub reason: StopReason,
    /// Bytes of frames (records, their headers and padding) emitted before a stop (signal or
    /// stop flag) that were still unread when the run returned (the drain ran out of time, was
    /// cut short by a second signal, or was off): lost to this consumer. Zero when it read
    /// everything up to the stop, and when it never was told to stop.
    pub unread_bytes: u64,
    /// Lanes refused (their header or catalog did not validate) and not read: their records
    /// are not among those delivered (each was named on stderr when it was refused).
    pub refused_lanes: u64,
}

/// See [`RunSummary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A hook returned [`Flow::Stop`](crate::Flow::Stop) (or the reader's user ended it:
    /// [`Reader::end`](crate::Reader::end)).
    Consumer,
    /// SIGINT or SIGTERM.
    Signal,
    /// Every producer ended (`until_end`).
    AllEnded,
    /// The caller's stop flag.
    Stopped,
}

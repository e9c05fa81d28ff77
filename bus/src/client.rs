//! [`BusClient`]: the one client of a bus's broker. `snapbus ls`, `attach`, `detach`,
//! `filter` and `down`, and monitors such as the Prometheus exporter's health thread, ask the
//! broker through it; none of them speaks the control protocol, which is private to this
//! crate.
//!
//! Each request opens its own connection, so a client is cheap to keep and may be shared by
//! threads (`&self` methods). The broker answers every request from its one thread; a request
//! never makes it wait for anything but the answer it computes (`attach` and `detach` answer
//! when the consumer has subscribed or exited, while the broker serves others meanwhile).
//!
//! # Example
//!
//! ```no_run
//! use snapbus_bus::client::{BusClient, Census};
//! use snapbus_bus::runtime::{BusDir, BusName};
//!
//! let dir = BusDir::locate(&BusName::resolve(None)?);
//! let client = BusClient::connect(&dir)?;
//! let state = client.state_with(Census::Skip)?;
//! for p in &state.producers {
//!     println!("{} (pid {}): {:.1} records/s", p.info.name, p.info.pid, p.rate_hz);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::{Duration, Instant};

use thiserror::Error;

use snapbus_schemas::SchemaDescriptor;

use crate::control::{Conn, FromBroker, PROTOCOL_VERSION, ToBroker};
use crate::runtime::{BusDir, DEFAULT_BUS};

pub use crate::control::{
    AfterEnd, AttachRequest, Attached, BusState, Census, ConsumerInfo, ConsumerState,
    ConsumerStatus, ControlError, DetachOutcome, End, Ending, ProducerInfo, ProducerState,
    ProducerStatus, RefusedLane, Run, SchemaState,
};

/// How long [`BusClient`] waits for the broker to answer a quick request (state, filter,
/// down), unless [`BusClient::with_timeout`] says otherwise.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`BusClient::attach`] waits for the consumer to start and subscribe (the broker
/// gives up at 20 s).
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`BusClient::detach`] waits for the consumer to exit (the broker kills it 10 s
/// after SIGTERM, and answers within 5 s more).
pub const DETACH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`BusClient::down`] waits for the broker to stop its supervised consumers (each
/// may take a while to flush) and remove its socket.
pub const DOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request to the broker failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// No broker listens on the bus's socket.
    #[error("no bus '{bus}' is running — start one with `snapbus up{flag}`")]
    NotRunning {
        /// The bus.
        bus: String,
        /// ` --bus NAME` for a bus other than the default, else empty.
        flag: String,
    },
    /// The request could not be sent, or no answer came in time (a closed connection, a
    /// timeout, an answer that does not decode).
    #[error("talking to the broker of bus '{bus}': {source}")]
    Control {
        /// The bus.
        bus: String,
        /// What failed.
        #[source]
        source: ControlError,
    },
    /// The broker refused the request; its message says why (`no consumer 7 on bus …`, a
    /// consumer that failed to start, another snapbus release's protocol).
    #[error("{message}")]
    Refused {
        /// The broker's message.
        message: String,
    },
    /// The broker answered something that is not an answer to this request.
    #[error("unexpected reply from the broker of bus '{bus}': {reply}")]
    Unexpected {
        /// The bus.
        bus: String,
        /// The reply, as debug text.
        reply: String,
    },
    /// [`BusClient::down`]: the broker acknowledged, but its socket was still there after
    /// [`DOWN_TIMEOUT`].
    #[error("the broker of bus '{bus}' acknowledged but its socket is still there after {after:?}")]
    StillRunning {
        /// The bus.
        bus: String,
        /// How long it was waited for.
        after: Duration,
    },
}

/// A client of the broker of one bus.
#[derive(Debug, Clone)]
pub struct BusClient {
    dir: BusDir,
    timeout: Duration,
}

impl BusClient {
    /// A client of the broker of `dir`; fails with [`ClientError::NotRunning`] if none
    /// listens on its socket.
    pub fn connect(dir: &BusDir) -> Result<BusClient, ClientError> {
        let client = BusClient {
            dir: dir.clone(),
            timeout: REPLY_TIMEOUT,
        };
        drop(client.open()?);
        Ok(client)
    }

    /// The same client, waiting `timeout` (instead of [`REPLY_TIMEOUT`]) for the answers to
    /// quick requests: [`state`](Self::state), [`set_filter`](Self::set_filter) and
    /// [`down`](Self::down)'s acknowledgement.
    pub fn with_timeout(mut self, timeout: Duration) -> BusClient {
        self.timeout = timeout;
        self
    }

    /// The bus.
    pub fn dir(&self) -> &BusDir {
        &self.dir
    }

    /// The bus's state, as `snapbus ls` shows it, with each ring's census at most a few
    /// seconds old ([`Census::Recent`]).
    pub fn state(&self) -> Result<BusState, ClientError> {
        self.state_with(Census::Recent)
    }

    /// The bus's state with the ring census as fresh as `census` asks. A monitor that polls
    /// and needs neither the history the rings hold nor the schemas' rates asks for
    /// [`Census::Skip`]: the broker then reads only counters.
    pub fn state_with(&self, census: Census) -> Result<BusState, ClientError> {
        let msg = ToBroker::Ls {
            version: PROTOCOL_VERSION,
            census,
        };
        match self.request(&msg, self.timeout)? {
            FromBroker::State(s) => Ok(*s),
            other => Err(self.unexpected(&other)),
        }
    }

    /// The descriptors the bus knows under schema `id` (from every producer's catalog), each
    /// once: what a producer checks a new layout against before its first record.
    pub fn descriptors(&self, id: &str) -> Result<Vec<SchemaDescriptor>, ClientError> {
        let msg = ToBroker::Descriptors {
            version: PROTOCOL_VERSION,
            id: id.to_owned(),
        };
        match self.request(&msg, self.timeout)? {
            FromBroker::Descriptors(d) => Ok(d
                .iter()
                .filter_map(|b| SchemaDescriptor::from_canonical_bytes(b).ok())
                .collect()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Asks the broker to start a consumer it supervises; returns once the consumer is
    /// subscribed and reading (nothing emitted after this returns is missed), or with the
    /// broker's reason ([`ClientError::Refused`]) if it could not start.
    pub fn attach(&self, request: AttachRequest) -> Result<Attached, ClientError> {
        let msg = ToBroker::Attach {
            version: PROTOCOL_VERSION,
            request,
        };
        match self.request(&msg, ATTACH_TIMEOUT)? {
            FromBroker::Attached(a) => Ok(a),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Stops consumer `consumer_id` (supervised or not) with SIGTERM, so that it flushes, and
    /// returns once its process has exited, with how it ended.
    pub fn detach(&self, consumer_id: u64) -> Result<DetachOutcome, ClientError> {
        let msg = ToBroker::Detach {
            version: PROTOCOL_VERSION,
            consumer_id,
        };
        match self.request(&msg, DETACH_TIMEOUT)? {
            FromBroker::Detached(outcome) => Ok(outcome),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Sets the bus filter: `directives` (`SNAPBUS_FILTER` syntax, validated by the caller)
    /// are in force in every producer, present and future, in place of its own filter.
    /// Empty directives remove the bus filter ([`reset_filter`](Self::reset_filter)).
    pub fn set_filter(&self, directives: &str) -> Result<(), ClientError> {
        let msg = ToBroker::SetFilter {
            version: PROTOCOL_VERSION,
            directives: directives.to_owned(),
        };
        match self.request(&msg, self.timeout)? {
            FromBroker::Ok => Ok(()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Removes the bus filter: every producer goes back to its own.
    pub fn reset_filter(&self) -> Result<(), ClientError> {
        self.set_filter("")
    }

    /// Stops the broker, and the consumers it supervises unless `keep_consumers` (they then
    /// keep running and the next broker of the bus re-adopts them); returns once its socket
    /// is gone.
    pub fn down(&self, keep_consumers: bool) -> Result<(), ClientError> {
        let msg = ToBroker::Shutdown {
            version: PROTOCOL_VERSION,
            keep_consumers,
        };
        match self.request(&msg, self.timeout)? {
            FromBroker::Ok => {}
            other => return Err(self.unexpected(&other)),
        }
        let t0 = Instant::now();
        while self.dir.socket_path().exists() {
            if t0.elapsed() > DOWN_TIMEOUT {
                return Err(ClientError::StillRunning {
                    bus: self.bus(),
                    after: DOWN_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// A new connection to the broker (the broker answers the first message of each).
    fn open(&self) -> Result<Conn, ClientError> {
        Conn::connect(&self.dir.socket_path()).map_err(|_| ClientError::NotRunning {
            bus: self.bus(),
            flag: if self.dir.name().as_str() == DEFAULT_BUS {
                String::new()
            } else {
                format!(" --bus {}", self.dir.name())
            },
        })
    }

    /// Sends `msg` on a new connection and waits up to `timeout` for the answer; a refusal is
    /// [`ClientError::Refused`].
    fn request(&self, msg: &ToBroker, timeout: Duration) -> Result<FromBroker, ClientError> {
        let mut conn = self.open()?;
        let (reply, _fds) = conn
            .request(msg, timeout)
            .map_err(|source| ClientError::Control {
                bus: self.bus(),
                source,
            })?;
        match reply {
            FromBroker::Error { message } => Err(ClientError::Refused { message }),
            reply => Ok(reply),
        }
    }

    fn unexpected(&self, reply: &FromBroker) -> ClientError {
        ClientError::Unexpected {
            bus: self.bus(),
            reply: format!("{reply:?}"),
        }
    }

    fn bus(&self) -> String {
        self.dir.name().to_string()
    }
}

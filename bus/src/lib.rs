//! The snapbus data and control planes: shared-memory **lanes** that producers write and
//! consumers read, **doorbells** that let idle consumers sleep, the **broker** that introduces
//! producers to consumers ([`broker`], [`runtime`]; [`client`] asks it for the bus's state and
//! to start and stop consumers), and the two ends built on them: [`publisher`] (a process's
//! lane, catalog and broker connection) and [`subscriber`] (subscribe with schema globs, read
//! records straight from the lanes). The control protocol between them is private to this
//! crate. The only crate in the workspace allowed `unsafe` code; every `unsafe` block names the
//! fact that makes it sound.
//!
//! # Guarantees
//!
//! - **Producers never wait for consumers.** A lane is an overwrite ring written only by the
//!   threads of one producer process; a slow, stopped or dead consumer cannot slow it down.
//! - **Nothing torn, nothing twice, loss exact.** A reader validates every frame after reading
//!   it and discards what was overwritten meanwhile; it reports
//!   [`Poll::Lagged`](lane::Poll::Lagged) with the exact number of records it missed (from
//!   64-bit sequence numbers). The same holds for reads in place
//!   ([`Subscriber::next_in_place`](subscriber::Subscriber::next_in_place): what the closure
//!   made of a frame overwritten while it ran is dropped) and writes in place
//!   ([`Publisher::emit_with`](publisher::Publisher::emit_with): readers see a loan
//!   only once committed; a loan given up is skipped, not lost), and runs of records written
//!   in one claim ([`Publisher::emit_many`](publisher::Publisher::emit_many): each
//!   record is still framed and committed on its own; a writer killed mid-run leaves the
//!   records it committed readable and the rest of the run a counted hole).
//! - **Shared memory is untrusted.** Every header word, length and offset is bounds-checked;
//!   garbage is skipped and counted, never a panic, never an out-of-bounds access. Readers map
//!   lanes read-only and refuse segments that are not sealed against resizing (no SIGBUS).
//! - **Crashes stay local.** A producer killed at any point leaves a lane readers get past,
//!   with the hole reported; a killed reader costs the producer nothing. The broker is a
//!   control plane only: payloads never pass through it, and if it dies, lanes keep flowing
//!   and a restarted broker re-adopts them.
//!
//! # Example
//!
//! ```
//! use snapbus_bus::lane::{LaneConfig, Poll, RecordMeta, ShmLane, StartAt};
//!
//! // Producer: create a lane in a sealed memfd and write a record in place.
//! let config = LaneConfig { capacity: 1 << 20, max_frame: 64 << 10, block_size: 64 << 10 };
//! let lane = ShmLane::create("example", &config)?;
//! let mut writer = lane.lane().writer().expect("the creator maps its lane read-write");
//! let meta = RecordMeta { schema_key: 1, schema_version: 1, level: 2, emitter: 0 };
//! writer.write_bytes(meta, b"hello")?;
//!
//! // Consumer (normally another process, given the fd): map it read-only and read.
//! let view = ShmLane::open(lane.fd().try_clone_to_owned()?)?;
//! let mut reader = view.lane().reader(StartAt::Oldest);
//! match reader.poll() {
//!     Poll::Frame(frame) => assert_eq!(frame.payload, b"hello"),
//!     other => panic!("expected a frame, got {other:?}"),
//! }
//! assert_eq!(reader.poll(), Poll::Empty);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The protocol is described in the module docs of [`lane`] (layout, writer, reader) and
//! [`doorbell`], and in ARCHITECTURE.md ("Lanes").
//!
//! What most users need is re-exported here: the two ends ([`Publisher`], [`Subscriber`] and
//! their options, events and records), where a bus lives ([`BusDir`], [`BusName`]), and the
//! shared vocabulary ([`Level`], [`StartAt`], [`Glob`]). The modules hold the rest.

#![allow(unsafe_code)]

#[cfg(not(loom))]
pub mod broker;
#[cfg(not(loom))]
pub mod catalog;
#[cfg(not(loom))]
pub mod client;
pub mod clock;
#[cfg(not(loom))]
pub(crate) mod control;
pub mod doorbell;
#[cfg(not(loom))]
pub mod fork;
pub mod lane;
pub mod level;
#[cfg(not(loom))]
pub mod orphan;
// Lane memory: its types are re-exported by `lane`.
#[doc(hidden)]
pub mod mem;
#[cfg(not(loom))]
pub mod publisher;
#[cfg(not(loom))]
pub mod runtime;
// What `say!` expands to.
#[doc(hidden)]
pub mod say;
#[cfg(not(loom))]
mod segment;
#[cfg(not(loom))]
pub mod status;
#[doc(hidden)]
pub mod stream;
#[cfg(not(loom))]
pub mod subscriber;
mod sync;
mod testpoint;

#[cfg(not(loom))]
pub use control::ProducerInfo;
pub use lane::StartAt;
pub use level::{Level, LevelFilter, ParseLevelError};
#[cfg(not(loom))]
pub use publisher::{EmitError, Publisher, PublisherConfig, PublisherError};
#[cfg(not(loom))]
pub use runtime::{BusDir, BusName};
pub use snapbus_schemas as schemas;
#[cfg(not(loom))]
pub use status::{StatusBoard, StatusValue};
#[cfg(not(loom))]
pub use subscriber::{
    BatchReads, Event, Glob, InPlaceEvent, InPlaceRecord, Record, RecordRef, RingPayload,
    SubscribeError, SubscribeOptions, Subscriber, SubscriberStats,
};

//! The snapbus consumer runtime: implement [`Consumer`] (every hook has a default body), then
//! [`run`] it; or pull what `run` would hand it from a [`Reader`]. Also here: [`recording`] (MCAP recordings: writer and streaming reader),
//! [`recorder`] (the built-in recorder consumer, with rotation and loss records), [`runs`]
//! (a recorder that keeps each run of a bus in a file of its own, under a size cap) and
//! [`replay`] (republishing a recording into a bus), [`fields`] (dotted field paths and
//! allocation-free extraction of numeric leaves, shared by everything that flattens a
//! schema), [`aggregator`] (per-window and
//! per-experiment statistics emitted back onto the bus as `<schema>.summary` snapshots),
//! [`plotter`] (a live web page on 127.0.0.1 plotting the subscribed schemas),
//! [`prometheus`] (a Prometheus `/metrics` endpoint with the latest values and the bus's health)
//! and [`otlp`] (an OTLP/HTTP exporter to an OpenTelemetry Collector, isolated from its
//! failures).
//!
//! Each sink is behind a cargo feature of the same name, all in the default build:
//! `recording` (the `recording`, `recorder` and `replay` modules), `aggregator`, `plotter`,
//! `prometheus` and `otlp`. Not in the default build: `table` (records as table rows, the
//! columns of CSV export) and `arrow` (the same columns as Arrow arrays: the Parquet export and
//! Python's `to_arrow`). With `default-features = false` the crate is the runtime and
//! [`fields`], on top of `snapbus-bus`.
//!
//! # Guarantees
//!
//! - **A consumer never slows a producer.** Records are read from the producers' lanes in
//!   shared memory; a slow consumer is lapped and told exactly how many records it lost
//!   ([`Consumer::on_lag`]), a stopped or crashed one costs the producers nothing.
//! - **Everything is decodable.** Each record comes with its schema's descriptor
//!   ([`Consumer::on_schema`] is called once per schema before its first record), so a
//!   consumer needs none of the producer's types.
//! - **Nothing torn is delivered.** A consumer that needs only a record's numbers has them
//!   extracted where the record lies in the ring ([`Consumer::extract`]: no copy; the
//!   aggregator, the plotter and both exporters do from 1 KiB on; the recorder, which writes
//!   every byte to its file, and `echo`, which decodes every byte, copy records); a record
//!   the producer overwrote while it was being read is never delivered, and counts as lost
//!   like any other.
//! - **Clean exits.** SIGINT and SIGTERM make [`run`] flush and return; a broker restart is
//!   survived (lanes keep being read and the subscription rejoins the new broker).
//! - **Summaries say what they miss.** Every aggregator summary carries the number of the
//!   producer's records that were overwritten before they could be read; N aggregator workers
//!   split the groups so that each group is summarized by exactly one; a restarted worker does
//!   not emit a window twice.
//! - **Watching costs the experiment nothing.** The plotter is a consumer like any other;
//!   its pages get at most one min/max pair per pixel column per update, however fast the
//!   producers emit, and closing them or stopping the plotter never reaches a producer.
//! - **Recordings are never silently incomplete.** Records lost before the recorder read them
//!   are written into the file as loss records; a recording cut by a crash is read up to its
//!   last complete chunk and the reader says where it was cut.
//!
//! # Example: count records per schema
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use snapbus_consumers::prelude::*;
//!
//! #[derive(Default)]
//! struct Count(BTreeMap<String, u64>);
//!
//! impl Consumer for Count {
//!     fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
//!         *self.0.entry(r.schema.id().to_owned()).or_default() += 1;
//!         Ok(Flow::Continue)
//!     }
//!     fn flush(&mut self) -> Result<(), HookError> {
//!         println!("{:?}", self.0);
//!         Ok(())
//!     }
//! }
//!
//! let dir = BusDir::locate(&BusName::resolve(None)?);
//! run(&dir, &RunOptions::new("count"), &mut Count::default(), None)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `consumers/examples/count.rs` is this example as a program:
//! `cargo run -p snapbus-consumers --example count -- 'demo.*'`.

#[cfg(feature = "aggregator")]
pub mod aggregator;
#[cfg(feature = "bridge")]
pub mod bridge;
pub mod fields;
#[cfg(feature = "foxglove")]
pub mod foxglove;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod output;
#[cfg(feature = "plotter")]
pub mod plotter;
#[cfg(feature = "prometheus")]
pub mod prometheus;
#[cfg(feature = "recording")]
pub mod recorder;
#[cfg(feature = "recording")]
pub mod recording;
#[cfg(feature = "recording")]
pub mod replay;
#[cfg(feature = "recording")]
pub mod runs;
mod runtime;
#[cfg(any(feature = "aggregator", feature = "otlp", feature = "prometheus"))]
mod summary_name;
#[cfg(feature = "table")]
pub mod table;
#[cfg(any(feature = "plotter", feature = "foxglove"))]
mod token;

pub use runtime::{
    Consumer, DRAIN_ON_STOP, Extract, Flow, HookError, InPlace, Item, Lag, Producer,
    ProducerChange, Reader, Record, RecordHeader, RecordRef, RunError, RunOptions, RunSummary,
    StopReason, run,
};
pub use snapbus_bus::subscriber::{BatchReads, RingPayload};

/// What a consumer needs, in one import: `use snapbus_consumers::prelude::*;`.
pub mod prelude {
    pub use crate::runtime::{
        Consumer, Extract, Flow, HookError, Item, Lag, Producer, ProducerChange, Reader, Record,
        RecordHeader, RunOptions, RunSummary, run,
    };
    pub use snapbus_bus::Level;
    pub use snapbus_bus::lane::StartAt;
    pub use snapbus_bus::runtime::{BusDir, BusName};
    pub use snapbus_bus::schemas::{SchemaDescriptor, Value, decode};
    pub use snapbus_bus::status::{StatusBoard, StatusValue};
    pub use snapbus_bus::subscriber::Glob;
}

//! Field extraction: one way to name the fields of any schema and to pull numbers out of its
//! payloads, shared by the aggregator, the plotter, CSV/Parquet export and exporters.
//!
//! # Guarantees
//!
//! - **One naming scheme.** Every field has a dotted path from the root: struct fields by
//!   name (`stats.reward`), tuple elements and short numeric arrays by index (`position.0`),
//!   reductions of long arrays, sequences and tensors by [`REDUCTIONS`]
//!   (`observation.mean`), enum payloads under the variant's name (`mode.Jump.height`), a
//!   tensor's shape beside it ([`TENSOR_SHAPE`]). [`FieldNode::tree`] is that walk; the
//!   [`Plan`] and the export columns are built from it.
//! - **Compiled once, no allocation per record.** [`Plan::compile`] turns a descriptor into a
//!   short list of operations; [`Plan::extract`] runs them over the payload bytes into a
//!   reused [`Extracted`] without decoding the payload into [`Value`](snapbus_schemas::Value)s.
//! - **Untrusted bytes are safe.** Every read is bounds-checked: a payload that does not match
//!   its descriptor (shared memory is written by other processes) is [`Malformed`], never a
//!   panic, never an out-of-bounds read, never a loop over a count the payload cannot hold.
//!
//! # What is extracted
//!
//! Numeric leaves — integers, floats, bools (as 0/1), options of those (NaN when none) — at
//! any depth of structs and tuples; fixed arrays of up to [`MAX_ELEMENTWISE`] numbers
//! element by element; longer arrays, sequences of numbers and tensors reduced to their mean,
//! minimum and maximum per record (NaN elements ignored; all NaN when empty). Values inside
//! enums, maps and sequences of structs are skipped. Dynamic fields (a type known only at run
//! time) have leaves of their own in each record, in [`Extracted::dynamic`]: numbers and
//! bools under their map keys (`extra.model.steps`), lists of numbers and arrays reduced like
//! sequences. Optionally, group-by fields and a window
//! field (scalars, strings, enums by variant name) are read as keys instead.
//!
//! # Example
//!
//! ```
//! use snapbus_consumers::fields::{Extracted, Plan};
//! use snapbus_schemas::{Snapshot, Wire};
//!
//! #[derive(Snapshot)]
//! #[snapshot(id = "demo.step", version = 1)]
//! struct Step {
//!     reward: f64,
//!     position: [f32; 2],
//!     hist: Vec<u16>,
//!     done: bool,
//! }
//!
//! let plan = Plan::numeric(Step::descriptor().root());
//! assert_eq!(
//!     plan.leaves(),
//!     ["reward", "position.0", "position.1", "hist.mean", "hist.min", "hist.max", "done"]
//! );
//! let step = Step { reward: 0.5, position: [1.0, -2.0], hist: vec![1, 2, 6], done: true };
//! let payload = step.encode_to_vec()?;
//! let mut out = Extracted::default(); // reused from record to record
//! plan.extract(&payload, &mut out)?;
//! assert_eq!(out.values, [0.5, 1.0, -2.0, 3.0, 1.0, 6.0, 1.0]);
//! // A payload shorter than its descriptor says is an error, not a panic.
//! assert!(plan.extract(&payload[..5], &mut out).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// Payloads from this size on are read where they lie in the ring by the built-in consumers
/// that extract numbers (the aggregator, the Prometheus exporter: `Plan::extract_from`);
/// smaller ones are copied first. Field by field from the ring costs more than one copy of a
/// small record and reads from it (64 B events: about 10 % more CPU per event), and less than
/// a copy of a large one (`BENCHMARKS.md`, "Prometheus exporter").
pub const IN_PLACE_MIN_BYTES: usize = 1024;

mod dynamic;
mod key;
mod plan;
mod read;
mod tree;
mod unit;
mod views;

pub use key::{KeyType, KeyValue, decode_group};
pub use plan::{Extracted, MAX_ELEMENTWISE, Plan, PlanError};
pub use read::{Malformed, Source};
pub use tree::{FieldNode, Parts, REDUCTIONS, TENSOR_SHAPE, join, tensor_paths};
pub use unit::{Unit, unit_of};
pub use views::{MAX_VIEWS, Pixels, View, has_tensors, scaled_pixels, tensors};

//! `snapbus`: emit schema-versioned snapshots from a running experiment.
//!
//! **The emit API (`get_telemetry`, `snapshot`, level filters) is not implemented yet**; it
//! lands with issue "Broker, producer API and the snapbus CLI core". What exists today is the
//! schema layer, re-exported here so experiments can already define their snapshot types:
//!
//! ```
//! use snapbus::schemas::{Snapshot, Tensor};
//!
//! #[derive(Snapshot)]
//! #[snapshot(id = "monty.env_interface.step", version = 1, crate = "snapbus::schemas")]
//! struct EnvStep {
//!     episode: u32,
//!     step: u32,
//!     observation: Tensor<f32>,
//! }
//!
//! assert_eq!(EnvStep::descriptor().id(), "monty.env_interface.step");
//! ```

pub use snapbus_schemas as schemas;

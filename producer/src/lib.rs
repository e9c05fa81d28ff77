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

pub mod filter;
pub mod level;
mod resource;
mod telemetry;

pub use filter::{Filter, FilterParseError};
pub use level::{Level, LevelFilter};
pub use resource::{RESOURCE_TARGET, ResourceSampler, read_sample, sample_resources};
pub use snapbus_schemas as schemas;
pub use telemetry::{
    Config, Span, Telemetry, get_telemetry, init, is_connected, set_filter, shutdown, stats,
    wait_for_bus,
};

/// The telemetry handle of the calling module: `get_telemetry(module_path!())`.
#[macro_export]
macro_rules! telemetry {
    () => {
        $crate::get_telemetry(::core::module_path!())
    };
}

//! `snapbus`: emit schema-versioned snapshots from a running experiment onto a snapbus bus.
//!
//! # Guarantees
//!
//! - **Never blocks the experiment.** A snapshot is encoded straight into this process's
//!   shared-memory lane; no lock is held across the copy, no consumer is waited for, and a slow,
//!   stopped or dead consumer costs nothing. A record that cannot be written (it would overwrite
//!   one still being written by another thread, it is larger than the lane allows
//!   ([`max_payload_bytes`]), it did not encode, the lane was closed) is dropped and counted by
//!   reason ([`stats`]; `snapbus ls` DROPPED for what the lane refused), never retried.
//! - **The lane does not depend on the broker.** Once this process has its lane (a bus runs or
//!   is being started for it; see [No bus running](#no-bus-running)), every snapshot is written to it whether or not a broker is up; consumers that
//!   mapped it keep reading, and a restarted broker adopts it with its history.
//! - **Cheap when off.** With the level filtered out a snapshot is one atomic load; with no
//!   bus to reach it is not written (there is no lane) but counted (`no_bus` in [`stats`]). A
//!   bus that appears later is joined within 200 ms.
//! - **Fork-safe.** A `fork()`ed child (Python `multiprocessing`) never writes its parent's
//!   lane: it gets a lane and a broker connection of its own, and its [`shutdown`] closes only
//!   its own lane.
//! - **Filters change at run time.** Per-target levels come from `SNAPBUS_FILTER`
//!   (`"info,monty.models=debug"`) and from `snapbus filter` while the experiment runs.
//! - **Consumers can decode everything.** Every schema's descriptor is published before the
//!   first record that uses it, so any consumer decodes any payload without the experiment's
//!   types.
//! - **Schemas known only at run time too.** [`Telemetry::snapshot_value`] takes a
//!   `SchemaDescriptor` and a dynamic `Value` (language bindings, transformations) and encodes
//!   it straight into the lane with the same guarantees and counters; a value that does not
//!   match its descriptor is counted and nothing is written.
//!
//! # Example
//!
//! ```
//! use snapbus::schemas::{Snapshot, Tensor};
//! use snapbus::Level;
//!
//! #[derive(Snapshot)]
//! #[snapshot(id = "monty.env_interface.step", version = 1, crate = "snapbus::schemas")]
//! struct EnvStep {
//!     episode: u32,
//!     step: u32,
//!     reward: f64,
//!     observation: Tensor<f32>,
//! }
//!
//! # snapbus::init(snapbus::Config { bus: Some("doc-example".into()), start_bus: Some(false), ..Default::default() });
//! // Once per module (cheap to clone; keep it).
//! let telemetry = snapbus::telemetry!();
//! for step in 0..3 {
//!     let observation = Tensor::new(vec![2, 2], vec![0.0; 4])?;
//!     // A no-op here: no bus is running. With `snapbus up`, consumers receive it.
//!     telemetry.snapshot(Level::INFO, &EnvStep { episode: 0, step, reward: 0.5, observation });
//! }
//! let _guard = telemetry.span(Level::DEBUG, "eval"); // a span (duration, trace, parent) when dropped
//!
//! // Level filters: the most specific target wins.
//! let filter: snapbus::Filter = "info,monty.models=debug".parse()?;
//! assert!(filter.level_for("monty.models.policy").enabled(Level::DEBUG));
//! assert!(!filter.level_for("monty.env").enabled(Level::DEBUG));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # No bus running
//!
//! With no broker for the bus, [`init`] (or the first [`get_telemetry`]) starts one in the
//! background from the `snapbus` binary ([`Config::snapbus_bin`], else `$SNAPBUS_BIN`, else
//! `snapbus` on `PATH`) as `snapbus up --idle-exit-secs 60` ([`IDLE_EXIT_SECS`]), and creates
//! this process's lane at once: what it emits while the broker starts is kept, and the broker
//! adopts the lane with it (a consumer started later with `--from oldest` reads record #0).
//! Nothing waits for the broker but [`shutdown`], which gives a broker still starting up to 5 s
//! to take the lane. The broker runs detached (its own process group), outlives the program and
//! serves the next one, and stops once no producer and no consumer but the ones it supervises
//! has been connected for 60 s, or at `snapbus down`.
//!
//! [`Config::start_bus`]` = Some(false)` or `SNAPBUS_START_BUS=0` opts out;
//! [`Config::record`] or `SNAPBUS_RECORD` passes `--record DIR` on. A process that can reach no
//! bus (opted out, no binary, a failed start) says so once on stderr, naming the fix
//! ([`set_warning_hook`] sends it elsewhere), never per snapshot.
//!
//! Why a lane at once rather than a short synchronous connect at start: connecting means
//! waiting for the broker's process to start (tens to hundreds of milliseconds, more on a
//! loaded machine), which either blocks the program or, bounded, still loses what comes after
//! the bound; a lane needs no broker, is what a restarted broker already adopts, and makes the
//! first record as cheap as any other.
//!
//! # Level filters
//!
//! Each handle's level comes from a [`Filter`]: a default level plus `target=level`
//! directives, where the most specific whole-segment prefix of the handle's target wins and
//! `.` and `::` are the same separator. `SNAPBUS_FILTER` ([`Filter::from_env`]) sets it at
//! start-up, [`set_filter`] or `snapbus filter` while running. The bus filter (`snapbus
//! filter`) overrides the process's own (`SNAPBUS_FILTER` or the last [`set_filter`]) for as
//! long as it is set, also in processes started later; `snapbus filter --reset` brings the own
//! filter back. `snapbus ls` shows both.
//!
//! ```
//! use snapbus::{Filter, Level, LevelFilter};
//!
//! let filter: Filter = "warn,monty.models=debug,monty.models.noisy=off".parse()?;
//! assert!(filter.level_for("monty::models::policy").enabled(Level::DEBUG));
//! assert!(!filter.level_for("monty.models.noisy").enabled(Level::ERROR));
//! assert_eq!(filter.level_for("monty.env"), LevelFilter::WARN);
//! // `monty.model` is not a prefix of `monty.models`.
//! let partial: Filter = "monty.model=trace".parse()?;
//! assert_eq!(partial.level_for("monty.models"), LevelFilter::INFO);
//!
//! let err = "info,monty=loud".parse::<Filter>().expect_err("`loud` is not a level");
//! assert_eq!(err.directive, "monty=loud");
//! # Ok::<(), snapbus::FilterParseError>(())
//! ```
//!
//! Run metadata: `SNAPBUS_SESSION_TAG` and `SNAPBUS_PERF_TAG` (or [`init`]) appear in
//! `snapbus ls`; [`sample_resources`] emits the process's RSS, CPU time and page faults
//! periodically; [`shutdown`] at the end of `main` tells consumers the stream ended (instead
//! of the producer dying).

mod config;
mod embedded;
pub mod filter;
mod lane_size;
mod resource;
mod telemetry;
pub mod trace;

pub use config::Config;
pub use embedded::{IDLE_EXIT_SECS, set_warning_hook};
pub use filter::{Filter, FilterParseError};
pub use lane_size::{
    DEFAULT_LANE_BYTES, LaneBytesError, lane_bytes_from_env, max_payload_bytes, parse_lane_bytes,
};
pub use resource::{RESOURCE_TARGET, ResourceSampler, read_sample, sample_resources};
pub use snapbus_bus::lane::ClaimError;
pub use snapbus_bus::level;
pub use snapbus_bus::level::{Level, LevelFilter};
pub use snapbus_bus::publisher::{EmitError, FillError, PayloadWriter, PublisherStats};
pub use snapbus_schemas as schemas;
pub use telemetry::{
    AtLevel, Span, Stats, Telemetry, bus_descriptors, bus_filter_in_force, get_telemetry, init,
    is_connected, refusal, set_filter, shutdown, stats, streams_large_payloads, wait_for_bus,
};

/// The telemetry handle of the calling module: `get_telemetry(module_path!())`.
#[macro_export]
macro_rules! telemetry {
    () => {
        $crate::get_telemetry(::core::module_path!())
    };
}

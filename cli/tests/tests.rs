//! End-to-end tests of the `snapbus` binary (one test binary, a module per verb).

// The CLI needs Rust 1.88 (rmcp); its tests keep the 1.85 style of the libraries' tests
// (no `if let` chains, `%` over `is_multiple_of`).
#![allow(clippy::collapsible_if, clippy::manual_is_multiple_of)]

mod aggregator;
mod attach;
mod big_bus;
#[cfg(feature = "bridge")]
mod bridge;
mod bus;
mod compression;
mod demo;
mod embedded;
mod errors;
mod export;
mod fd_limit;
mod files;
mod foxglove;
mod modes;
mod otlp;
mod outage;
mod pipes;
mod plotter;
mod prometheus;
mod python;
mod recording;
mod restart_counters;
mod ring_damage;
mod runs;
mod runtime_dir;
mod schemas;
mod supervision;
mod unknown_keys;
mod util;
mod wait;
mod wide;

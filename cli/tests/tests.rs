//! End-to-end tests of the `snapbus` binary (one test binary, a module per verb).

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
mod modes;
mod otlp;
mod outage;
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

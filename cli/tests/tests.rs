//! End-to-end tests of the `snapbus` binary (one test binary, a module per verb).

mod aggregator;
mod attach;
mod bus;
mod demo;
mod errors;
mod export;
mod fd_limit;
mod modes;
mod otlp;
mod outage;
mod plotter;
mod prometheus;
mod python;
mod recording;
mod schemas;
mod supervision;
mod unknown_keys;
mod util;

//! Integration tests of the `snapbus` producer crate (one test binary, a module per area).

mod child;
mod filter;
mod lane_bytes;
mod telemetry;

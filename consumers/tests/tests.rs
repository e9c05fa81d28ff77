//! Integration tests of the consumer runtime (one test binary, a module per area).

mod aggregator;
mod fields;
mod otlp;
mod plotter;
mod recording;
mod runtime;

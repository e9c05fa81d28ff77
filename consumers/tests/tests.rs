//! Integration tests of the consumer runtime (one test binary, a module per area).

#[cfg(feature = "aggregator")]
mod aggregator;
#[cfg(feature = "aggregator")]
mod combine;
mod common;
#[cfg(feature = "recording")]
mod compression;
mod fields;
#[cfg(feature = "foxglove")]
mod foxglove;
#[cfg(feature = "otlp")]
mod otlp;
#[cfg(feature = "plotter")]
mod plotter;
#[cfg(feature = "recording")]
mod recording;
#[cfg(feature = "recording")]
mod recording_fuzz;
mod runtime;

//! Integration tests of the consumer runtime (one test binary, a module per area).

mod recording;
mod runtime;

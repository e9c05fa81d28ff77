//! Integration tests of snapbus-schemas (one test binary, a module per area).

mod bincode_compat;
mod descriptors;
mod dynamic;
mod evolution;
mod fixtures;
mod golden;
mod json;
mod roundtrip;
mod untrusted;
mod walk;

//! The snapbus data and control plane. **Not implemented yet**: the shared-memory lanes land
//! with issue "Shared-memory lanes: the data plane", the broker with "Broker, producer API and
//! the snapbus CLI core". This crate is the only one in the workspace allowed `unsafe` code;
//! see `ARCHITECTURE.md`.
//!
//! Today it only re-exports the schema layer it will carry.

pub use snapbus_schemas as schemas;

//! loom models of the lane protocol and the doorbell (run with `--cfg loom`).
#![cfg(loom)]

//! Integration tests of snapbus-bus (one test binary, a module per area).

mod fork;
mod model;
mod multiprocess;

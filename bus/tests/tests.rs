//! Integration tests of snapbus-bus (one test binary, a module per area).

mod batch;
mod common;
mod damage;
mod dynamic;
mod fork;
mod in_place;
mod level;
mod model;
mod multiprocess;
mod runs;

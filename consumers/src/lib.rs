//! The snapbus consumer runtime and built-in consumers (echo, recorder, aggregator, plotter).
//! **Not implemented yet**: it lands with issue "Consumer runtime, recorder, ring snapshot and
//! replay". Nothing here pretends to work.

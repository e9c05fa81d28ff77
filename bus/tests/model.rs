//! Property tests of a lane against a reference model.

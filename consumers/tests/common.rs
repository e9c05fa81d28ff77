//! Fixtures shared by the test modules.

use snapbus_schemas::Wire;

#[derive(Wire, Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    Train,
    Eval,
}

#[derive(Wire, Debug, Clone, PartialEq)]
pub(crate) struct Info {
    pub(crate) loss: f64,
    pub(crate) note: String,
}

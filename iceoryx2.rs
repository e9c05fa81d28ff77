//! placeholder (perf copy)
use anyhow::{Result, bail};
use crate::common::{RunArgs, Wait};
pub(crate) const HOW: &str = "-";
pub(crate) const LATENCY_WAITS: &[Wait] = &[Wait::Spin];
pub(crate) const NEEDS_JOIN: bool = false;
pub(crate) fn available() -> Result<(), String> { Err("-".into()) }
pub(crate) fn consumer(_args: &RunArgs) -> Result<()> { bail!("-") }
pub(crate) fn producer(_args: &RunArgs) -> Result<()> { bail!("-") }

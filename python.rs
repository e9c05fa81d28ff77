//! placeholder (perf copy)
use anyhow::{Result, bail};
use crate::common::RunArgs;
pub(crate) const HOW: &str = "-";
pub(crate) fn available() -> Result<(), String> { Err("-".into()) }
pub(crate) fn command(_args: &RunArgs) -> Result<std::process::Command> { bail!("-") }

//! `snapbus replay`.

use crate::cli::ReplayArgs;

pub(crate) fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("`snapbus replay` is not implemented yet")
}

//! `snapbus detach`.

use crate::cli::DetachArgs;

pub(crate) fn run(args: &DetachArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("`snapbus detach` is not implemented yet")
}

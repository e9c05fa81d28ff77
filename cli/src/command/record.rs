//! `snapbus record`.

use crate::cli::RecordArgs;

pub(crate) fn run(args: &RecordArgs, supervised: Option<()>) -> anyhow::Result<()> {
    let _ = (args, supervised);
    anyhow::bail!("`snapbus record` is not implemented yet")
}

//! `snapbus export`.

use crate::cli::ExportArgs;

pub(crate) fn run(args: &ExportArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("`snapbus export` is not implemented yet")
}

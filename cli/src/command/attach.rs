//! `snapbus attach`.

use crate::cli::AttachArgs;

pub(crate) fn run(args: AttachArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("`snapbus attach` is not implemented yet")
}

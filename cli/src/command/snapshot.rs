//! `snapbus snapshot`.

use crate::cli::SnapshotArgs;

pub(crate) fn run(args: &SnapshotArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("`snapbus snapshot` is not implemented yet")
}

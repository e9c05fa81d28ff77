//! `snapbus inspect`.

use crate::cli::InspectArgs;

pub(crate) fn run(args: &InspectArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("`snapbus inspect` is not implemented yet")
}

//! `snapbus schemas`: the schemas this build knows, with descriptors and fingerprints.

use std::io::Write;

use anyhow::Context;
use snapbus_schemas::{SchemaDescriptor, builtin};

use crate::cli::SchemasArgs;

pub(crate) fn run(args: &SchemasArgs) -> anyhow::Result<()> {
    let mut all: Vec<&SchemaDescriptor> = builtin::all().to_vec();
    all.extend(crate::demo::descriptors());
    let mut out = std::io::stdout().lock();
    for d in all {
        if args.json {
            let line = serde_json::to_string(d).context("rendering a descriptor as JSON")?;
            writeln!(out, "{line}")?;
        } else {
            writeln!(
                out,
                "{:<20} v{:<3} {:016x}  {}",
                d.id(),
                d.version(),
                d.fingerprint(),
                d.root()
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

//! `snapbus filter DIRECTIVES`: set the level filter of every producer on the bus (and of
//! producers that join later), without restarting anything.

use anyhow::{Context, bail};
use snapbus::Filter;
use snapbus_bus::control::{FromBroker, PROTOCOL_VERSION, ToBroker};

use crate::bus::{bus_dir, request};
use crate::cli::FilterArgs;

pub(crate) fn run(args: &FilterArgs) -> anyhow::Result<()> {
    let filter: Filter = args
        .directives
        .parse()
        .context("invalid filter directives")?;
    let dir = bus_dir(&args.bus)?;
    let canonical = filter.to_string();
    match request(
        &dir,
        &ToBroker::SetFilter {
            version: PROTOCOL_VERSION,
            directives: canonical.clone(),
        },
    )? {
        FromBroker::Ok => {
            println!("filter '{canonical}' set on bus '{}'", dir.name());
            Ok(())
        }
        other => bail!("unexpected reply from the broker: {other:?}"),
    }
}

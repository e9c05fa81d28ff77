//! `snapbus detach ID`: stops a consumer — supervised or not — with SIGTERM, so that it
//! flushes (a recorder finishes its file), and returns once its process has exited.

use std::time::Duration;

use anyhow::{Context, bail};
use snapbus_bus::control::{FromBroker, PROTOCOL_VERSION, ToBroker};

use crate::bus::{bus_dir, connect};
use crate::cli::DetachArgs;

/// The broker kills a consumer that has not exited 10 s after SIGTERM, and answers within 5 s
/// more.
const DETACH_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn run(args: &DetachArgs) -> anyhow::Result<()> {
    let status = stop(&bus_dir(&args.bus)?, args.id)?;
    println!("consumer {} detached ({status})", args.id);
    Ok(())
}

/// Stops consumer `id` and returns how it ended; prints nothing.
pub(crate) fn stop(dir: &snapbus_bus::runtime::BusDir, id: u64) -> anyhow::Result<String> {
    let mut conn = connect(dir)?;
    let msg = ToBroker::Detach {
        version: PROTOCOL_VERSION,
        consumer_id: id,
    };
    let (reply, _) = conn
        .request::<_, FromBroker>(&msg, DETACH_TIMEOUT)
        .context("waiting for the consumer to exit")?;
    match reply {
        FromBroker::Detached { status } => Ok(status),
        FromBroker::Error { message } => bail!("{message}"),
        other => bail!("unexpected reply from the broker: {other:?}"),
    }
}

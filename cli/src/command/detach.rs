//! `snapbus detach ID`: stops a consumer — supervised or not — with SIGTERM, so that it
//! flushes (a recorder finishes its file), and returns once its process has exited.

use anyhow::Context;
use snapbus_bus::client::{ClientError, DetachOutcome};
use snapbus_bus::runtime::BusDir;

use crate::bus::{bus_dir, connect};
use crate::cli::DetachArgs;

pub(crate) fn run(args: &DetachArgs) -> anyhow::Result<()> {
    let outcome = stop(&bus_dir(&args.bus)?, args.id)?;
    crate::stdout::line(format_args!("consumer {} detached ({outcome})", args.id))?;
    Ok(())
}

/// Stops consumer `id` and returns how it ended; prints nothing.
pub(crate) fn stop(dir: &BusDir, id: u64) -> anyhow::Result<DetachOutcome> {
    match connect(dir)?.detach(id) {
        Ok(outcome) => Ok(outcome),
        // The broker's reason is the message (`no consumer 7 on bus …`).
        Err(e @ ClientError::Refused { .. }) => Err(e.into()),
        Err(e) => Err(e).context("waiting for the consumer to exit"),
    }
}

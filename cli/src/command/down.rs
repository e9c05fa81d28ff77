//! `snapbus down`: stop the broker of a bus. It first stops the consumers it supervises
//! (SIGTERM: they finish their files; SIGKILL after 10 s) unless `--keep-consumers`, which
//! leaves them for the next broker to re-adopt. Then it removes its socket and lock file.
//! Producers and unsupervised consumers keep running and rejoin, with their ids, when the bus
//! is started again. The logs (`broker.log`, `consumer-<id>.log`) stay in the bus directory.

use snapbus_bus::client::{BusClient, Census};
use snapbus_bus::runtime::BusDir;

use crate::bus::bus_dir;
use crate::cli::DownArgs;

pub(crate) fn run(args: &DownArgs) -> anyhow::Result<()> {
    let dir = bus_dir(&args.bus)?;
    crate::stdout::line(stop(&dir, args.keep_consumers)?)?;
    Ok(())
}

/// Stops the broker of `dir` (and its supervised consumers, unless `keep_consumers`) and
/// waits until its socket is gone; returns what to tell the user.
pub(crate) fn stop(dir: &BusDir, keep_consumers: bool) -> anyhow::Result<String> {
    let client = BusClient::connect(dir)?;
    let supervised = client
        .state_with(Census::Skip)
        .map(|s| {
            s.consumers
                .iter()
                .filter(|c| c.supervised && c.status.is_running())
                .count()
        })
        .unwrap_or(0);
    client.down(keep_consumers)?;
    let consumers = match (supervised, keep_consumers) {
        (0, _) => String::new(),
        (n, false) => format!("; stopped {n} supervised consumer(s)"),
        (n, true) => format!(
            "; left {n} supervised consumer(s) running (the next `snapbus up` re-adopts them)"
        ),
    };
    Ok(format!(
        "bus '{}' is down{consumers}; logs in {}",
        dir.name(),
        dir.path().display()
    ))
}

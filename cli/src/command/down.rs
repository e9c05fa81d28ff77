//! `snapbus down`: stop the broker of a bus; it removes its socket and lock file. Producers
//! and consumers keep running and rejoin when a bus of that name is started again.

use std::time::{Duration, Instant};

use anyhow::bail;
use snapbus_bus::control::{FromBroker, PROTOCOL_VERSION, ToBroker};
use snapbus_bus::runtime::BusDir;

use crate::bus::{bus_dir, request};
use crate::cli::BusArgs;

pub(crate) fn run(args: &BusArgs) -> anyhow::Result<()> {
    let dir = bus_dir(args)?;
    println!("{}", stop(&dir)?);
    Ok(())
}

/// Stops the broker of `dir` and waits until its socket is gone; returns what to tell the
/// user.
pub(crate) fn stop(dir: &BusDir) -> anyhow::Result<String> {
    match request(
        dir,
        &ToBroker::Shutdown {
            version: PROTOCOL_VERSION,
        },
    )? {
        FromBroker::Ok => {}
        other => bail!("unexpected reply from the broker: {other:?}"),
    }
    let t0 = Instant::now();
    while dir.socket_path().exists() {
        // The broker first stops the consumers it supervises (each may take a while to flush).
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("the broker acknowledged but its socket is still there after 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(format!("bus '{}' is down", dir.name()))
}

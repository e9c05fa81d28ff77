//! `snapbus down`: stop the broker of a bus. It first stops the consumers it supervises
//! (SIGTERM: they finish their files; SIGKILL after 10 s) unless `--keep-consumers`, which
//! leaves them for the next broker to re-adopt. Then it removes its socket and lock file.
//! Producers and unsupervised consumers keep running and rejoin, with their ids, when the bus
//! is started again. The logs (`broker.log`, `consumer-<id>.log`) stay in the bus directory.

use std::time::{Duration, Instant};

use anyhow::bail;
use snapbus_bus::control::{FromBroker, PROTOCOL_VERSION, ToBroker};
use snapbus_bus::runtime::BusDir;

use crate::bus::{bus_dir, request};
use crate::cli::DownArgs;

pub(crate) fn run(args: &DownArgs) -> anyhow::Result<()> {
    let dir = bus_dir(&args.bus)?;
    println!("{}", stop(&dir, args.keep_consumers)?);
    Ok(())
}

/// Stops the broker of `dir` (and its supervised consumers, unless `keep_consumers`) and
/// waits until its socket is gone; returns what to tell the user.
pub(crate) fn stop(dir: &BusDir, keep_consumers: bool) -> anyhow::Result<String> {
    let supervised = crate::bus::state(dir)
        .map(|s| {
            s.consumers
                .iter()
                .filter(|c| c.supervised && c.status.is_running())
                .count()
        })
        .unwrap_or(0);
    match request(
        dir,
        &ToBroker::Shutdown {
            version: PROTOCOL_VERSION,
            keep_consumers,
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

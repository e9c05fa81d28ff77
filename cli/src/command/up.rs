//! `snapbus up`: start the broker of a bus. Detached by default: returns once the bus accepts
//! connections. An already-running bus is reported and is not an error. The broker's log,
//! `broker.log` in the bus directory, is appended to (an earlier broker's log, of a crash, say,
//! is kept). A new broker re-adopts the consumers an earlier one supervised that are still
//! running, and keeps every id.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use snapbus_bus::broker::{self, BrokerConfig, BrokerError};
use snapbus_bus::client::{BusClient, Census};
use snapbus_bus::runtime::BusDir;

use crate::bus::bus_dir;
use crate::cli::UpArgs;

/// How long a detached broker may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn run(args: &UpArgs) -> anyhow::Result<()> {
    let dir = bus_dir(&args.bus)?;
    if let Ok(s) = BusClient::connect(&dir).and_then(|c| c.state_with(Census::Skip)) {
        println!(
            "bus '{}' is already running (broker pid {})",
            s.bus, s.broker_pid
        );
        return Ok(());
    }
    if args.foreground {
        let config = BrokerConfig {
            dir: dir.clone(),
            retention: Duration::from_secs(args.retention_secs),
            consumer_exe: std::env::current_exe().ok(),
            idle_exit: args.idle_exit_secs.map(Duration::from_secs),
        };
        return match broker::run(config, || {}) {
            Ok(()) => Ok(()),
            Err(BrokerError::AlreadyRunning(name)) => {
                println!("bus '{name}' is already running");
                Ok(())
            }
            Err(e) => Err(e.into()),
        };
    }
    println!(
        "{}",
        start_detached(&dir, args.retention_secs, args.idle_exit_secs)?
    );
    Ok(())
}

/// Starts a detached broker for `dir` (stopping after `idle_exit_secs` idle, if given) and
/// waits until it accepts connections; returns what to tell the user.
pub(crate) fn start_detached(
    dir: &BusDir,
    retention_secs: u64,
    idle_exit_secs: Option<u64>,
) -> anyhow::Result<String> {
    dir.create()?;
    let log = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(dir.log_path())
            .with_context(|| format!("creating {}", dir.log_path().display()))?
    };
    let exe = std::env::current_exe().context("finding the snapbus executable")?;
    let mut child = {
        use std::os::unix::process::CommandExt;
        Command::new(exe)
            .args(["up", "--foreground"])
            // `--bus=NAME`: a name can never be read as an option.
            .arg(format!("--bus={}", dir.name()))
            .arg("--retention-secs")
            .arg(retention_secs.to_string())
            .args(idle_exit_secs.map(|s| format!("--idle-exit-secs={s}")))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C in this terminal does not reach it.
            .process_group(0)
            .spawn()
            .context("starting the broker")?
    };
    let t0 = Instant::now();
    loop {
        if BusClient::connect(dir).is_ok() {
            break;
        }
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(dir.log_path()).unwrap_or_default();
            if log.contains("already running") {
                return Ok(format!("bus '{}' is already running", dir.name()));
            }
            bail!("the broker exited ({status}) before it was ready:\n{log}");
        }
        if t0.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            bail!("the broker was not ready within {START_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(format!(
        "bus '{}' is up (broker pid {}, log {})",
        dir.name(),
        child.id(),
        dir.log_path().display()
    ))
}

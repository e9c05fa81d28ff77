//! `snapbus up`: start the broker of a bus. Detached by default: returns once the bus accepts
//! connections. An already-running bus is reported and is not an error. The broker's log,
//! `broker.log` in the bus directory, is appended to (an earlier broker's log, of a crash, say,
//! is kept). A new broker re-adopts the consumers an earlier one supervised that are still
//! running, and keeps every id.
//!
//! `--record DIR` (or `$SNAPBUS_RECORD`) keeps every run: once the broker is up, it is asked
//! to supervise a recorder of runs into DIR (`snapbus record --dir DIR`, from the oldest
//! records the rings hold), unless one already records into DIR (a bus already up, or a
//! recorder re-adopted after a crash or `down --keep-consumers`). A DIR that cannot be used
//! fails `up` before anything starts.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use snapbus_bus::broker::{self, BrokerConfig, BrokerError};
use snapbus_bus::client::{BusClient, Census, ConsumerStatus};
use snapbus_bus::runtime::BusDir;
use snapbus_bus::status::StatusValue;

use crate::bus::bus_dir;
use crate::cli::UpArgs;
use crate::command::{attach, record};

/// How long a detached broker may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn run(args: &UpArgs) -> anyhow::Result<()> {
    let dir = bus_dir(&args.bus)?;
    // A bad DIR fails before anything starts.
    let runs = Runs::of(args)?;
    if let Ok(s) = BusClient::connect(&dir).and_then(|c| c.state_with(Census::Skip)) {
        crate::stdout::line(format_args!(
            "bus '{}' is already running (broker pid {})",
            s.bus, s.broker_pid
        ))?;
        if let Some(runs) = &runs {
            crate::stdout::line(runs.ensure(&dir)?)?;
        }
        return Ok(());
    }
    if args.foreground {
        let config = BrokerConfig {
            dir: dir.clone(),
            retention: Duration::from_secs(args.retention_secs),
            consumer_exe: std::env::current_exe().ok(),
            idle_exit: args.idle_exit_secs.map(Duration::from_secs),
        };
        let ready = {
            let dir = dir.clone();
            move || {
                // The broker answers from this thread once `ready` returns.
                if let Some(runs) = runs {
                    std::thread::spawn(move || match runs.ensure(&dir) {
                        Ok(said) => snapbus_bus::say!("snapbus up: {said}"),
                        Err(e) => snapbus_bus::say!(
                            "snapbus up: error: the recorder of runs did not start: {}",
                            crate::bus::error_chain(&e)
                        ),
                    });
                }
            }
        };
        return match broker::run(config, ready) {
            Ok(()) => Ok(()),
            Err(BrokerError::AlreadyRunning(name)) => {
                crate::stdout::line(format_args!("bus '{name}' is already running"))?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        };
    }
    crate::stdout::line(start_detached(
        &dir,
        args.retention_secs,
        args.idle_exit_secs,
    )?)?;
    if let Some(runs) = &runs {
        let said = runs
            .ensure(&dir)
            .context("the bus is up, but its recorder of runs did not start")?;
        crate::stdout::line(said)?;
    }
    Ok(())
}

/// What `up --record` asks for: a recorder of runs into `dir`.
#[derive(Debug)]
struct Runs {
    /// Absolute, existing, ours and writable.
    dir: PathBuf,
    keep_bytes: Option<u64>,
    rotate_mb: Option<u64>,
}

impl Runs {
    /// From `--record`, else `$SNAPBUS_RECORD` (empty: none); the directory checked (and
    /// created if missing).
    fn of(args: &UpArgs) -> anyhow::Result<Option<Runs>> {
        let env = std::env::var_os("SNAPBUS_RECORD").filter(|v| !v.is_empty());
        let given = match (&args.record, env) {
            (Some(dir), _) => dir.clone(),
            (None, Some(dir)) => PathBuf::from(dir),
            (None, None) => {
                if args.record_keep_bytes.is_some() || args.record_rotate_mb.is_some() {
                    bail!("--record-keep-bytes and --record-rotate-mb need --record DIR");
                }
                return Ok(None);
            }
        };
        let dir = record::runs::check_dir(&given)?;
        Ok(Some(Runs {
            dir,
            keep_bytes: args.record_keep_bytes,
            rotate_mb: args.record_rotate_mb,
        }))
    }

    /// Has the broker of `bus` supervise a recorder of runs into the directory, unless one
    /// does already; returns what to tell the user.
    fn ensure(&self, bus: &BusDir) -> anyhow::Result<String> {
        let state = BusClient::connect(bus)?.state_with(Census::Skip)?;
        let shown = self.dir.display().to_string();
        let present = state.consumers.iter().find(|c| {
            c.info.kind == "recorder"
                && !matches!(c.status, ConsumerStatus::Ended(_))
                && c.board
                    .iter()
                    .any(|e| e.key == "dir" && e.value == StatusValue::Text(shown.clone()))
        });
        if let Some(c) = present {
            return Ok(format!(
                "the runs are already kept in {shown} (recorder {})",
                c.id
            ));
        }
        let mut argv = vec![
            "record".to_owned(),
            format!("--bus={}", bus.name()),
            format!("--dir={shown}"),
            // What the rings hold of a producer that started the broker is in its run.
            "--from=oldest".to_owned(),
        ];
        argv.extend(self.keep_bytes.map(|b| format!("--keep-bytes={b}")));
        argv.extend(self.rotate_mb.map(|mb| format!("--rotate-mb={mb}")));
        let started = attach::start(bus, "recorder", argv, true)?;
        Ok(format!(
            "keeping every run in {} (recorder {}, log {})",
            record::runs::names(&self.dir, self.rotate_mb),
            started.id,
            started.log
        ))
    }
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
            // The recorder of runs is asked for by the caller, once the broker is up.
            .env_remove("SNAPBUS_RECORD")
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

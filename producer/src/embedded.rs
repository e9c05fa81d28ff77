//! The embedded default: with no broker for the bus, a producer's first use ([`init`], or the
//! first [`get_telemetry`]) starts one in the background from the `snapbus` binary, unless
//! told not to (`Config::start_bus`, `SNAPBUS_START_BUS=0`); a producer that can reach no bus
//! says so once.
//!
//! **Early records.** When a broker runs or is being started, this process's lane is created
//! at once, before the broker accepts connections: what it emits from its first line on is
//! written to the lane, and the broker adopts the lane with that history when the connection
//! thread joins it (within `RETRY`). A consumer started with `--from oldest` sees record #0.
//! No emit ever waits for the broker.
//!
//! **Lifetime.** The started broker is `snapbus up --idle-exit-secs 60`: detached (its own
//! process group, so a Ctrl-C of the script does not reach it), it outlives the script and
//! serves the next one, and stops by itself once no producer and no consumer but the ones it
//! supervises (a `--record` recorder) has been connected for 60 s. `snapbus down` stops it.
//!
//! [`init`]: crate::init
//! [`get_telemetry`]: crate::get_telemetry

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use snapbus_bus::client::BusClient;
use snapbus_bus::runtime::BusDir;

use crate::config::Config;

/// Seconds the broker a producer starts waits, idle, before it stops.
pub const IDLE_EXIT_SECS: u64 = 60;

/// How long [`shutdown`](crate::shutdown) waits for a broker to be handed the lane.
pub(crate) const HANDOVER_WAIT: Duration = Duration::from_secs(5);

/// When this process (tree) started a broker.
static STARTED_AT: OnceLock<Instant> = OnceLock::new();

/// Whether the bus of `dir` has a broker socket, or a broker was started here less than
/// [`HANDOVER_WAIT`] ago (so it should soon).
pub(crate) fn broker_expected(dir: &BusDir) -> bool {
    STARTED_AT
        .get()
        .is_some_and(|t| t.elapsed() < HANDOVER_WAIT)
        || dir.socket_path().exists()
}

/// Whether a bus can be reached, as the first use found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// A broker accepts connections.
    Running,
    /// None did; one is being started.
    Starting,
    /// None does and none is started (opted out, no binary, the start failed).
    Unreachable,
}

/// Where warnings go instead of standard error (see [`set_warning_hook`]).
static HOOK: OnceLock<fn(&str)> = OnceLock::new();
/// Whether the no-bus warning was said (once per process, and per process tree: a forked child
/// inherits it).
static SAID_NO_BUS: AtomicBool = AtomicBool::new(false);
/// Whether the "asked to record, but the bus was already running" note was said.
static SAID_RECORD: AtomicBool = AtomicBool::new(false);

/// Sends the warnings of the embedded default (no bus can be reached; said once per process)
/// to `hook` instead of standard error: for a language binding that reports through its own
/// logging (Python's `logging`, logger `snapbus`). Set it before [`init`](crate::init);
/// returns `false` if a hook was set already.
pub fn set_warning_hook(hook: fn(&str)) -> bool {
    HOOK.set(hook).is_ok()
}

fn say_once(flag: &AtomicBool, message: &str) {
    if flag.swap(true, Ordering::AcqRel) {
        return;
    }
    match HOOK.get() {
        Some(hook) => hook(message),
        None => snapbus_bus::say!("{message}"),
    }
}

/// A yes/no environment variable: `Some` for a known spelling, `None` unset or empty;
/// anything else is said once and read as unset.
fn env_flag(var: &str) -> Option<bool> {
    let v = std::env::var(var).ok()?;
    match v.trim().to_ascii_lowercase().as_str() {
        "" => None,
        "0" | "false" | "no" | "off" => Some(false),
        "1" | "true" | "yes" | "on" => Some(true),
        _ => {
            snapbus_bus::say!("snapbus: ignoring {var}={v:?} (expected 1 or 0)");
            None
        }
    }
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Whether to start a broker when none runs: the config, else `$SNAPBUS_START_BUS`, else yes.
fn start_bus(config: &Config) -> bool {
    config
        .start_bus
        .or_else(|| env_flag("SNAPBUS_START_BUS"))
        .unwrap_or(true)
}

/// The `snapbus` binary: the config's, else `$SNAPBUS_BIN`, else `snapbus` on `PATH`.
fn find_binary(config: &Config) -> Option<PathBuf> {
    if let Some(b) = config
        .snapbus_bin
        .clone()
        .or_else(|| env_path("SNAPBUS_BIN"))
    {
        return Some(b);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("snapbus"))
        .find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The directory runs are recorded into: the config's, else `$SNAPBUS_RECORD`; made absolute
/// (the broker runs in `/`).
fn record_dir(config: &Config) -> Option<PathBuf> {
    let dir = config
        .record
        .clone()
        .or_else(|| env_path("SNAPBUS_RECORD"))?;
    Some(std::path::absolute(&dir).unwrap_or(dir))
}

/// The arguments of `snapbus up` for the broker of `dir`, recording into `record` if given.
pub(crate) fn up_args(dir: &BusDir, record: Option<&Path>) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "up".into(),
        // `--bus=NAME`: a name can never be read as an option.
        format!("--bus={}", dir.name()).into(),
        format!("--idle-exit-secs={IDLE_EXIT_SECS}").into(),
    ];
    if let Some(r) = record {
        let mut a = OsString::from("--record=");
        a.push(r);
        args.push(a);
    }
    args
}

/// Finds out whether the bus of `dir` can be reached, starting its broker if none runs and
/// that is allowed. Said once when it cannot (see the module). Never waits for the broker.
pub(crate) fn settle(config: &Config, dir: &BusDir) -> Reach {
    let record = record_dir(config);
    if BusClient::connect(dir).is_ok() {
        if let Some(r) = &record {
            say_once(
                &SAID_RECORD,
                &format!(
                    "snapbus: bus '{}' was already running, so it was not started here with \
                     --record {}: it records only if its broker was started so (`snapbus down`, \
                     then run again)",
                    dir.name(),
                    r.display()
                ),
            );
        }
        return Reach::Running;
    }
    let bus = dir.name();
    if !start_bus(config) {
        say_once(
            &SAID_NO_BUS,
            &format!(
                "snapbus: no broker is running for bus '{bus}' and starting one is off \
                 (start_bus off, or SNAPBUS_START_BUS=0): snapshots are not kept until one \
                 runs. Start one with `snapbus up`, or unset SNAPBUS_START_BUS"
            ),
        );
        return Reach::Unreachable;
    }
    let Some(bin) = find_binary(config) else {
        say_once(
            &SAID_NO_BUS,
            &format!(
                "snapbus: no broker is running for bus '{bus}' and no `snapbus` binary was \
                 found to start one (SNAPBUS_BIN, PATH): snapshots are not kept until one runs. \
                 Install the snapbus command (the Python wheel puts it beside the interpreter), \
                 set SNAPBUS_BIN to it, or start a bus with `snapbus up`"
            ),
        );
        return Reach::Unreachable;
    };
    match spawn(&bin, config, dir, record.as_deref()) {
        Ok(()) => Reach::Starting,
        Err(e) => {
            say_once(
                &SAID_NO_BUS,
                &format!(
                    "snapbus: no broker is running for bus '{bus}' and starting one with {} \
                     failed ({e}): snapshots are not kept until one runs. Start one with \
                     `snapbus up`, or set SNAPBUS_BIN to a working snapbus binary",
                    bin.display()
                ),
            );
            Reach::Unreachable
        }
    }
}

/// Runs `BIN up …` in the background; a thread reaps it and says once why it failed, if it did
/// and no other broker came up meanwhile.
fn spawn(bin: &Path, config: &Config, dir: &BusDir, record: Option<&Path>) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin);
    cmd.args(up_args(dir, record))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Not this program's directory: the broker outlives it.
        .current_dir("/")
        // Its own process group: a Ctrl-C of the script does not reach it.
        .process_group(0);
    if let Some(root) = &config.runtime_dir {
        cmd.env("SNAPBUS_RUNTIME_DIR", std::path::absolute(root)?);
    }
    let child = cmd.spawn()?;
    let _ = STARTED_AT.set(Instant::now());
    let dir = dir.clone();
    let bin = bin.to_owned();
    std::thread::Builder::new()
        .name("snapbus-bus-start".into())
        .spawn(move || {
            let Ok(out) = child.wait_with_output() else {
                return;
            };
            if out.status.success() || BusClient::connect(&dir).is_ok() {
                return;
            }
            let err = String::from_utf8_lossy(&out.stderr);
            say_once(
                &SAID_NO_BUS,
                &format!(
                    "snapbus: the broker started for bus '{}' ({} up) failed ({}): {}; \
                     snapshots stay in this process's ring until a broker runs: start one \
                     with `snapbus up` (see {})",
                    dir.name(),
                    bin.display(),
                    out.status,
                    err.trim(),
                    dir.log_path().display()
                ),
            );
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use snapbus_bus::runtime::BusName;

    fn dir() -> BusDir {
        let name = BusName::resolve(Some("lab")).expect("a valid name");
        BusDir::locate_in(Path::new("/run/x"), &name)
    }

    #[test]
    fn up_args_name_the_bus_and_the_idle_limit() {
        let args = up_args(&dir(), None);
        assert_eq!(args, ["up", "--bus=lab", "--idle-exit-secs=60"]);
    }

    #[test]
    fn up_args_pass_the_record_directory_on() {
        let args = up_args(&dir(), Some(Path::new("/data/runs")));
        assert_eq!(
            args,
            [
                "up",
                "--bus=lab",
                "--idle-exit-secs=60",
                "--record=/data/runs"
            ]
        );
    }

    #[test]
    fn record_directories_are_made_absolute() {
        let config = Config {
            record: Some("runs".into()),
            ..Config::default()
        };
        let got = record_dir(&config).expect("a directory");
        assert!(got.is_absolute() && got.ends_with("runs"), "{got:?}");
    }
}

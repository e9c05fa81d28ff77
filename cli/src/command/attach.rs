//! `snapbus attach KIND [ARGS…]`: starts a consumer (one of
//! [`KINDS`](crate::consumer_kinds::KINDS)) as a process the broker supervises, and returns once
//! it is subscribed and reading — nothing emitted after `attach` returns is missed. Prints the
//! consumer's id on stdout (for `snapbus detach ID`); `--foreground` runs the consumer in this
//! terminal instead.
//!
//! The arguments are the consumer's own (those of its foreground verb), parsed here with its
//! own parser and checked ([`BuiltinConsumer::check`]) before anything starts, then forwarded
//! to it ([`BuiltinConsumer::argv`]: by default what the user gave,
//! [`forward`](crate::consumer_kinds::forward)).

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{ArgMatches, FromArgMatches};
use snapbus_bus::control::{FromBroker, PROTOCOL_VERSION, ToBroker};
use snapbus_bus::runtime::BusDir;

use crate::bus::{bus_dir, connect};
use crate::cli::{Restart, SuperviseArgs};
use crate::consumer_kinds::BuiltinConsumer;

/// How long to wait for the consumer to start and subscribe (the broker gives up at 20 s).
const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);

/// A consumer the broker has started, and that has subscribed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Started {
    /// The consumer's id (for `detach`).
    pub(crate) id: u64,
    /// Its process id.
    pub(crate) pid: u32,
    /// Its log file.
    pub(crate) log: String,
}

/// `snapbus attach KIND …` for consumer `T`, with `m` its parsed arguments.
pub(crate) fn attach_kind<T: BuiltinConsumer>(m: &ArgMatches) -> anyhow::Result<()> {
    let supervise = SuperviseArgs::from_arg_matches(m)?;
    let args = T::from_arg_matches(m)?;
    if supervise.foreground {
        return args.run();
    }
    let dir = bus_dir(args.bus())?;
    args.check(&dir, "snapbus attach")?;
    let argv = args.argv(m, &dir, &[])?;
    let started = start(&dir, T::KIND, argv, supervise.restart == Restart::OnFailure)?;
    args.announce(&dir, &started)
}

/// Prints what `attach` prints for a started consumer of `kind` reading the bus into `what`:
/// its id on stdout, and how to stop it on stderr.
pub(crate) fn announce(dir: &BusDir, kind: &str, started: &Started, what: &str) {
    let Started { id, pid, log } = started;
    println!("{id}");
    snapbus_bus::say!(
        "snapbus attach: {kind} {id} (pid {pid}) is reading bus '{}' into {what}; log {log}; \
         stop it with `snapbus detach {id}{}`",
        dir.name(),
        bus_flag(dir)
    );
}

/// For a consumer that serves a URL, run in the foreground or by `attach`: writes it to
/// `url_file` (for `attach`, which prints the URL of the process it started: [`announce_url`]),
/// prints it on stdout and says so on stderr.
#[cfg_attr(
    not(any(feature = "plotter", feature = "prometheus")),
    allow(dead_code)
)]
pub(crate) fn publish_url(dir: &BusDir, verb: &str, url: &str, url_file: &std::path::Path) {
    let _ = crate::bus::create_file(url_file).and_then(|mut f| {
        use std::io::Write;
        f.write_all(url.as_bytes())
    });
    println!("{url}");
    snapbus_bus::say!(
        "snapbus {verb}: serving {url} for bus '{}' (Ctrl-C to stop)",
        dir.name()
    );
}

/// Prints what `attach` prints for a started consumer that serves a URL: the URL (which it
/// wrote to `url_file` before it subscribed, and it has subscribed) on stdout, and how to stop
/// it on stderr.
#[cfg_attr(
    not(any(feature = "plotter", feature = "prometheus")),
    allow(dead_code)
)]
pub(crate) fn announce_url(
    dir: &BusDir,
    kind: &str,
    started: &Started,
    url_file: &std::path::Path,
) -> anyhow::Result<()> {
    let Started { id, pid, log } = started;
    let url = std::fs::read_to_string(url_file)
        .with_context(|| format!("reading the URL of {kind} {id} (log {log})"))?;
    println!("{}", url.trim());
    snapbus_bus::say!(
        "snapbus attach: {kind} {id} (pid {pid}) serves {} for bus '{}'; log {log}; stop it \
         with `snapbus detach {id}{}`",
        url.trim(),
        dir.name(),
        bus_flag(dir)
    );
    Ok(())
}

/// ` --bus NAME` to add to a command for the bus of `dir`, or nothing for the default bus.
pub(crate) fn bus_flag(dir: &BusDir) -> String {
    if dir.name().as_str() == snapbus_bus::runtime::DEFAULT_BUS {
        String::new()
    } else {
        format!(" --bus {}", dir.name())
    }
}

/// Asks the broker to start `snapbus <argv>`; returns once the consumer is subscribed. Prints
/// nothing.
pub(crate) fn start(
    dir: &BusDir,
    kind: &str,
    argv: Vec<String>,
    restart: bool,
) -> anyhow::Result<Started> {
    let mut conn = connect(dir)?;
    let cwd = std::env::current_dir().context("finding the working directory")?;
    let msg = ToBroker::Attach {
        version: PROTOCOL_VERSION,
        kind: kind.to_owned(),
        args: argv,
        cwd: cwd.display().to_string(),
        restart,
    };
    let (reply, _) = conn
        .request::<_, FromBroker>(&msg, ATTACH_TIMEOUT)
        .with_context(|| format!("waiting for the {kind} to subscribe"))?;
    match reply {
        FromBroker::Attached {
            consumer_id,
            pid,
            log,
        } => Ok(Started {
            id: consumer_id,
            pid,
            log,
        }),
        FromBroker::Error { message } => bail!("{message}"),
        other => bail!("unexpected reply from the broker: {other:?}"),
    }
}

//! `snapbus attach KIND`: starts a built-in consumer as a process the broker supervises, and
//! returns once it is subscribed and reading — nothing emitted after `attach` returns is
//! missed. Prints the consumer's id on stdout (for `snapbus detach ID`); `--foreground` runs
//! the consumer in this terminal instead.

use std::time::Duration;

use anyhow::{Context, bail};
use snapbus_bus::control::{FromBroker, PROTOCOL_VERSION, ToBroker};

use crate::bus::{bus_dir, connect, globs};
use crate::cli::{AttachArgs, AttachKind, From, RecordArgs, Restart};
use crate::command::{aggregate, plot, record};

/// How long to wait for the consumer to start and subscribe (the broker gives up at 20 s).
const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn run(args: AttachArgs) -> anyhow::Result<()> {
    match args.kind {
        AttachKind::Recorder { record, supervise } => {
            if supervise.foreground {
                return record::run(&record);
            }
            let argv = recorder_argv(&record)?;
            attach(
                "recorder",
                argv,
                &record.bus,
                supervise.restart == Restart::OnFailure,
                &record::output_names(&record.output, record.rotate_mb),
            )
            .map(drop)
        }
        AttachKind::Plotter {
            plot: args,
            supervise,
        } => {
            if supervise.foreground {
                return plot::run(&args);
            }
            let argv = plot::argv(&args)?;
            let dir = bus_dir(&args.bus)?;
            let (id, pid, log) = start(
                &dir,
                "plotter",
                argv,
                supervise.restart == Restart::OnFailure,
            )?;
            // The plotter wrote its URL before it subscribed, and it has subscribed.
            let url = std::fs::read_to_string(plot::url_path(&dir, pid))
                .with_context(|| format!("reading the URL of plotter {id} (log {log})"))?;
            println!("{}", url.trim());
            eprintln!(
                "snapbus attach: plotter {id} (pid {pid}) serves {} for bus '{}'; log {log}; \
                 stop it with `snapbus detach {id}{}`",
                url.trim(),
                dir.name(),
                if dir.name().as_str() == snapbus_bus::runtime::DEFAULT_BUS {
                    String::new()
                } else {
                    format!(" --bus {}", dir.name())
                }
            );
            Ok(())
        }
        AttachKind::Aggregator {
            aggregate: args,
            supervise,
        } => {
            if supervise.foreground {
                return aggregate::run(&args);
            }
            let argv = aggregate::argv(&args, args.worker)?;
            let dir = bus_dir(&args.bus)?;
            aggregate::check_schemas(&args, &dir, "snapbus attach")?;
            aggregate::warn_field_mismatches(&args, &dir, "snapbus attach")?;
            attach(
                "aggregator",
                argv,
                &args.bus,
                supervise.restart == Restart::OnFailure,
                "<schema>.summary snapshots",
            )
            .map(drop)
        }
    }
}

/// The `snapbus record` command line the supervised recorder runs, with the output path made
/// absolute (the consumer's working directory is the user's, but say it anyway).
fn recorder_argv(r: &RecordArgs) -> anyhow::Result<Vec<String>> {
    globs(&r.schemas)?;
    if r.rotate_mb == Some(0) {
        bail!("--rotate-mb must be at least 1");
    }
    if !r.force && r.rotate_mb.is_none() && r.output.exists() {
        bail!(
            "{} exists; choose another path, or pass --force to overwrite it",
            r.output.display()
        );
    }
    let dir = bus_dir(&r.bus)?;
    let output = std::path::absolute(&r.output)
        .with_context(|| format!("resolving {}", r.output.display()))?;
    // A recorder that cannot create its file is refused here, before anything is started.
    let parent = output.parent().unwrap_or(std::path::Path::new("/"));
    crate::bus::check_writable_dir(parent).with_context(|| format!("-o {}", r.output.display()))?;
    let mut argv = vec![
        "record".to_owned(),
        "--output".to_owned(),
        output.display().to_string(),
        // `--bus=NAME`: a name can never be read as an option.
        format!("--bus={}", dir.name()),
    ];
    for g in &r.schemas {
        argv.push(format!("--schema={g}"));
    }
    if let Some(mb) = r.rotate_mb {
        argv.extend(["--rotate-mb".to_owned(), mb.to_string()]);
    }
    if r.from == From::Oldest {
        argv.extend(["--from".to_owned(), "oldest".to_owned()]);
    }
    if r.force {
        argv.push("--force".to_owned());
    }
    Ok(argv)
}

/// Asks the broker to start `snapbus <argv>` as a supervised consumer; prints its id and
/// returns it once the consumer is subscribed.
pub(crate) fn attach(
    kind: &str,
    argv: Vec<String>,
    bus: &crate::cli::BusArgs,
    restart: bool,
    what: &str,
) -> anyhow::Result<u64> {
    let dir = bus_dir(bus)?;
    let (consumer_id, pid, log) = start(&dir, kind, argv, restart)?;
    println!("{consumer_id}");
    eprintln!(
        "snapbus attach: {kind} {consumer_id} (pid {pid}) is reading bus '{}' into {what}; \
         log {log}; stop it with `snapbus detach {consumer_id}{}`",
        dir.name(),
        if dir.name().as_str() == snapbus_bus::runtime::DEFAULT_BUS {
            String::new()
        } else {
            format!(" --bus {}", dir.name())
        }
    );
    Ok(consumer_id)
}

/// Asks the broker to start `snapbus <argv>`; returns (id, pid, log path) once the consumer is
/// subscribed. Prints nothing.
pub(crate) fn start(
    dir: &snapbus_bus::runtime::BusDir,
    kind: &str,
    argv: Vec<String>,
    restart: bool,
) -> anyhow::Result<(u64, u32, String)> {
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
        } => Ok((consumer_id, pid, log)),
        FromBroker::Error { message } => bail!("{message}"),
        other => bail!("unexpected reply from the broker: {other:?}"),
    }
}

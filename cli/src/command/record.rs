//! `snapbus record`: the recorder in this terminal. Ctrl-C (or SIGTERM, which `detach`
//! sends) finishes the file — indexes, summary, footer — and exits 0.
//!
//! Restarted by the broker after a crash (`SNAPBUS_RESTART=N`, N ≥ 1), it writes
//! `<stem>-restartN.mcap` instead and starts after the last record of the newest earlier file
//! of this recording, so that what the rings still hold from the gap is recorded once.
//!
//! A write that fails for a reason a restart cannot fix (no space left, quota, read-only file
//! system, permission) ends the run: the error names the OS error, the file is cut back to its
//! last complete chunk and ends with a `snapbus.cut` record saying what was not written, and
//! the exit code is [`EXIT_NO_RESTART`](snapbus_bus::runtime::EXIT_NO_RESTART), so that the
//! broker does not restart the recorder into the same full disk.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use snapbus_bus::lane::StartAt;
use snapbus_bus::runtime::BusDir;
use snapbus_consumers::recorder::{Recorder, RecorderOptions, rotated_path};
use snapbus_consumers::recording::{Item, RecordingReader, WriteError, WriterOptions};
use snapbus_consumers::{RunError, RunOptions, RunSummary, run as run_consumer};

use crate::bus::{bus_dir, connect, globs};

pub(crate) mod runs;
use crate::cli::{BusArgs, Codec, From};
use crate::consumer_kinds::kind::{BuiltinConsumer, bus_and_run, restart_count};

/// Options of `snapbus record` (and `snapbus attach recorder`).
#[derive(Debug, Clone, Args)]
pub(crate) struct RecordArgs {
    /// The MCAP file to write (with --rotate-mb: `<stem>-0000.mcap`, `<stem>-0001.mcap`, …).
    #[arg(short, long, required_unless_present = "dir", conflicts_with = "dir")]
    pub(crate) output: Option<PathBuf>,
    /// Instead of -o: keep each run of the bus in a file of its own in DIR (created if
    /// missing), `run-<UTC start>-<producer>-<part>.mcap`. A run starts when a producer
    /// appears on a bus that had none and ends when the last one ends. Parts of 1024 MB unless
    /// --rotate-mb; the oldest runs are removed past --keep-bytes.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// With --dir: remove the oldest runs once the runs in DIR take more than SIZE (e.g. 500M,
    /// 20G; default 10G). The last run is always kept.
    #[arg(long, value_name = "SIZE", requires = "dir", value_parser = crate::cli::parse_bytes)]
    pub(crate) keep_bytes: Option<u64>,
    /// Schema-id globs to record (default: all); repeatable.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// Start a new file once the current one holds about this many megabytes.
    #[arg(long, value_name = "N")]
    pub(crate) rotate_mb: Option<u64>,
    /// Start at new records, or include the history still in the rings.
    #[arg(long, value_enum, default_value_t = From::Latest)]
    pub(crate) from: From,
    /// Overwrite existing files.
    #[arg(long)]
    pub(crate) force: bool,
    /// How chunks are compressed: lz4 (files several times smaller) or none (the fastest).
    #[arg(long, value_enum, value_name = "CODEC", default_value_t = Codec::Lz4)]
    pub(crate) compression: Codec,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

impl BuiltinConsumer for RecordArgs {
    const KIND: &'static str = "recorder";
    const VERB: &'static str = "record";
    const VERB_ABOUT: &'static str = "Record events into an MCAP file, in this terminal \
        (`attach recorder` runs it under the broker instead)";
    const ATTACH_ABOUT: &'static str = "Record into MCAP files (see `snapbus record --help`)";
    const PATH_FLAGS: &'static [&'static str] = &["output", "dir"];

    bus_and_run!();

    /// A recorder that cannot create its file is refused before anything is started.
    fn check(&self, _dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        globs(&self.schemas)?;
        if self.rotate_mb == Some(0) {
            bail!("--rotate-mb must be at least 1");
        }
        let output = match (&self.output, &self.dir) {
            (_, Some(dir)) => return runs::check_dir(dir).map(drop),
            (Some(output), None) => output,
            (None, None) => bail!("-o FILE or --dir DIR is needed"),
        };
        if self.rotate_mb.is_none() {
            // Absent, or (with --force) a file of ours: never another user's, nor a symlink
            // they planted (the file is replaced by rename, never written through).
            snapbus_consumers::output::check(output, self.force)?;
        }
        let absolute = std::path::absolute(output)
            .with_context(|| format!("resolving {}", output.display()))?;
        let parent = absolute.parent().unwrap_or(Path::new("/"));
        crate::bus::check_writable_dir(parent).with_context(|| format!("-o {}", output.display()))
    }

    fn what(&self) -> String {
        match (&self.output, &self.dir) {
            (_, Some(dir)) => runs::names(dir, self.rotate_mb),
            (Some(output), None) => output_names(output, self.rotate_mb),
            (None, None) => String::new(),
        }
    }
}

pub(crate) fn run(args: &RecordArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    // No file is created for a bus that is not there.
    drop(connect(&dir)?);
    if args.rotate_mb == Some(0) {
        bail!("--rotate-mb must be at least 1");
    }
    let given = match (&args.output, &args.dir) {
        (_, Some(runs_dir)) => return runs::run(args, &dir, globs, runs_dir),
        (Some(output), None) => output,
        (None, None) => bail!("-o FILE or --dir DIR is needed"),
    };
    let restart = restart_count();
    let mut start = args.from.start();
    let mut output = given.clone();
    if restart > 0 {
        output = restart_path(given, restart);
        start = restart_start(restart, given);
    }
    let mut writer = WriterOptions::new("recorder", dir.name().as_str());
    writer.overwrite = args.force;
    writer.compression = args.compression.compression();
    let mut recorder = Recorder::create(RecorderOptions {
        path: output.clone(),
        rotate_bytes: args.rotate_mb.map(|mb| mb << 20),
        writer,
        start,
    })
    .map_err(write_error)?;
    let mut opts = recorder.run_options("recorder");
    opts.subscribe.globs = globs;
    snapbus_bus::say!(
        "snapbus record: recording bus '{}' into {} (Ctrl-C to stop)",
        dir.name(),
        output_names(&output, args.rotate_mb)
    );
    let result = run_consumer(&dir, &opts, &mut recorder, None);
    let lost = recorder.losses() + recorder.history_losses() + recorder.damaged();
    // A failed write ends the run: its error (the first one, naming the OS error) is the one
    // to report; finishing then ends the file with what could not be written.
    let finished = recorder.finish();
    let summary = result.map_err(run_error)?;
    let (files, messages) = finished
        .map_err(write_error)
        .context("finishing the recording")?;
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    snapbus_bus::say!(
        "snapbus record: {} records ({} lost before they could be read) in {}",
        summary.delivered,
        lost,
        names.join(", ")
    );
    warn_unread(&summary, &opts);
    debug_assert!(messages >= summary.delivered);
    Ok(())
}

/// Says how much of what was emitted before a stop could not be read in time, if any.
pub(crate) fn warn_unread(summary: &RunSummary, opts: &RunOptions) {
    if summary.unread_bytes > 0 {
        snapbus_bus::say!(
            "snapbus record: warning: {} bytes of records emitted before the stop were not \
             read within {:?}, and are not in the recording",
            summary.unread_bytes,
            opts.drain_on_stop
        );
    }
}

/// The names of the files a recording into `output` writes: the file itself, or with rotation
/// `run-0000.mcap, run-0001.mcap, …`.
pub(crate) fn output_names(output: &Path, rotate_mb: Option<u64>) -> String {
    match rotate_mb {
        None => output.display().to_string(),
        Some(mb) => format!(
            "{}, {}, … (a new file every {mb} MB)",
            rotated_path(output, 0).display(),
            rotated_path(output, 1).display()
        ),
    }
}

/// A recording's write error, as an `anyhow` error whose chain holds the [`WriteError`] (so
/// that `main` exits with `EXIT_NO_RESTART` when it is permanent).
pub(crate) fn write_error(e: WriteError) -> anyhow::Error {
    anyhow::Error::new(e)
}

/// A run loop error; a hook's [`WriteError`] is unwrapped (see [`write_error`]).
pub(crate) fn run_error(e: RunError) -> anyhow::Error {
    match e {
        RunError::Hook(h) => match h.downcast::<WriteError>() {
            Ok(w) => write_error(*w),
            Err(h) => anyhow::anyhow!("the consumer failed: {h}"),
        },
        e => anyhow::Error::new(e),
    }
}

/// Whether `err` is a write failure a restart cannot fix (a full disk, a read-only or
/// unwritable place): `main` exits with `EXIT_NO_RESTART` so that the broker does not restart
/// the recorder into it.
pub(crate) fn is_permanent_write_error(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<WriteError>()
            .is_some_and(WriteError::is_permanent)
    })
}

/// Where a recorder restarted for the `restart`th time starts: after the last record of the
/// newest earlier file of the recording `path` names, so that what the rings still hold from
/// the gap is recorded once.
pub(crate) fn restart_start(restart: u32, path: &Path) -> StartAt {
    match last_recorded_nanos(path) {
        Some(t) => {
            snapbus_bus::say!(
                "snapbus record: restart {restart}: continuing with the records after {}",
                crate::bus::utc(t)
            );
            StartAt::Time(t + 1)
        }
        None => StartAt::Oldest,
    }
}

/// `run.mcap`, 2 → `run-restart2.mcap`.
fn restart_path(path: &Path, n: u32) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(|| "recording".into(), |s| s.to_string_lossy().into_owned());
    let name = match path.extension() {
        Some(ext) => format!("{stem}-restart{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}-restart{n}"),
    };
    path.with_file_name(name)
}

/// The time of the last record in the most recently written file of the recording `path`
/// names (the file itself, its rotated parts, its restart files), read up to any damage.
fn last_recorded_nanos(path: &Path) -> Option<u64> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let stem = path.file_stem()?.to_string_lossy().into_owned();
    let newest = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&stem) && name.ends_with(".mcap")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()?
        .1;
    let file = std::fs::File::open(newest).ok()?;
    RecordingReader::new(std::io::BufReader::with_capacity(1 << 20, file))
        .with_resync()
        .map_while(Result::ok)
        .filter_map(|item| match item {
            Item::Message(m) => Some(m.t_nanos),
            _ => None,
        })
        .max()
}

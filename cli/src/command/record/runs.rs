//! `snapbus record --dir DIR`: every run of the bus into a file of its own in DIR, rotated and
//! under a size cap (the consumer is [`RunRecorder`]; what a run is, the names and the cap are
//! said there). `snapbus up --record DIR` has the broker supervise one.
//!
//! Restarted by the broker after a crash, it starts after the last record of the newest file
//! in DIR (as `record -o` does), in a new run file.

use std::path::{Path, PathBuf};

use anyhow::Context;
use snapbus_bus::runtime::BusDir;
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::recording::WriterOptions;
use snapbus_consumers::run as run_consumer;
use snapbus_consumers::runs::{DEFAULT_KEEP_BYTES, DEFAULT_ROTATE_BYTES, RunRecorder, RunsOptions};

use super::{RecordArgs, restart_start, run_error, warn_unread, write_error};
use crate::consumer_kinds::kind::restart_count;

/// Makes sure runs can be kept in `dir`: created (`0700`, with its parents) if missing, else a
/// directory of ours (a symlink the user gave is followed), where files can be created.
/// Returns it made absolute.
pub(crate) fn check_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    let what = || format!("--record/--dir {}", dir.display());
    if std::fs::symlink_metadata(dir).is_err() {
        crate::bus::create_dir(dir).with_context(|| format!("{}: creating it", what()))?;
    }
    let real = std::fs::canonicalize(dir).with_context(what)?;
    snapbus_consumers::output::check_dir(&real).with_context(what)?;
    crate::bus::check_writable_dir(&real).with_context(what)?;
    Ok(real)
}

/// What a recorder of runs writes, for `attach`'s message.
pub(crate) fn names(dir: &Path, rotate_mb: Option<u64>) -> String {
    let mb = rotate_mb.unwrap_or(DEFAULT_ROTATE_BYTES >> 20);
    format!(
        "{}/run-<UTC start>-<producer>-0000.mcap, one file per run (a new part every {mb} MB)",
        dir.display()
    )
}

/// Records the runs of bus `bus` into `runs_dir` until stopped.
pub(crate) fn run(
    args: &RecordArgs,
    bus: &BusDir,
    globs: Vec<Glob>,
    runs_dir: &Path,
) -> anyhow::Result<()> {
    let dir = check_dir(runs_dir)?;
    let restart = restart_count();
    let start = match restart {
        0 => args.from.start(),
        n => restart_start(n, &dir.join("run.mcap")),
    };
    let keep_bytes = args.keep_bytes.unwrap_or(DEFAULT_KEEP_BYTES);
    let mut writer = WriterOptions::new("recorder", bus.name().as_str());
    writer.compression = args.compression.compression();
    let mut recorder = RunRecorder::new(RunsOptions {
        dir: dir.clone(),
        rotate_bytes: args.rotate_mb.map_or(DEFAULT_ROTATE_BYTES, |mb| mb << 20),
        keep_bytes,
        writer,
        start,
    });
    let mut opts = recorder.run_options();
    opts.subscribe.globs = globs;
    snapbus_bus::say!(
        "snapbus record: keeping the runs of bus '{}' in {} (at most {keep_bytes} bytes, the \
         oldest removed first)",
        bus.name(),
        dir.display()
    );
    let result = run_consumer(bus, &opts, &mut recorder, None);
    let (lost, removed) = (recorder.lost(), recorder.removed());
    let finished = recorder.finish();
    let summary = result.map_err(run_error)?;
    let (runs, messages) = finished
        .map_err(write_error)
        .context("finishing the recording")?;
    snapbus_bus::say!(
        "snapbus record: {runs} runs, {messages} records ({lost} lost before they could be \
         read), {removed} files removed to keep under the cap, in {}",
        dir.display()
    );
    warn_unread(&summary, &opts);
    Ok(())
}

//! `snapbus record`: the recorder in this terminal. Ctrl-C (or SIGTERM, which `detach`
//! sends) finishes the file — indexes, summary, footer — and exits 0.

use anyhow::Context;
use snapbus_bus::control::StartFrom;
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::WriterOptions;
use snapbus_consumers::{RunOptions, run as run_consumer};

use crate::bus::{bus_dir, connect, globs};
use crate::cli::{From, RecordArgs};

pub(crate) fn run(args: &RecordArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    // No file is created for a bus that is not there.
    drop(connect(&dir)?);
    if args.rotate_mb == Some(0) {
        anyhow::bail!("--rotate-mb must be at least 1");
    }
    let mut writer = WriterOptions::new("recorder", dir.name().as_str());
    writer.overwrite = args.force;
    let mut recorder = Recorder::create(RecorderOptions {
        path: args.output.clone(),
        rotate_bytes: args.rotate_mb.map(|mb| mb << 20),
        writer,
    })?;
    let mut opts = RunOptions::new("recorder");
    opts.globs = globs;
    opts.start = match args.from {
        From::Oldest => StartFrom::Oldest,
        From::Latest => StartFrom::Latest,
    };
    eprintln!(
        "snapbus record: recording bus '{}' into {} (Ctrl-C to stop)",
        dir.name(),
        args.output.display()
    );
    let result = run_consumer(&dir, &opts, &mut recorder, None);
    let lost = recorder.losses();
    let (files, messages) = recorder.finish().context("finishing the recording")?;
    let summary = result?;
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    eprintln!(
        "snapbus record: {} records ({} lost before they could be read) in {}",
        summary.delivered,
        lost,
        names.join(", ")
    );
    debug_assert!(messages >= summary.delivered);
    Ok(())
}

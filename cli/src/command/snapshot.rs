//! `snapbus snapshot`: a consistent cut of every lane — what each producer had written when
//! the snapshot began, including producers that died recently — into a recording. Producers
//! are not disturbed: the rings are read like any consumer reads them.

use anyhow::Context;
use snapbus_bus::control::StartFrom;
use snapbus_bus::lane::now_realtime_nanos;
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::WriterOptions;
use snapbus_consumers::{RunOptions, run as run_consumer};

use crate::bus::{bus_dir, connect, globs, no_schema_matches, schema_ids, unmatched_globs};
use crate::cli::SnapshotArgs;

pub(crate) fn run(args: &SnapshotArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    drop(connect(&dir)?);
    if !globs.is_empty() {
        // Before the file is created: a glob that matches nothing is a mistake to report.
        let ids = schema_ids(&dir)?;
        let unmatched = unmatched_globs(&globs, &ids);
        let place = format!("bus '{}'", dir.name());
        if unmatched.len() == globs.len() {
            anyhow::bail!("{}", no_schema_matches(&unmatched, &ids, &place));
        } else if !unmatched.is_empty() {
            eprintln!(
                "snapbus snapshot: warning: {}",
                no_schema_matches(&unmatched, &ids, &place)
            );
        }
    }
    let mut writer = WriterOptions::new("snapshot", dir.name().as_str());
    writer.overwrite = args.force;
    let mut recorder = Recorder::create(RecorderOptions {
        path: args.output.clone(),
        rotate_bytes: None,
        writer,
    })?;
    let mut opts = RunOptions::new("snapshot");
    opts.globs = globs;
    opts.start = match args.last {
        Some(d) => StartFrom::Time(
            now_realtime_nanos().saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        ),
        None => StartFrom::Oldest,
    };
    opts.cut = true;
    opts.until_end = true;
    let result = run_consumer(&dir, &opts, &mut recorder, None);
    let lost = recorder.losses();
    let (_, messages) = recorder.finish().context("finishing the snapshot")?;
    let summary = result?;
    eprintln!(
        "snapbus snapshot: {} records{} from bus '{}' in {}",
        summary.delivered,
        if lost > 0 {
            format!(" ({lost} overwritten while reading, recorded as loss records)")
        } else {
            String::new()
        },
        dir.name(),
        args.output.display()
    );
    debug_assert!(messages >= summary.delivered);
    Ok(())
}

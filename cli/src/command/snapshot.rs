//! `snapbus snapshot`: a consistent cut of every lane — what each producer had written when
//! the snapshot began, including producers that died recently — into a recording. Producers
//! are not disturbed: the rings are read like any consumer reads them.

use anyhow::Context;
use snapbus_bus::lane::StartAt;
use snapbus_bus::lane::now_realtime_nanos;
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::WriterOptions;
use snapbus_consumers::run as run_consumer;

use crate::bus::{bus_dir, connect, globs, no_schema_matches, schema_ids, unmatched_globs};
use crate::cli::SnapshotArgs;
use crate::command::record::{run_error, write_error};

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
    let start = match args.last {
        Some(d) => StartAt::Time(
            now_realtime_nanos().saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        ),
        None => StartAt::Oldest,
    };
    let mut recorder = Recorder::create(RecorderOptions {
        path: args.output.clone(),
        rotate_bytes: None,
        writer,
        start,
    })
    .map_err(write_error)?;
    let mut opts = recorder.run_options("snapshot");
    opts.globs = globs;
    opts.cut = true;
    opts.until_end = true;
    let result = run_consumer(&dir, &opts, &mut recorder, None);
    let lost = recorder.losses();
    let history_lost = recorder.history_losses();
    let finished = recorder.finish();
    let summary = result.map_err(run_error)?;
    let (_, messages) = finished
        .map_err(write_error)
        .context("finishing the snapshot")?;
    let mut notes = Vec::new();
    if history_lost > 0 {
        notes.push(format!(
            "{history_lost} earlier records were already overwritten in the rings"
        ));
    }
    if lost > 0 {
        notes.push(format!(
            "{lost} overwritten while reading, recorded as loss records"
        ));
    }
    eprintln!(
        "snapbus snapshot: {} records{} from bus '{}' in {}",
        summary.delivered,
        if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        },
        dir.name(),
        args.output.display()
    );
    debug_assert!(messages >= summary.delivered);
    Ok(())
}

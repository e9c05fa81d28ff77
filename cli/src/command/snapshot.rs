//! `snapbus snapshot`: a consistent cut of every lane — what each producer had written when
//! the snapshot began, including producers that died recently — into a recording. Producers
//! are not disturbed: the rings are read like any consumer reads them. With `--last T`, a
//! producer whose ring holds less than T of its past (its oldest record is younger than T,
//! though it ran longer) is named in a warning, with the span its ring does hold.

use anyhow::{Context, bail};
use snapbus_bus::lane::StartAt;
use snapbus_bus::lane::now_realtime_nanos;
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::{CUT_METADATA, Item, RecordingReader, WriterOptions};
use snapbus_consumers::run as run_consumer;

use snapbus_bus::client::{BusClient, BusState, Census};
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::RunSummary;

use crate::bus::{bus_dir, connect, globs, no_schema_matches, schema_ids, unmatched_globs};
use crate::cli::SnapshotArgs;
use crate::command::record::{is_permanent_write_error, run_error, write_error};

pub(crate) fn run(args: &SnapshotArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    let client = connect(&dir)?;
    if !globs.is_empty() {
        // Before the file is created: a glob that matches nothing is a mistake to report.
        let ids = schema_ids(&dir)?;
        let unmatched = unmatched_globs(&globs, &ids);
        let place = format!("bus '{}'", dir.name());
        if unmatched.len() == globs.len() {
            anyhow::bail!("{}", no_schema_matches(&unmatched, &ids, &place));
        } else if !unmatched.is_empty() {
            snapbus_bus::say!(
                "snapbus snapshot: warning: {}",
                no_schema_matches(&unmatched, &ids, &place)
            );
        }
    }
    let mut writer = WriterOptions::new("snapshot", dir.name().as_str());
    writer.overwrite = args.force;
    writer.compression = args.compression.compression();
    let start = match args.last {
        Some(d) => {
            let from = now_realtime_nanos()
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            // Advice only: a bus state that cannot be had does not stop the snapshot.
            // The history each ring holds now (a census of every ring).
            match client.state_with(Census::Fresh) {
                Ok(s) => {
                    for w in short_histories(&s, from, d.as_secs_f64()) {
                        snapbus_bus::say!("snapbus snapshot: warning: {w}");
                    }
                }
                Err(e) => snapbus_bus::say!(
                    "snapbus snapshot: warning: cannot tell whether the rings hold {:.1} s: {e:#}",
                    d.as_secs_f64()
                ),
            }
            StartAt::Time(from)
        }
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
    opts.subscribe.globs = globs;
    opts.subscribe.cut = true;
    opts.until_end = true;
    let result = run_consumer(&dir, &opts, &mut recorder, None);
    let lost = recorder.losses();
    let history_lost = recorder.history_losses();
    let damaged = recorder.damaged();
    let finished = recorder.finish();
    let summary = match result.map_err(run_error) {
        Err(e) if is_permanent_write_error(&e) => return Err(kept(e, &args.output)),
        other => other?,
    };
    let (_, messages) = match finished.map_err(write_error) {
        Err(e) if is_permanent_write_error(&e) => return Err(kept(e, &args.output)),
        other => other.context("finishing the snapshot")?,
    };
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
    if damaged > 0 {
        notes.push(format!(
            "{damaged} lost to garbage in the rings, recorded as damage (see `inspect`)"
        ));
    }
    snapbus_bus::say!(
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
    missed(&summary, &client, &opts.subscribe.globs, args)
}

/// Fails when the snapshot missed records: lanes it refused (their records are not in the file),
/// or no record read although the rings hold records of the schemas asked for (without
/// `--last`, which may rightly find none).
fn missed(
    summary: &RunSummary,
    client: &BusClient,
    globs: &[Glob],
    args: &SnapshotArgs,
) -> anyhow::Result<()> {
    if summary.refused_lanes > 0 {
        bail!(
            "{} lane{} refused (named above): {} records are not in {}",
            summary.refused_lanes,
            if summary.refused_lanes == 1 {
                " was"
            } else {
                "s were"
            },
            if summary.refused_lanes == 1 {
                "its"
            } else {
                "their"
            },
            args.output.display()
        );
    }
    if summary.delivered == 0 && args.last.is_none() {
        // Nothing read: was there nothing to read? (Asked only now: a census reads every ring.)
        let in_rings: u64 = client
            .state_with(Census::Recent)
            .map(|s| {
                s.schemas
                    .iter()
                    .filter(|sc| globs.is_empty() || globs.iter().any(|g| g.matches(&sc.id)))
                    .map(|sc| sc.in_rings)
                    .sum()
            })
            .unwrap_or(0);
        if in_rings > 0 {
            bail!(
                "the snapshot read no record, though the rings hold {in_rings} records of the \
                 schemas asked for: {} holds none of them",
                args.output.display()
            );
        }
    }
    Ok(())
}

/// A snapshot whose write failed for good (a full disk): the error, with what the file kept
/// (up to its last complete chunk) and what it could not write, read back from the file.
fn kept(e: anyhow::Error, output: &std::path::Path) -> anyhow::Error {
    let mut records = 0u64;
    let mut unwritten = None;
    if let Ok(f) = std::fs::File::open(output) {
        for item in RecordingReader::new(std::io::BufReader::with_capacity(1 << 20, f))
            .with_resync()
            .map_while(Result::ok)
        {
            match item {
                Item::Message(_) => records += 1,
                Item::Metadata { name, fields } if name == CUT_METADATA => {
                    unwritten = fields.get("unwritten").cloned();
                }
                _ => {}
            }
        }
    }
    let unwritten = unwritten.map_or_else(String::new, |n| {
        format!("; {n} records read from the bus were not written")
    });
    e.context(format!(
        "the snapshot was cut: {} keeps {records} records, up to its last complete chunk{unwritten}",
        output.display()
    ))
}

/// The producers whose rings hold less than the `last_secs` before `from_nanos` asked for,
/// though they were running then: what to tell the user, one line each.
fn short_histories(s: &BusState, from_nanos: u64, last_secs: f64) -> Vec<String> {
    s.producers
        .iter()
        .filter_map(|p| {
            let oldest = p.history_start_nanos?;
            // Only a ring that has wrapped lost older records (a producer that started after
            // `from`, or wrote its first record after it, has nothing older to lose).
            let wrapped = p.history_first_seq.is_some_and(|seq| seq > 0);
            (oldest > from_nanos && wrapped).then(|| {
                format!(
                    "producer '{}' (pid {}): its ring holds only the last {:.1} s of the {:.1} s \
                     asked for ({} lane); the older records were overwritten. A larger \
                     SNAPBUS_LANE_BYTES keeps more (README: \"How much history\")",
                    p.info.name,
                    p.info.pid,
                    p.history_secs,
                    last_secs,
                    if p.lane_bytes >= 1 << 20 {
                        format!("{} MiB", p.lane_bytes >> 20)
                    } else {
                        format!("{} KiB", p.lane_bytes >> 10)
                    }
                )
            })
        })
        .collect()
}

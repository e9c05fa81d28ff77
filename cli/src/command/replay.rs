//! `snapbus replay`: republishes recordings into the running bus as a producer of its own
//! (`replay` in `snapbus ls`), with the original relative timing scaled by `--speed`, or as
//! fast as possible (`--max`). Every consumer sees replayed records exactly as live ones.
//! `--print` writes them as JSON lines instead, without any bus, in record-time order across
//! producers (see [`merge`]).

mod merge;

use std::fs::File;
use std::io::{BufReader, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::{Publisher, PublisherConfig};
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::recording::{CUT_METADATA, Item, RecordingReader};

use crate::command::inspect::{Skipped, cut_line};
use snapbus_consumers::replay::{Pace, ReplaySummary, replay};

use crate::bus::{bus_dir, connect, globs, interrupted, message_json};
use crate::cli::ReplayArgs;

/// How long to wait for the broker to adopt the replay producer.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

fn open(path: &std::path::Path) -> anyhow::Result<RecordingReader<BufReader<File>>> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(RecordingReader::new(BufReader::with_capacity(1 << 20, f)).with_resync())
}

pub(crate) fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    if !(args.speed.is_finite() && args.speed > 0.0) {
        bail!("--speed must be a positive number, got {}", args.speed);
    }
    if args.name.trim().is_empty() || args.name.chars().any(char::is_control) {
        bail!(
            "--name {:?} is not a producer name: give a non-empty name without control \
             characters (the default is 'replay')",
            args.name
        );
    }
    // Every file is opened and checked for its header before anything is printed or
    // published.
    for f in &args.files {
        if let Some(Err(e)) = open(f)?.next() {
            bail!("{}: {e}", f.display());
        }
    }
    if args.print {
        return print(args, &globs);
    }
    let dir = bus_dir(&args.bus)?;
    drop(connect(&dir)?);
    let publisher = Publisher::start(
        dir.clone(),
        PublisherConfig {
            name: args.name.clone(),
            lane: LaneConfig::default(),
            session_tag: None,
            perf_tag: None,
            relayed: false,
        },
    )?;
    let t0 = Instant::now();
    while !publisher.is_connected() {
        if t0.elapsed() > JOIN_TIMEOUT {
            bail!(
                "the broker of bus '{}' did not adopt the replay producer",
                dir.name()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let stop = interrupted()?;
    let pace = if args.max {
        Pace::Max
    } else {
        Pace::Speed(args.speed)
    };
    let mut summary = ReplaySummary::default();
    let mut failure = None;
    for f in &args.files {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if let Err(e) = replay(open(f)?, &publisher, pace, &globs, &stop, &mut summary) {
            failure = Some(anyhow::anyhow!("{}: {e}", f.display()));
            break;
        }
    }
    publisher.close();
    snapbus_bus::say!(
        "snapbus replay: {} records republished on bus '{}' in {:.2} s{}{}{}",
        summary.emitted,
        dir.name(),
        t0.elapsed().as_secs_f64(),
        if summary.skipped > 0 {
            format!(", {} not matching --schema", summary.skipped)
        } else {
            String::new()
        },
        if summary.refused > 0 {
            format!(", {} refused by the lane", summary.refused)
        } else {
            String::new()
        },
        if summary.lost_in_recording > 0 {
            format!(
                ", {} were lost when the recording was made",
                summary.lost_in_recording
            )
        } else {
            String::new()
        },
    );
    for d in &summary.damaged {
        snapbus_bus::say!("snapbus replay: {d}");
    }
    match failure {
        Some(e) => Err(e.context("the rest of the recording was not replayed")),
        None if !summary.damaged.is_empty() => {
            let mut skipped = Skipped::default();
            summary.damaged.iter().for_each(|d| skipped.add(d));
            bail!("{}", skipped.line("replayed"))
        }
        None => match &summary.cut {
            Some(c) => bail!("the recording is incomplete: {}", cut_line(c)),
            None => Ok(()),
        },
    }
}

/// `--print`: JSON lines, no bus, no timing; each file in record-time order.
fn print(args: &ReplayArgs, globs: &[Glob]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let mut skipped = Skipped::default();
    let mut cut = None;
    for f in &args.files {
        for item in merge::items(f)? {
            let item = match item {
                Ok(i) => i,
                Err(e) => {
                    out.flush()?;
                    bail!("{}: {e}", f.display());
                }
            };
            match item {
                Item::Message(m) => {
                    let id = m.channel.schema.id();
                    if globs.is_empty() || globs.iter().any(|g| g.matches(id)) {
                        writeln!(out, "{}", message_json(&m))?;
                    }
                }
                Item::Loss {
                    channel, record, ..
                } => {
                    out.flush()?;
                    snapbus_bus::say!(
                        "snapbus replay: the recording lost {} records of producer '{}' (pid {}) here{}",
                        record.lost + record.damaged,
                        channel.producer,
                        record.producer_pid,
                        if record.damaged > 0 {
                            format!(" ({} to garbage in its ring)", record.damaged)
                        } else {
                            String::new()
                        }
                    );
                }
                Item::Metadata { name, fields } => {
                    if name == CUT_METADATA {
                        cut = Some(fields);
                    }
                }
                Item::Damaged(d) => {
                    out.flush()?;
                    snapbus_bus::say!("snapbus replay: {}: {d}", f.display());
                    skipped.add(&d);
                }
            }
        }
    }
    out.flush()?;
    if skipped.parts > 0 {
        bail!("{}", skipped.line("printed"));
    }
    if let Some(c) = cut {
        bail!("the recording is incomplete: {}", cut_line(&c));
    }
    Ok(())
}

//! `snapbus aggregate`: the aggregator in this terminal (`attach aggregator` and `spawn
//! aggregator` run it under the broker). Ctrl-C (or SIGTERM, which `detach` sends) stops it;
//! windows still open then are not emitted (they are incomplete).
//!
//! Checked before anything is read: a `--csv` directory files cannot be created in, and (against
//! the schemas on the bus) `--schema` globs that match nothing — an error with `--until-end`, a
//! warning on a live bus (also once the first schemas appear, if there were none). A `--field`
//! glob or `--episode-field` that no summarized schema has is warned about per schema, and is an
//! error at the end with `--until-end`. `attach aggregator` and `spawn aggregator` also warn
//! their caller (who does not see the aggregator's log) about such fields, for the schemas on
//! the bus whose descriptors this build knows (built-in and demo).
//!
//! Restarted by the broker after a crash (`SNAPBUS_RESTART=N`, N ≥ 1), it first reads the
//! summaries its earlier runs emitted (still in the rings) and does not emit those windows
//! again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use snapbus_bus::runtime::BusDir;
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::aggregator::{
    Aggregator, AggregatorOptions, PublisherSink, Resume, option_mismatches, previous_summaries,
};
use snapbus_consumers::{BatchReads, RunOptions, run as run_consumer};

use crate::bus::{bus_dir, connect, globs, no_schema_matches, schema_ids, unmatched_globs};
use crate::cli::{BusArgs, From};
use crate::consumer_kinds::kind::{BuiltinConsumer, bus_and_run, restart_count};

/// Options of `snapbus aggregate` (and `attach aggregator`, `spawn aggregator`).
#[derive(Debug, Clone, Args)]
#[command(after_long_help = AGGREGATE_HELP)]
pub(crate) struct AggregateArgs {
    /// Schema-id globs to summarize (default: all); repeatable. Summary schemas are only
    /// summarized again when a glob ends in `.summary`. Globs that match no schema on the bus
    /// are a warning (an error with --until-end).
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// A field whose values split records into groups (dotted path to a number, bool, string
    /// or enum); repeatable. Records are always grouped by producer too.
    #[arg(long = "group-by", value_name = "FIELD")]
    pub(crate) group_by: Vec<String>,
    /// How records are cut into windows: `episode` (a window per value of --episode-field),
    /// `steps:N` (every N records of a group) or `secs:T` (every T seconds of record time).
    #[arg(long, default_value = "episode", value_parser = parse_window)]
    pub(crate) window: snapbus_consumers::aggregator::Window,
    /// The integer field that numbers episodes.
    #[arg(long, default_value = "episode", value_name = "FIELD")]
    pub(crate) episode_field: String,
    /// Summarize only these fields (dotted-path globs, e.g. 'reward' or 'info.*'); repeatable.
    #[arg(long = "field", value_name = "GLOB")]
    pub(crate) fields: Vec<String>,
    /// Also write one CSV row per emitted summary, one file per summary schema in this
    /// directory (`<schema>.summary.csv`; `<schema>.summary-<i>of<N>.csv` for workers).
    #[arg(long, value_name = "DIR")]
    pub(crate) csv: Option<PathBuf>,
    /// Start at the oldest records still in the rings (history), or at new ones.
    #[arg(long, value_enum, default_value_t = From::Oldest)]
    pub(crate) from: From,
    /// Exit once every producer on the bus but this aggregator has ended, after emitting
    /// their experiment summaries (other aggregators are producers too).
    #[arg(long)]
    pub(crate) until_end: bool,
    /// One experiment summary per run rather than per producer: the producers with the same
    /// name and session tag (the workers of a parallel experiment) are combined, and their
    /// experiment summary is emitted once all of them have ended (and none has joined for
    /// --combine-grace-secs), or when the aggregator stops. Windows stay per producer.
    #[arg(long)]
    pub(crate) combine_producers: bool,
    /// With --combine-producers: how long a run's experiment summary waits, after its last
    /// producer ended, for another producer of the run to join (a worker started later).
    #[arg(long, value_name = "SECS", default_value_t = 5.0, value_parser = parse_grace)]
    pub(crate) combine_grace_secs: f64,
    /// This worker's share of the work, I/N (`spawn aggregator -n N` sets it).
    #[arg(long, value_name = "I/N", default_value = "1/1", value_parser = parse_worker)]
    pub(crate) worker: (u32, u32),
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

/// The `--help` text of the summary schema.
const AGGREGATE_HELP: &str = "\
Summaries are emitted onto the bus as `<schema>.summary` snapshots (same version as the
source), one per closed window of each group and, when a producer ends, one per group with
window = \"experiment\" (with --combine-producers, one per group for all the producers of a
run: producer_pid 0, producer_lane the run's id, first_seq and last_seq 0):
  producer, producer_pid, producer_lane, group {<group-by fields>}, window, index,
  count, lost, first_t_nanos, last_t_nanos, first_seq, last_seq,
  stats {<field> {count, mean, std, min, max, last, p50, p95, p99}}
Numeric fields at any depth are summarized (bools as 0/1; arrays of up to 16 numbers element
by element; longer arrays, sequences and tensors by their mean, min and max per record).
Quantiles are within 1 % of the exact order statistic (DDSketch). `lost` counts records of the
producer overwritten before they were read. A restarted worker does not emit again what it
emitted before, and reports what the rings no longer hold as lost.";

fn parse_window(s: &str) -> Result<snapbus_consumers::aggregator::Window, String> {
    s.parse()
}

fn parse_grace(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if (0.0..=86_400.0).contains(&t) => Ok(t),
        _ => Err(format!("expected seconds from 0 to 86400, got {s:?}")),
    }
}

fn parse_worker(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("expected I/N with 1 ≤ I ≤ N ≤ 64, e.g. 2/3, got {s:?}");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u32, u32) = (i.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if i == 0 || i > n || n > 64 {
        return Err(bad());
    }
    Ok((i, n))
}

impl BuiltinConsumer for AggregateArgs {
    const KIND: &'static str = "aggregator";
    const VERB: &'static str = "aggregate";
    const VERB_ABOUT: &'static str = "Summarize step events per episode (or N steps, or T \
        seconds) and per experiment, in this terminal; the summaries are emitted back onto the \
        bus as `<schema>.summary`";
    const ATTACH_ABOUT: &'static str = "Summarize step events per episode and per experiment, \
        emitting `<schema>.summary` snapshots (see `snapbus aggregate --help`)";
    const SPAWN_ABOUT: Option<&'static str> = Some(
        "N aggregator workers; each summarizes the groups whose hash of (schema, producer \
         (its run with --combine-producers), group values) falls to it, so together they see \
         every group once",
    );
    const PATH_FLAGS: &'static [&'static str] = &["csv"];

    bus_and_run!();

    /// The options (creating the `--csv` directory), the `--schema` globs against the bus, and
    /// warnings about fields the schemas on the bus lack.
    fn check(&self, dir: &BusDir, who: &'static str) -> anyhow::Result<()> {
        options(self)?;
        check_schemas(self, dir, who)?;
        warn_field_mismatches(self, dir, who)
    }

    fn what(&self) -> String {
        "<schema>.summary snapshots".to_owned()
    }
}

pub(crate) fn run(args: &AggregateArgs) -> anyhow::Result<()> {
    let opts = options(args)?;
    let dir = bus_dir(&args.bus)?;
    drop(connect(&dir)?);
    check_schemas(args, &dir, "snapbus aggregate")?;
    let label = opts.worker_label();
    let name = if label.is_empty() {
        "aggregator".to_owned()
    } else {
        format!("aggregator-{label}")
    };
    let restart = restart_count();
    let resume = if restart > 0 {
        let r = previous_summaries(&dir, &name, &opts).context("reading earlier summaries")?;
        snapbus_bus::say!(
            "snapbus aggregate: restart {restart}: {} summaries of {} group(s) from earlier runs \
             are still on the bus; those windows are not emitted again",
            r.summaries,
            r.groups()
        );
        r
    } else {
        Resume::default()
    };
    let sink = PublisherSink::start(&dir, &name).context("starting the summary producer")?;
    let own_lane = sink.publisher().info().lane_id;
    let mut aggregator = Aggregator::new(opts.clone(), sink);
    aggregator.resume_from(resume);
    let mut run_opts = RunOptions::new(name.clone());
    run_opts.subscribe.globs = opts.globs.clone();
    run_opts.subscribe.start = args.from.start();
    run_opts.until_end = args.until_end;
    // Its own summaries are not read back (and its lane never ends while it runs).
    run_opts.subscribe.skip_lanes = vec![own_lane];
    // A producer's records overwritten before this worker read them are missing from its
    // experiment summary: say so.
    run_opts.subscribe.count_history_as_lost = true;
    // Summaries per episode need no microseconds: read a batch behind the producers.
    run_opts.batch = Some(BatchReads::default());
    snapbus_bus::say!(
        "snapbus aggregate: {name} summarizing bus '{}' per {}{} (Ctrl-C to stop)",
        dir.name(),
        opts.window,
        if opts.group_by.is_empty() {
            String::new()
        } else {
            format!(", grouped by {}", opts.group_by.join(", "))
        }
    );
    let result = run_consumer(&dir, &run_opts, &mut aggregator, None);
    // Runs whose producers have all ended get their combined summary now, grace or not.
    let finished = aggregator.finish();
    let s = aggregator.stats();
    snapbus_bus::say!(
        "snapbus aggregate: {} records summarized ({} of other workers' groups, {} skipped), {} \
         window and {} experiment summaries emitted, {} not emitted again, {} records lost \
         before they could be read{}; {} window(s) still open were not emitted",
        s.summarized,
        s.other_workers,
        s.skipped,
        s.windows,
        s.experiments,
        s.already_emitted,
        s.lost,
        if restart > 0 && s.lost > 0 {
            " (not recoverable: the rings no longer hold them)"
        } else {
            ""
        },
        aggregator.open_windows()
    );
    result?;
    finished.map_err(|e| anyhow::anyhow!("emitting the combined experiment summaries: {e}"))?;
    let unmatched = aggregator.unmatched_options();
    if args.until_end && !unmatched.is_empty() {
        anyhow::bail!("{}", unmatched.join("; "));
    }
    Ok(())
}

/// Checks the `--schema` globs against the schemas on the bus: with `--until-end`, globs that
/// match none of them are an error; on a live bus a warning (such schemas may still appear).
/// If the bus has no schemas yet, a thread waits for the first ones and warns then.
fn check_schemas(args: &AggregateArgs, dir: &BusDir, who: &'static str) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    if globs.is_empty() {
        return Ok(());
    }
    let ids = schema_ids(dir)?;
    if ids.is_empty() {
        if !args.until_end {
            let dir = dir.clone();
            std::thread::spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(500));
                    match schema_ids(&dir) {
                        Ok(ids) if ids.is_empty() => {}
                        Ok(ids) => {
                            warn_unmatched(&globs, &ids, &dir, who);
                            return;
                        }
                        Err(_) => return,
                    }
                }
            });
        }
        return Ok(());
    }
    let unmatched = unmatched_globs(&globs, &ids);
    if args.until_end && unmatched.len() == globs.len() {
        anyhow::bail!(
            "{}",
            no_schema_matches(&unmatched, &ids, &format!("bus '{}'", dir.name()))
        );
    }
    warn_unmatched(&globs, &ids, dir, who);
    Ok(())
}

/// For `attach` and `spawn`, whose caller does not see the aggregator's output: warns about
/// options naming fields that schemas on the bus lack (`--field`, `--group-by`, and the episode
/// field when `--schema` or `--episode-field` was given), for the schemas whose descriptors
/// this build knows (built-in and demo); the aggregator's log warns about every schema.
fn warn_field_mismatches(args: &AggregateArgs, dir: &BusDir, who: &str) -> anyhow::Result<()> {
    let opts = options(args)?;
    let explicit_episode = !args.schemas.is_empty() || args.episode_field != "episode";
    if args.fields.is_empty() && args.group_by.is_empty() && !explicit_episode {
        return Ok(());
    }
    let mut known: Vec<&snapbus_schemas::SchemaDescriptor> =
        snapbus_schemas::builtin::all().to_vec();
    known.extend(crate::demo::descriptors());
    for s in crate::bus::state(dir)?.schemas {
        if !opts.globs.is_empty() && !opts.globs.iter().any(|g| g.matches(&s.id)) {
            continue;
        }
        let Some(d) = known
            .iter()
            .find(|d| format!("{:016x}", d.fingerprint()) == s.fingerprint)
        else {
            continue;
        };
        for m in option_mismatches(&opts, d) {
            if m.contains("--episode-field") && !explicit_episode {
                continue;
            }
            snapbus_bus::say!("{who}: warning: {m}");
        }
    }
    Ok(())
}

fn warn_unmatched(globs: &[Glob], ids: &[String], dir: &BusDir, who: &str) {
    let unmatched = unmatched_globs(globs, ids);
    if !unmatched.is_empty() {
        snapbus_bus::say!(
            "{who}: warning: {} (records of such schemas are summarized if they appear)",
            no_schema_matches(&unmatched, ids, &format!("bus '{}'", dir.name()))
        );
    }
}

/// Creates the `--csv` directory (0700) and checks that files can be created in it, before
/// anything is read.
fn check_csv_dir(dir: &Path) -> anyhow::Result<()> {
    crate::bus::create_dir(dir)
        .with_context(|| format!("--csv: creating the directory {}", dir.display()))?;
    crate::bus::check_writable_dir(dir).context("--csv")
}

/// The library options from the arguments (checked).
pub(crate) fn options(args: &AggregateArgs) -> anyhow::Result<AggregatorOptions> {
    let mut opts = AggregatorOptions::new(args.window);
    opts.globs = globs(&args.schemas)?;
    opts.fields = globs(&args.fields).context("--field")?;
    for f in args.group_by.iter().chain([&args.episode_field]) {
        if f.is_empty() || f.split('.').any(str::is_empty) {
            anyhow::bail!("{f:?} is not a field path (names separated by dots, e.g. info.env_id)");
        }
    }
    opts.group_by = args.group_by.clone();
    opts.episode_field = args.episode_field.clone();
    opts.combine_producers = args.combine_producers;
    opts.combine_grace = Duration::from_secs_f64(args.combine_grace_secs);
    (opts.worker, opts.workers) = (args.worker.0 - 1, args.worker.1);
    opts.csv_dir = match &args.csv {
        Some(p) => {
            let dir =
                std::path::absolute(p).with_context(|| format!("resolving {}", p.display()))?;
            check_csv_dir(&dir)?;
            Some(dir)
        }
        None => None,
    };
    Ok(opts)
}

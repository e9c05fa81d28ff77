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

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use snapbus_bus::lane::StartAt;
use snapbus_bus::runtime::BusDir;
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::aggregator::{
    Aggregator, AggregatorOptions, PublisherSink, Resume, option_mismatches, previous_summaries,
};
use snapbus_consumers::{RunOptions, run as run_consumer};

use crate::bus::{bus_dir, connect, globs, no_schema_matches, schema_ids, unmatched_globs};
use crate::cli::{AggregateArgs, From};

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
    let restart: u32 = std::env::var("SNAPBUS_RESTART")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let resume = if restart > 0 {
        let r = previous_summaries(&dir, &name, &opts).context("reading earlier summaries")?;
        eprintln!(
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
    run_opts.globs = opts.globs.clone();
    run_opts.start = StartAt::from(args.from);
    run_opts.until_end = args.until_end;
    // Its own summaries are not read back (and its lane never ends while it runs).
    run_opts.skip_lanes = vec![own_lane];
    // A producer's records overwritten before this worker read them are missing from its
    // experiment summary: say so.
    run_opts.count_history_as_lost = true;
    eprintln!(
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
    let s = aggregator.stats();
    eprintln!(
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
    let unmatched = aggregator.unmatched_options();
    if args.until_end && !unmatched.is_empty() {
        anyhow::bail!("{}", unmatched.join("; "));
    }
    Ok(())
}

/// Checks the `--schema` globs against the schemas on the bus: with `--until-end`, globs that
/// match none of them are an error; on a live bus a warning (such schemas may still appear).
/// If the bus has no schemas yet, a thread waits for the first ones and warns then.
pub(crate) fn check_schemas(
    args: &AggregateArgs,
    dir: &BusDir,
    who: &'static str,
) -> anyhow::Result<()> {
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
pub(crate) fn warn_field_mismatches(
    args: &AggregateArgs,
    dir: &BusDir,
    who: &str,
) -> anyhow::Result<()> {
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
            eprintln!("{who}: warning: {m}");
        }
    }
    Ok(())
}

fn warn_unmatched(globs: &[Glob], ids: &[String], dir: &BusDir, who: &str) {
    let unmatched = unmatched_globs(globs, ids);
    if !unmatched.is_empty() {
        eprintln!(
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

/// The `snapbus aggregate` command line a supervised worker runs (paths made absolute).
pub(crate) fn argv(args: &AggregateArgs, worker: (u32, u32)) -> anyhow::Result<Vec<String>> {
    let opts = options(args)?;
    let dir = bus_dir(&args.bus)?;
    // `--bus=NAME`: a name can never be read as an option.
    let mut argv = vec!["aggregate".to_owned(), format!("--bus={}", dir.name())];
    // `--flag=VALUE`: a value starting with '-' is not read as an option.
    let mut push = |flag: &str, value: String| argv.push(format!("{flag}={value}"));
    for g in &args.schemas {
        push("--schema", g.clone());
    }
    for g in &args.group_by {
        push("--group-by", g.clone());
    }
    push("--window", opts.window.to_string());
    push("--episode-field", opts.episode_field.clone());
    for f in &args.fields {
        push("--field", f.clone());
    }
    if let Some(d) = &opts.csv_dir {
        push("--csv", d.display().to_string());
    }
    push(
        "--from",
        match args.from {
            From::Oldest => "oldest",
            From::Latest => "latest",
        }
        .to_owned(),
    );
    push("--worker", format!("{}/{}", worker.0, worker.1));
    if args.until_end {
        argv.push("--until-end".to_owned());
    }
    Ok(argv)
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

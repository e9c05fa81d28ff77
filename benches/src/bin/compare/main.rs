//! `compare`: snapbus against the transports researchers use today, side by side, in one run,
//! with producer and consumer in separate processes pinned to different CPUs.
//!
//! ```sh
//! cargo run --release -p snapbus-benches --features iceoryx2 --bin compare -- --out benches/runs/   # ~7 min
//! cargo run --release -p snapbus-benches --bin compare -- --quick           # < 1 min, prints only
//! ```
//!
//! For every message size (64 B, 4 KiB, 1 MiB) and every peer it measures throughput (messages
//! delivered per second at the consumer, and GB/s) and one-way latency (p50/p99 of a paced
//! stream, for a spinning and a sleeping consumer where the peer has both), plus the machine's
//! own limits (memcpy bandwidth of 1 MiB blocks, the cross-process cache-line round trip).
//! Runs are interleaved (all peers of a size in turn, rotated each repetition) and repeated;
//! the report gives the median and min–max of the repetitions, the load other processes put
//! on the machine during each run, and the ratio snapbus / best peer per row.
//!
//! The harness re-executes itself as the processes of each run (`compare child …`, a JSON-line
//! protocol on their stdout; see `run.rs`); the Python peer is `mp_queue.py` beside this file.
//!
//! The Python rows (snapbus from Python against `multiprocessing.Queue` and a `QueueHandler`
//! pipeline: `benches/python/compare_py.py`) run after the others, on the same bus, under
//! `--python PATH`, else `$SNAPBUS_PYTHON`, else the venv `.ci/test` makes
//! (`target/py-3.X/bin/python`); without one they are reported "not measured" (see
//! `python_rows.rs`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[cfg(feature = "bridge")]
mod bridge_rows;
mod common;
mod peers;
mod python_rows;
mod refs;
mod report;
mod run;

use common::RunArgs;

/// snapbus against its peers: throughput and latency across processes, in one run.
#[derive(Parser, Debug)]
#[command(name = "compare")]
struct Cli {
    #[command(subcommand)]
    child: Option<Sub>,
    /// A short run (under a minute: one repetition, 0.1 s per throughput run): proves the
    /// harness and every peer work; its figures are not for publishing.
    #[arg(long)]
    quick: bool,
    /// Repetitions of every run (default 5; 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Only these peers (repeatable; default all).
    #[arg(long = "peer", value_name = "PEER")]
    peers: Vec<String>,
    /// Only these message sizes in bytes (repeatable; default 64, 4096, 1048576).
    #[arg(long = "size", value_name = "BYTES")]
    sizes: Vec<usize>,
    /// Seconds the producer sends in a throughput run (default 1; 0.1 with --quick).
    #[arg(long)]
    secs: Option<f64>,
    /// Where the report goes (it is always printed). A directory (existing, or given with a
    /// final `/`, e.g. `benches/runs/`): the full report into `DIR/<date>-<machine>/compare.md`
    /// and, for a full run, the page sections as by default. A file: a Markdown file whose
    /// `compare` section is replaced (created if missing). Default: the sections of the
    /// workspace's BENCHMARKS.md and README.md for a full run of every peer and size, nowhere
    /// for --quick or a filtered run.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the report only.
    #[arg(long, conflicts_with = "out")]
    no_write: bool,
    /// Every consumer reads every byte of every message (a checksum it verifies), where by
    /// default each checks only a message's first words and last: the fair comparison of the
    /// peers that read in place with those that copy. A full run writes its own section of
    /// BENCHMARKS.md; the Python rows are not run.
    #[arg(long)]
    every_byte: bool,
    /// The interpreter for the Python rows (one with snapbus and numpy installed). Default:
    /// $SNAPBUS_PYTHON, else the test venv `.ci/test` makes (target/py-3.X), if it exists.
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// Only these groups of Python rows (repeatable: `recording`, the `to_pandas` rows of
    /// `benches/python/recording_rows.py`), and no other run: a focused measurement that
    /// prints its rows and writes nothing.
    #[arg(long = "python-rows", value_name = "GROUP")]
    python_rows: Vec<String>,
    /// Run only the cross-namespace rows: `snapbus bridge` against Zenoh's own pub/sub between
    /// two network namespaces (root; benches feature `bridge`; see `bridge_rows.rs`).
    #[cfg(feature = "bridge")]
    #[arg(long)]
    bridge: bool,
    /// With --bridge: a `snapbus` built with `--features bridge` (default: beside this binary).
    #[cfg(feature = "bridge")]
    #[arg(long, value_name = "PATH")]
    snapbus: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// One process of a run (used by the harness itself).
    #[command(hide = true)]
    Child {
        #[command(subcommand)]
        role: Role,
    },
}

#[derive(Subcommand, Debug)]
enum Role {
    Consumer(RunArgs),
    Producer(RunArgs),
    Both(RunArgs),
    Memcpy {
        #[arg(long)]
        cpu: Option<usize>,
        #[arg(long)]
        secs: f64,
    },
    Ping {
        #[arg(long)]
        cpu: Option<usize>,
        #[arg(long)]
        secs: f64,
    },
    Pong {
        #[arg(long)]
        cpu: Option<usize>,
        #[arg(long)]
        rendezvous: String,
    },
    #[cfg(feature = "bridge")]
    BridgeSend(bridge_rows::SideArgs),
    #[cfg(feature = "bridge")]
    BridgeReceive(bridge_rows::SideArgs),
}

fn child(role: Role) -> Result<()> {
    match role {
        Role::Consumer(a) => {
            common::pin(a.cpu)?;
            peers::consumer(&a)
        }
        Role::Producer(a) => {
            common::pin(a.cpu)?;
            peers::producer(&a)
        }
        Role::Both(a) => peers::both(&a),
        Role::Memcpy { cpu, secs } => refs::memcpy(cpu, secs),
        Role::Ping { cpu, secs } => refs::ping(cpu, secs),
        Role::Pong { cpu, rendezvous } => refs::pong(cpu, &rendezvous),
        #[cfg(feature = "bridge")]
        Role::BridgeSend(a) => bridge_rows::send(&a),
        #[cfg(feature = "bridge")]
        Role::BridgeReceive(a) => bridge_rows::receive(&a),
    }
}

fn parent(cli: Cli) -> Result<bool> {
    #[cfg(feature = "bridge")]
    if cli.bridge {
        let snapbus = match &cli.snapbus {
            Some(p) => p.clone(),
            None => std::env::current_exe()?.with_file_name("snapbus"),
        };
        bridge_rows::run(&snapbus, cli.quick)?;
        return Ok(true);
    }
    let all_sizes = [64usize, 4 << 10, 1 << 20];
    let sizes = if cli.sizes.is_empty() {
        all_sizes.to_vec()
    } else {
        cli.sizes.clone()
    };
    if let Some(s) = sizes
        .iter()
        .find(|&&s| !(common::HEADER_LEN..=4 << 20).contains(&s))
    {
        bail!(
            "--size {s}: sizes go from {} bytes to 4 MiB",
            common::HEADER_LEN
        );
    }
    let mut peers = Vec::new();
    let mut skipped = Vec::new();
    for p in peers::PEERS {
        if !cli.peers.is_empty() && !cli.peers.iter().any(|n| n == p.name) {
            continue;
        }
        match (p.available)() {
            Ok(()) => peers.push(p),
            Err(why) => skipped.push((p, why)),
        }
    }
    for name in &cli.peers {
        peers::find(name)?;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        bail!("the harness pins producer and consumer to two CPUs: this process may use one");
    }
    let plan = run::Plan {
        quick: cli.quick,
        reps: cli.reps.unwrap_or(if cli.quick { 1 } else { 5 }).max(1),
        sizes,
        peers,
        secs: cli.secs.unwrap_or(if cli.quick { 0.1 } else { 1.0 }),
        ref_secs: if cli.quick { 0.1 } else { 0.5 },
        every_byte: cli.every_byte,
    };
    let only_python = !cli.python_rows.is_empty();
    let plan = run::Plan {
        peers: if only_python { Vec::new() } else { plan.peers },
        ..plan
    };
    let full = cli.peers.is_empty() && cli.sizes.is_empty() && !cli.quick && !only_python;
    let dest = report::destination(cli.out.as_deref(), cli.no_write, full);

    // Sockets, the bus and the runs' files; removed when the run ends, however it ends.
    let scratch = snapbus_benches::TempDir::new("compare").context("the scratch directory")?;
    let root = scratch.path().to_path_buf();
    let bus_dir = peers::snapbus_bus_dir(&root)?;
    let broker = snapbus_bus::broker::InProcess::start(bus_dir.clone(), Duration::from_millis(200))
        .context("start the broker")?;

    let started = std::time::SystemTime::now();
    let mut outcomes = Vec::new();
    let mut refs = Vec::new();
    let mut n = 0;
    for rep in 0..if only_python { 0 } else { plan.reps } {
        run::check_exe()?;
        let r = run::run_refs(&plan, &root);
        eprintln!(
            "[{}/{}] references: {}",
            rep + 1,
            plan.reps,
            report::refs_line(&r)
        );
        refs.push(r);
        for job in run::jobs(&plan, rep) {
            n += 1;
            let o = run::run_job(&plan, &job, &root, n);
            eprintln!("[{}/{}] {}", rep + 1, plan.reps, report::outcome_line(&o));
            outcomes.push(o);
        }
    }
    let python = match python_rows::interpreter(cli.python.as_deref()) {
        _ if plan.every_byte => python_rows::PyOutcome::Skipped("not run with --every-byte".into()),
        _ if !cli.peers.is_empty() && !cli.peers.iter().any(|p| p.starts_with("python")) => {
            python_rows::PyOutcome::Skipped("no Python peer among the --peer filter".into())
        }
        Ok(py) => python_rows::run(&py, plan.quick, plan.reps, &bus_dir, &cli.python_rows),
        Err(why) => python_rows::PyOutcome::Skipped(why),
    };
    eprintln!("{}", python_rows::progress_line(&python));
    let _ = broker.stop();
    drop(scratch);

    let report = report::render(
        &report::Input {
            plan: &plan,
            outcomes: &outcomes,
            refs: &refs,
            skipped: &skipped,
            started,
            finished: std::time::SystemTime::now(),
            command: report::command_line(),
            python: &python,
        },
        &dest,
    );
    println!("{}", report.full);
    for path in report::write(&report, &dest)? {
        eprintln!("wrote the report into {}", path.display());
    }
    let failed =
        outcomes.iter().filter(|o| o.result.is_err()).count() + usize::from(python.failed());
    if failed > 0 {
        eprintln!("{failed} run(s) failed (see the report)");
    }
    Ok(failed == 0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.child {
        Some(Sub::Child { role }) => child(role).map(|()| true),
        None => parent(cli),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("compare: {e:#}");
            ExitCode::FAILURE
        }
    }
}

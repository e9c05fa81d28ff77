//! The report of one run, in three shapes:
//!
//! - the **full report** (machine, method, how each peer is configured, every table, the
//!   ratios), printed, and written to `DIR/<date>-<machine>/compare.md` under `--out DIR`;
//! - the **page section** of `BENCHMARKS.md` between the `compare` markers (the
//!   `compare-every-byte` ones for `--every-byte`): the run in one paragraph and its tables;
//! - the **headline** of `README.md` between the `compare:readme` markers: a few rows.
//!
//! `tables.rs` renders the tables, `machine.rs` describes the machine, `machines.rs` keeps the
//! last two machines' key figures side by side, `page.rs` assembles the shapes and writes them.

mod machine;
mod machines;
mod page;
mod tables;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::common::{Mode, Wait};
use crate::peers::PeerDef;
use crate::run::{Outcome, Plan, RefOutcome};

pub(crate) use page::{destination, render, write};

/// Runs whose other-process load exceeds this are flagged.
const NOISY_PCT: f64 = 10.0;

/// Everything a report is made of.
pub(crate) struct Input<'a> {
    pub(crate) plan: &'a Plan,
    pub(crate) outcomes: &'a [Outcome],
    pub(crate) refs: &'a [RefOutcome],
    pub(crate) skipped: &'a [(&'static PeerDef, String)],
    pub(crate) started: SystemTime,
    pub(crate) finished: SystemTime,
    pub(crate) command: String,
    /// The Python rows.
    pub(crate) python: &'a crate::python_rows::PyOutcome,
}

/// A file at the workspace's root (`BENCHMARKS.md`, `README.md`, `Cargo.lock`).
fn workspace_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

/// How this run was started, as a command to paste.
pub(crate) fn command_line() -> String {
    let features = if cfg!(feature = "iceoryx2") {
        " --features iceoryx2"
    } else {
        ""
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cmd = format!("cargo run --release -p snapbus-benches{features} --bin compare");
    if !args.is_empty() {
        let _ = write!(cmd, " -- {}", args.join(" "));
    }
    cmd
}

/// Median, min and max of some repetitions.
#[derive(Clone, Copy, Debug)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

fn spread(mut v: Vec<f64>) -> Option<Spread> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
    })
}

/// The figures of one row (one peer, size, mode, way of waiting) over its repetitions.
#[derive(Default)]
struct Row {
    rate: Vec<f64>,
    sent_rate: Vec<f64>,
    lost_pct: Vec<f64>,
    bad: u64,
    p50: Vec<f64>,
    p99: Vec<f64>,
    other_load: Vec<f64>,
    errors: Vec<String>,
}

impl Row {
    fn rate(&self) -> Option<Spread> {
        spread(self.rate.clone())
    }
    fn p50(&self) -> Option<Spread> {
        spread(self.p50.clone())
    }
    fn p99(&self) -> Option<Spread> {
        spread(self.p99.clone())
    }
    fn max_load(&self) -> f64 {
        self.other_load.iter().copied().fold(0.0, f64::max)
    }
}

type Key = (usize, Mode, usize, Wait); // (size, mode, peer index, wait)

fn rows(input: &Input<'_>) -> BTreeMap<Key, Row> {
    let mut rows: BTreeMap<Key, Row> = BTreeMap::new();
    for o in input.outcomes {
        let idx = input
            .plan
            .peers
            .iter()
            .position(|p| p.name == o.job.peer.name)
            .unwrap_or(usize::MAX);
        let row = rows
            .entry((o.job.size, o.job.mode, idx, o.job.wait))
            .or_default();
        row.other_load.push(o.other_load_pct);
        match &o.result {
            Err(e) => row.errors.push(e.clone()),
            Ok(r) => {
                row.bad += r.bad;
                match o.job.mode {
                    Mode::Throughput => {
                        if r.window_nanos > 0 && r.delivered > 0 {
                            row.rate
                                .push(r.delivered as f64 / (r.window_nanos as f64 / 1e9));
                            row.sent_rate.extend(r.sent_per_sec);
                            row.lost_pct
                                .push(r.lost as f64 * 100.0 / (r.lost + r.delivered) as f64);
                        } else {
                            row.errors.push("nothing delivered".into());
                        }
                    }
                    Mode::Latency => {
                        if let (Some(a), Some(b)) = (r.p50_nanos, r.p99_nanos) {
                            row.p50.push(a as f64);
                            row.p99.push(b as f64);
                        } else {
                            row.errors.push("no latency samples".into());
                        }
                    }
                }
            }
        }
    }
    rows
}

fn size_name(size: usize) -> String {
    if size >= 1 << 20 && size % (1 << 20) == 0 {
        format!("{} MiB", size >> 20)
    } else if size >= 1 << 10 && size % (1 << 10) == 0 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

fn rate_text(v: f64) -> String {
    scaled(v, ["M", "k", ""])
}

fn nanos_text(v: f64) -> String {
    scaled(v, ["ms", "µs", "ns"])
}

/// `v` in the unit of its size: millions with two decimals, thousands with one, or whole.
fn scaled(v: f64, [mega, kilo, unit]: [&str; 3]) -> String {
    let text = if v >= 1e6 {
        format!("{:.2} {mega}", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} {kilo}", v / 1e3)
    } else {
        format!("{v:.0} {unit}")
    };
    text.trim_end().to_owned()
}

fn spread_text(s: Spread, f: fn(f64) -> String, reps: usize) -> String {
    if reps > 1 {
        format!("{} ({}–{})", f(s.median), f(s.min), f(s.max))
    } else {
        f(s.median)
    }
}

fn load_text(row: &Row) -> String {
    let l = row.max_load();
    if l > NOISY_PCT {
        format!("**{l:.0} %** (noisy)")
    } else {
        format!("{l:.0} %")
    }
}

fn ratio_text(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.2}×")
    }
}

/// One progress line for a finished run.
pub(crate) fn outcome_line(o: &Outcome) -> String {
    let what = format!(
        "{} {} {}{}",
        o.job.peer.name,
        size_name(o.job.size),
        match o.job.mode {
            Mode::Throughput => "throughput",
            Mode::Latency => "latency",
        },
        match o.job.mode {
            Mode::Latency => format!(" ({})", o.job.wait.as_str()),
            Mode::Throughput => String::new(),
        }
    );
    match &o.result {
        Err(e) => format!("{what}: FAILED: {e}"),
        Ok(r) => {
            let fig = match o.job.mode {
                Mode::Throughput if r.window_nanos > 0 => format!(
                    "{}/s",
                    rate_text(r.delivered as f64 / (r.window_nanos as f64 / 1e9))
                ),
                Mode::Throughput => "nothing delivered".into(),
                Mode::Latency => format!(
                    "p50 {} p99 {}",
                    r.p50_nanos.map_or("-".into(), |v| nanos_text(v as f64)),
                    r.p99_nanos.map_or("-".into(), |v| nanos_text(v as f64))
                ),
            };
            let sent = r.sent_per_sec.map_or(String::new(), |s| {
                format!(" (producer sent {}/s)", rate_text(s))
            });
            format!(
                "{what}: {fig}{sent}, lost {}, bad {}, other load {:.0} %",
                r.lost, r.bad, o.other_load_pct
            )
        }
    }
}

/// One progress line for the reference rows.
pub(crate) fn refs_line(r: &RefOutcome) -> String {
    format!(
        "memcpy 1 MiB {} GB/s (cache-resident {}), cache-line round trip {}, CPU to CPU {} GB/s",
        r.memcpy
            .as_ref()
            .map_or("-".into(), |m| format!("{:.1}", m.rotating_gbytes_per_sec)),
        r.memcpy
            .as_ref()
            .map_or("-".into(), |m| format!("{:.1}", m.resident_gbytes_per_sec)),
        r.ping
            .as_ref()
            .map_or("-".into(), |p| nanos_text(p.round_trip_nanos)),
        r.ping
            .as_ref()
            .map_or("-".into(), |p| format!("{:.1}", p.stream_gbytes_per_sec)),
    )
}

/// Which rows [`best_peer`] chooses from.
struct Query {
    size: usize,
    mode: Mode,
    /// Only rows of consumers that wait this way (latency).
    wait: Option<Wait>,
    /// Only peers that pay a system call per message.
    per_message_only: bool,
}

/// The best cross-process peer (not snapbus, not an upper bound) for a query: the highest
/// median rate (throughput) or the lowest median p50 (latency), with that value.
fn best_peer<'a>(
    rows: &'a BTreeMap<Key, Row>,
    peers: &[&'static PeerDef],
    q: &Query,
) -> Option<(&'static PeerDef, f64, &'a Row)> {
    let mut best: Option<(&'static PeerDef, f64, &Row)> = None;
    for ((s, m, idx, w), row) in rows {
        let Some(peer) = peers.get(*idx) else {
            continue;
        };
        if *s != q.size || *m != q.mode || q.wait.is_some_and(|x| x != *w) {
            continue;
        }
        if peer.is_snapbus || peer.upper_bound || (q.per_message_only && !peer.per_message) {
            continue;
        }
        let value = match q.mode {
            Mode::Throughput => row.rate(),
            Mode::Latency => row.p50(),
        };
        let Some(v) = value.map(|s| s.median) else {
            continue;
        };
        let better = match best {
            None => true,
            Some((_, b, _)) => match q.mode {
                Mode::Throughput => v > b,
                Mode::Latency => v < b,
            },
        };
        if better {
            best = Some((peer, v, row));
        }
    }
    best
}

/// Whether peer `idx` is the plan's main snapbus row (the first), which the others are
/// compared with; later snapbus rows are its variants.
fn is_main(peers: &[&'static PeerDef], idx: usize) -> bool {
    peers.iter().position(|p| p.is_snapbus) == Some(idx)
}

/// The best cross-process peer's throughput row at `size`.
fn best_throughput_peer<'a>(
    rows: &'a BTreeMap<Key, Row>,
    peers: &[&'static PeerDef],
    size: usize,
) -> Option<(&'static PeerDef, f64, &'a Row)> {
    best_peer(
        rows,
        peers,
        &Query {
            size,
            mode: Mode::Throughput,
            wait: None,
            per_message_only: false,
        },
    )
}

fn snapbus_row<'a>(
    rows: &'a BTreeMap<Key, Row>,
    peers: &[&'static PeerDef],
    size: usize,
    mode: Mode,
    wait: Wait,
) -> Option<&'a Row> {
    let idx = peers.iter().position(|p| p.is_snapbus)?;
    rows.get(&(size, mode, idx, wait))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_median_min_max() {
        let s = spread(vec![3.0, 1.0, 2.0]).expect("values");
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = spread(vec![4.0, 1.0, 2.0, 3.0]).expect("values");
        assert_eq!(s.median, 2.5);
        assert!(spread(Vec::new()).is_none());
    }
}

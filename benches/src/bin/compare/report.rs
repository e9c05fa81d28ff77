//! The report: Markdown tables of one run, printed and written into `BENCHMARKS.md` between
//! the `compare` markers (the rest of the file, the criterion sections, is left alone).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};

use crate::common::{Mode, Wait};
use crate::peers::PeerDef;
use crate::refs::MemcpyReport;
use crate::run::{Outcome, Plan, RefOutcome, consumer_cpu, producer_cpu};

const BEGIN: &str = "<!-- compare:begin -->";
const END: &str = "<!-- compare:end -->";
/// The markers of the `--every-byte` run's section.
const BEGIN_EVERY_BYTE: &str = "<!-- compare-every-byte:begin -->";
const END_EVERY_BYTE: &str = "<!-- compare-every-byte:end -->";
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

/// The workspace's BENCHMARKS.md.
pub(crate) fn default_out() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("BENCHMARKS.md")
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
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn nanos_text(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} µs", v / 1e3)
    } else {
        format!("{v:.0} ns")
    }
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
        "memcpy 1 MiB {} GB/s (cache-resident {}), cache-line round trip {}",
        r.memcpy
            .as_ref()
            .map_or("-".into(), |m| format!("{:.1}", m.rotating_gbytes_per_sec)),
        r.memcpy
            .as_ref()
            .map_or("-".into(), |m| format!("{:.1}", m.resident_gbytes_per_sec)),
        r.ping
            .as_ref()
            .map_or("-".into(), |p| nanos_text(p.round_trip_nanos)),
    )
}

fn read_first_line(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    })
}

fn command_version(cmd: &str, arg: &str) -> String {
    std::process::Command::new(cmd)
        .arg(arg)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text).trim().to_owned()
        })
        .unwrap_or_else(|| "not found".into())
}

/// Versions of the peer crates, from the workspace's Cargo.lock.
fn locked_versions() -> String {
    let lock =
        std::fs::read_to_string(default_out().with_file_name("Cargo.lock")).unwrap_or_default();
    let mut out = Vec::new();
    for name in ["iceoryx2", "ipc-channel", "crossbeam-channel"] {
        let needle = format!("name = \"{name}\"\nversion = \"");
        if let Some(i) = lock.find(&needle) {
            let rest = &lock[i + needle.len()..];
            if let Some(v) = rest.split('"').next() {
                out.push(format!("{name} {v}"));
            }
        }
    }
    out.join(", ")
}

fn machine(out: &mut String) {
    let cpu = read_first_line("/proc/cpuinfo", "model name").unwrap_or_else(|| "?".into());
    let virt = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| s.contains(" hypervisor"));
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem = read_first_line("/proc/meminfo", "MemTotal").unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(
        out,
        "| CPU | {cpu}, {ncpu} CPUs{} |",
        if virt { ", virtual machine" } else { "" }
    );
    let _ = writeln!(out, "| Memory | {mem} |");
    let _ = writeln!(out, "| Kernel | Linux {kernel} |");
    let _ = writeln!(out, "| Rust | {} |", command_version("rustc", "-V"));
    let _ = writeln!(
        out,
        "| Python | {} |",
        command_version("python3", "--version")
    );
    let _ = writeln!(out, "| Peer crates | {} |", locked_versions());
    let _ = writeln!(
        out,
        "| Pinning | producer on CPU {}, consumer on CPU {} (threads of the one-process peer \
         likewise) |",
        producer_cpu(),
        consumer_cpu()
    );
}

fn date(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.replace('T', " ").replace('Z', " UTC")
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

/// The section markers of a run (`--every-byte` has its own section).
fn markers(every_byte: bool) -> (&'static str, &'static str) {
    if every_byte {
        (BEGIN_EVERY_BYTE, END_EVERY_BYTE)
    } else {
        (BEGIN, END)
    }
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

/// The report's Markdown (between the markers).
pub(crate) fn render(input: &Input<'_>) -> String {
    let plan = input.plan;
    let rows = rows(input);
    let reps = plan.reps;
    let mut out = String::new();
    let (begin, end) = markers(plan.every_byte);
    let _ = writeln!(out, "{begin}");
    if plan.every_byte {
        let _ = writeln!(
            out,
            "## Against peers, every consumer reading every byte (`compare --every-byte`)\n\n\
             As the section above, but every consumer reads every byte of every message (the \
             sum of its words, checked against what the producer sent), where there each \
             checks only a message's first two words and its last: peers that hand the \
             consumer the message where it lies (iceoryx2, snapbus reading in place) no longer \
             skip the bytes a consumer that copies has to read.\n"
        );
    } else {
        let _ = writeln!(out, "## Against peers, side by side (`compare`)\n");
    }
    let _ = writeln!(
        out,
        "Written by the harness [`benches/src/bin/compare`](benches/src/bin/compare/main.rs) \
         (edit the harness, not this section). Every figure below comes from **one run** of:\n"
    );
    let _ = writeln!(out, "```sh\n{}\n```\n", input.command);
    let secs = input
        .finished
        .duration_since(input.started)
        .map_or(0, |d| d.as_secs());
    let _ = writeln!(
        out,
        "Started {}, took {} min {} s.{}\n",
        date(input.started),
        secs / 60,
        secs % 60,
        if plan.quick {
            " **Quick mode: one short repetition; not for comparing.**"
        } else {
            ""
        }
    );
    machine(&mut out);
    let (c64, i64_) = plan.latency_shape(64);
    let (c1m, i1m) = plan.latency_shape(1 << 20);
    let _ = writeln!(
        out,
        "\n**Method.** Producer and consumer are separate processes (but for the one-process \
         upper bound). {reps} repetition(s); each repetition runs every peer for every size, \
         the peers' order rotated each time; cells give the median and (min–max) over the \
         repetitions. *Throughput*: the producer sends for {} s as fast as it can; the figure \
         is messages **delivered** per second at the consumer, from its first message to the \
         end message; messages a transport dropped are counted as lost (only snapbus and \
         iceoryx2 drop: their producers never wait); *sent/s by the producer* is what it sent \
         per second of its sending time (the median): where that is well above the delivered \
         rate, the consumer is the slower side (a transport that blocks its producer shows \
         the two equal). *Latency*: {c64} messages, one every \
         {} µs ({c1m}, one every {} ms, for 1 MiB), each stamped with CLOCK_MONOTONIC when sent; \
         the consumer's clock at receipt minus the stamp, first 5 % discarded; a spinning \
         consumer busy-polls, a sleeping one blocks in the kernel. A message holds data in \
         every byte (a fixed pattern with no zero byte, under a stamp: its sequence number and \
         send time in the first 16 bytes, the sequence number again in the last 8), as a real \
         frame does: an untouched zero-filled buffer is the kernel's zero page, read from the \
         L1 cache, and lines of zeros reach memory faster than data. Every message is checked \
         at both ends against its sequence number. *Other load*: CPU time of all other \
         processes during the run (from `/proc/stat`, minus the run's own processes and the \
         harness), in % of both CPUs, the worst repetition; above {NOISY_PCT:.0} % it is \
         flagged.\n",
        plan.secs,
        i64_ / 1000,
        i1m / 1_000_000,
    );
    let _ = writeln!(out, "**How each peer is configured**\n");
    for p in &plan.peers {
        let _ = writeln!(out, "- **{}**: {}", p.label, p.how);
    }
    for (p, why) in input.skipped {
        let _ = writeln!(out, "- **{}**: not measured in this run: {why}.", p.label);
    }

    // Throughput.
    let _ = writeln!(out, "\n### Throughput\n");
    let _ = writeln!(
        out,
        "| size | peer | messages/s | GB/s | lost | sent/s by the producer | other load | snapbus ÷ peer |\n\
         |---|---|---:|---:|---:|---:|---:|---:|"
    );
    for &size in &plan.sizes {
        let snap = snapbus_row(&rows, &plan.peers, size, Mode::Throughput, Wait::Sleep)
            .and_then(Row::rate);
        let best = best_throughput_peer(&rows, &plan.peers, size);
        for (idx, p) in plan.peers.iter().enumerate() {
            let Some(row) = rows.get(&(size, Mode::Throughput, idx, Wait::Sleep)) else {
                continue;
            };
            let label = if p.is_snapbus {
                format!("**{}**", p.label)
            } else {
                p.label.to_owned()
            };
            match row.rate() {
                Some(r) => {
                    let lost = spread(row.lost_pct.clone()).map_or(0.0, |s| s.median);
                    let ratio = match (snap, best) {
                        (Some(s), _) if !p.is_snapbus => ratio_text(s.median / r.median),
                        // A snapbus variant: itself against the best peer.
                        (_, Some((_, b, _))) if p.is_snapbus && !is_main(&plan.peers, idx) => {
                            format!("{} ÷ best peer", ratio_text(r.median / b))
                        }
                        _ => "–".into(),
                    };
                    let _ = writeln!(
                        out,
                        "| {} | {label} | {} | {:.2} | {}{} | {} | {} | {ratio} |",
                        size_name(size),
                        spread_text(r, rate_text, reps),
                        r.median * size as f64 / 1e9,
                        if lost > 0.0 {
                            format!("{lost:.1} %")
                        } else {
                            "0".into()
                        },
                        if row.bad > 0 {
                            format!(", **{} bad**", row.bad)
                        } else {
                            String::new()
                        },
                        spread(row.sent_rate.clone()).map_or("–".into(), |s| rate_text(s.median)),
                        load_text(row),
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "| {} | {label} | failed: {} | | | | | |",
                        size_name(size),
                        row.errors.first().map_or("?", String::as_str)
                    );
                }
            }
        }
    }
    let _ = writeln!(out);
    for &size in &plan.sizes {
        let snap = snapbus_row(&rows, &plan.peers, size, Mode::Throughput, Wait::Sleep)
            .and_then(Row::rate);
        let best = best_throughput_peer(&rows, &plan.peers, size);
        if let (Some(s), Some((p, v, _))) = (snap, best) {
            let _ = writeln!(
                out,
                "- {}: snapbus / best cross-process peer ({}) = **{}**",
                size_name(size),
                p.label,
                ratio_text(s.median / v)
            );
        }
        let Some((best, v, _)) = best else {
            continue;
        };
        for (idx, p) in plan.peers.iter().enumerate() {
            if !p.is_snapbus || is_main(&plan.peers, idx) {
                continue;
            }
            let rate = rows
                .get(&(size, Mode::Throughput, idx, Wait::Sleep))
                .and_then(Row::rate);
            if let Some(r) = rate {
                let _ = writeln!(
                    out,
                    "- {}: {} / best cross-process peer ({}) = **{}**",
                    size_name(size),
                    p.label,
                    best.label,
                    ratio_text(r.median / v)
                );
            }
        }
    }

    // Latency.
    let _ = writeln!(out, "\n### One-way latency\n");
    let _ = writeln!(
        out,
        "| size | peer | consumer | p50 | p99 | other load | snapbus ÷ peer (p50) |\n\
         |---|---|---|---:|---:|---:|---:|"
    );
    for &size in &plan.sizes {
        for (idx, p) in plan.peers.iter().enumerate() {
            for wait in [Wait::Spin, Wait::Sleep] {
                let Some(row) = rows.get(&(size, Mode::Latency, idx, wait)) else {
                    continue;
                };
                let label = if p.is_snapbus {
                    format!("**{}**", p.label)
                } else {
                    p.label.to_owned()
                };
                match (row.p50(), row.p99()) {
                    (Some(a), Some(b)) => {
                        let snap = snapbus_row(&rows, &plan.peers, size, Mode::Latency, wait)
                            .and_then(Row::p50);
                        let best = best_peer(
                            &rows,
                            &plan.peers,
                            &Query {
                                size,
                                mode: Mode::Latency,
                                wait: Some(wait),
                                per_message_only: false,
                            },
                        );
                        let ratio = match (snap, best) {
                            (Some(s), _) if !p.is_snapbus => ratio_text(s.median / a.median),
                            (_, Some((_, b, _))) if p.is_snapbus && !is_main(&plan.peers, idx) => {
                                format!("{} ÷ best peer", ratio_text(a.median / b))
                            }
                            _ => "–".into(),
                        };
                        let _ = writeln!(
                            out,
                            "| {} | {label} | {} | {} | {} | {} | {ratio} |",
                            size_name(size),
                            wait.as_str(),
                            spread_text(a, nanos_text, reps),
                            spread_text(b, nanos_text, reps),
                            load_text(row),
                        );
                    }
                    _ => {
                        let _ = writeln!(
                            out,
                            "| {} | {label} | {} | failed: {} | | | |",
                            size_name(size),
                            wait.as_str(),
                            row.errors.first().map_or("?", String::as_str)
                        );
                    }
                }
            }
        }
    }

    // References.
    let _ = writeln!(out, "\n### The machine's limits, same run\n");
    let memcpy = |rate: fn(&MemcpyReport) -> f64| {
        spread(
            input
                .refs
                .iter()
                .filter_map(|r| r.memcpy.as_ref().map(rate))
                .collect(),
        )
    };
    let memcpy_rot = memcpy(|m| m.rotating_gbytes_per_sec);
    let memcpy_res = memcpy(|m| m.resident_gbytes_per_sec);
    let memcpy_16m = memcpy(|m| m.rotating_16m_gbytes_per_sec);
    let memcpy_8m = memcpy(|m| m.rotating_8m_gbytes_per_sec);
    let rtt = spread(
        input
            .refs
            .iter()
            .filter_map(|r| r.ping.as_ref().map(|p| p.round_trip_nanos))
            .collect(),
    );
    let ref_load = input
        .refs
        .iter()
        .map(|r| r.other_load_pct)
        .fold(0.0, f64::max);
    let gb = |v: f64| format!("{v:.1} GB/s");
    let _ = writeln!(out, "| reference | value | other load |\n|---|---:|---:|");
    if let Some(s) = memcpy_rot {
        let _ = writeln!(
            out,
            "| memcpy of 1 MiB blocks into a rotating 64 MiB buffer (memory), one process | {} | {ref_load:.0} % |",
            spread_text(s, gb, reps)
        );
    }
    for (s, mib) in [(memcpy_16m, 16), (memcpy_8m, 8)] {
        if let Some(s) = s {
            let _ = writeln!(
                out,
                "| memcpy of 1 MiB blocks into a rotating {mib} MiB buffer (what a ring of that size costs a copy) | {} | {ref_load:.0} % |",
                spread_text(s, gb, reps)
            );
        }
    }
    if let Some(s) = memcpy_res {
        let _ = writeln!(
            out,
            "| memcpy of 1 MiB into the same 1 MiB (cache) | {} | {ref_load:.0} % |",
            spread_text(s, gb, reps)
        );
    }
    if let Some(s) = rtt {
        let _ = writeln!(
            out,
            "| cache-line round trip between two processes on CPUs {} and {} (one way ≈ half) | {} | {ref_load:.0} % |",
            producer_cpu(),
            consumer_cpu(),
            spread_text(s, nanos_text, reps)
        );
    }

    // The Python rows and the goals belong to the main run (not the --every-byte one).
    if !plan.every_byte {
        crate::python_rows::render(&mut out, input.python);
        goals(&mut out, plan, &rows, memcpy_rot, rtt, input.python);
    }
    let _ = writeln!(out, "{end}");
    out
}

fn goals(
    out: &mut String,
    plan: &Plan,
    rows: &BTreeMap<Key, Row>,
    memcpy: Option<Spread>,
    rtt: Option<Spread>,
    python: &crate::python_rows::PyOutcome,
) {
    let _ = writeln!(
        out,
        "\n### Against the goals of issue #8 (medians of this run)\n"
    );
    let _ = writeln!(out, "| goal | measured | met |\n|---|---|---|");
    let yes = |b: bool| if b { "yes" } else { "**no**" };
    let tput = |size| {
        snapbus_row(rows, &plan.peers, size, Mode::Throughput, Wait::Sleep)
            .and_then(Row::rate)
            .map(|s| s.median)
    };
    let tput_query = |size, per_message_only| Query {
        size,
        mode: Mode::Throughput,
        wait: None,
        per_message_only,
    };
    if let (Some(s), Some((p, v, _))) = (
        tput(64),
        best_peer(rows, &plan.peers, &tput_query(64, false)),
    ) {
        let _ = writeln!(
            out,
            "| 64 B throughput above every cross-process peer | snapbus {}/s, best peer {} {}/s ({}) | {} |",
            rate_text(s),
            p.label,
            rate_text(v),
            ratio_text(s / v),
            yes(s > v)
        );
    }
    if let (Some(s), Some((p, v, _))) = (
        tput(64),
        best_peer(rows, &plan.peers, &tput_query(64, true)),
    ) {
        let _ = writeln!(
            out,
            "| 64 B throughput ≥ 30× the best per-message peer (a system call per message) | {} ({}) | {} |",
            ratio_text(s / v),
            p.label,
            yes(s >= 30.0 * v)
        );
    }
    if let (Some(s), Some((p, v, _))) = (
        tput(1 << 20),
        best_peer(rows, &plan.peers, &tput_query(1 << 20, false)),
    ) {
        let mem = memcpy.map_or(String::new(), |m| {
            format!(
                "; {:.0} % of the rotating memcpy reference",
                s * (1 << 20) as f64 / 1e9 / m.median * 100.0
            )
        });
        let _ = writeln!(
            out,
            "| 1 MiB throughput ≥ the best peer | snapbus {:.2} GB/s, {} {:.2} GB/s ({}){mem} | {} |",
            s * (1 << 20) as f64 / 1e9,
            p.label,
            v * (1 << 20) as f64 / 1e9,
            ratio_text(s / v),
            yes(s >= v)
        );
    }
    for (wait, factor, text) in [
        (
            Wait::Spin,
            0.5,
            "64 B p50 latency ≤ half the best spinning peer",
        ),
        (
            Wait::Sleep,
            1.0,
            "64 B p50 latency ≤ the best sleeping peer",
        ),
    ] {
        let snap = snapbus_row(rows, &plan.peers, 64, Mode::Latency, wait)
            .and_then(Row::p50)
            .map(|s| s.median);
        let best = best_peer(
            rows,
            &plan.peers,
            &Query {
                size: 64,
                mode: Mode::Latency,
                wait: Some(wait),
                per_message_only: false,
            },
        );
        match (snap, best) {
            (Some(s), Some((p, v, _))) => {
                let line = match (wait, rtt) {
                    (Wait::Spin, Some(r)) => format!(
                        "; the one-way cache-line limit is ~{}",
                        nanos_text(r.median / 2.0)
                    ),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "| {text} | snapbus {}, {} {} ({}){line} | {} |",
                    nanos_text(s),
                    p.label,
                    nanos_text(v),
                    ratio_text(s / v),
                    yes(s <= factor * v)
                );
            }
            (Some(s), None) => {
                let _ = writeln!(
                    out,
                    "| {text} | snapbus {}; no cross-process peer measured this way | – |",
                    nanos_text(s)
                );
            }
            _ => {}
        }
    }
    let py = |prefix| python.value(prefix);
    match (
        py("snapbus Python → Python ÷ multiprocessing.Queue"),
        py("snapbus, Python producer"),
        py("multiprocessing.Queue"),
    ) {
        (Some(ratio), Some(s), Some(q)) => {
            let _ = writeln!(
                out,
                "| the Python path ≥ 10× `multiprocessing.Queue` (issue #17) | snapbus Python → \
                 Python {}/s, `multiprocessing.Queue` {}/s ({ratio:.1}×) | {} |",
                rate_text(s),
                rate_text(q),
                yes(ratio >= 10.0)
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "| the Python path ≥ 10× `multiprocessing.Queue` (issue #17) | not measured in \
                 this run (see the Python section) | – |"
            );
        }
    }
}

/// Replaces the `compare` section (the `--every-byte` one if `every_byte`) of the Markdown
/// file at `path` with `text` (appending it if the file has none; creating the file if
/// missing).
pub(crate) fn write_section(path: &Path, text: &str, every_byte: bool) -> Result<()> {
    let (begin, end) = markers(every_byte);
    let old = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let new = match (old.find(begin), old.find(end)) {
        (Some(b), Some(e)) if e > b => {
            format!("{}{}{}", &old[..b], text.trim_end(), &old[e + end.len()..])
        }
        _ if old.is_empty() => format!("{}\n", text.trim_end()),
        _ => format!("{}\n\n{}\n", old.trim_end(), text.trim_end()),
    };
    std::fs::write(path, new).with_context(|| format!("write {}", path.display()))
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

    #[test]
    fn the_section_replaces_only_what_is_between_the_markers() {
        let dir = std::env::temp_dir().join(format!("compare-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("B.md");
        std::fs::write(
            &path,
            format!("# top\n\n{BEGIN}\nold\n{END}\n\n## rest\nkept\n"),
        )
        .expect("write");
        write_section(&path, &format!("{BEGIN}\nnew\n{END}\n"), false).expect("section");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            format!("# top\n\n{BEGIN}\nnew\n{END}\n\n## rest\nkept\n")
        );
        // The --every-byte section: appended the first time, then replaced; the other kept.
        let eb = |t: &str| format!("{BEGIN_EVERY_BYTE}\n{t}\n{END_EVERY_BYTE}");
        write_section(&path, &eb("one"), true).expect("section");
        write_section(&path, &eb("two"), true).expect("section");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            format!(
                "# top\n\n{BEGIN}\nnew\n{END}\n\n## rest\nkept\n\n{}\n",
                eb("two")
            )
        );
        // No markers: appended after what is there.
        std::fs::write(&path, "# only\n").expect("write");
        write_section(&path, &format!("{BEGIN}\nx\n{END}"), false).expect("section");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, format!("# only\n\n{BEGIN}\nx\n{END}\n"));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

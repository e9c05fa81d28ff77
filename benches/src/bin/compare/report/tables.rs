//! The report's tables: throughput, one-way latency, the machine's limits and the goals.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{
    Input, Key, Query, Row, Spread, best_peer, best_throughput_peer, is_main, load_text,
    nanos_text, rate_text, ratio_text, size_name, snapbus_row, spread, spread_text,
};
use crate::common::{Mode, Wait};
use crate::peers::PeerDef;
use crate::refs::MemcpyReport;
use crate::run::{Plan, consumer_cpu, producer_cpu};

/// A peer's row label: snapbus's in bold.
fn label(p: &PeerDef) -> String {
    if p.is_snapbus {
        format!("**{}**", p.label)
    } else {
        p.label.to_owned()
    }
}

/// The last column of a row of peer `idx` whose median is `value`: snapbus ÷ this peer for a
/// peer, this variant ÷ the best cross-process peer for a snapbus variant, `–` for snapbus.
fn ratio_cell(
    plan: &Plan,
    idx: usize,
    snapbus: Option<Spread>,
    best: Option<f64>,
    value: f64,
) -> String {
    let p = plan.peers[idx];
    match (snapbus, best) {
        (Some(s), _) if !p.is_snapbus => ratio_text(s.median / value),
        (_, Some(b)) if p.is_snapbus && !is_main(&plan.peers, idx) => {
            format!("{} ÷ best peer", ratio_text(value / b))
        }
        _ => "–".into(),
    }
}

/// The throughput table: every peer at every size, with snapbus ÷ peer.
pub(super) fn throughput(out: &mut String, input: &Input<'_>, rows: &BTreeMap<Key, Row>) {
    let plan = input.plan;
    let reps = plan.reps;
    let _ = writeln!(out, "\n### Throughput\n");
    let _ = writeln!(
        out,
        "| size | peer | messages/s | GB/s | lost | sent/s by the producer | other load | snapbus ÷ peer |\n\
         |---|---|---:|---:|---:|---:|---:|---:|"
    );
    for &size in &plan.sizes {
        let snap =
            snapbus_row(rows, &plan.peers, size, Mode::Throughput, Wait::Sleep).and_then(Row::rate);
        let best = best_throughput_peer(rows, &plan.peers, size);
        for (idx, p) in plan.peers.iter().enumerate() {
            let Some(row) = rows.get(&(size, Mode::Throughput, idx, Wait::Sleep)) else {
                continue;
            };
            let label = label(p);
            match row.rate() {
                Some(r) => {
                    let lost = spread(row.lost_pct.clone()).map_or(0.0, |s| s.median);
                    let ratio = ratio_cell(plan, idx, snap, best.map(|b| b.1), r.median);
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
}

/// One line per size and snapbus variant: its throughput ÷ the best cross-process peer's.
pub(super) fn ratios(out: &mut String, plan: &Plan, rows: &BTreeMap<Key, Row>) {
    let _ = writeln!(out);
    for &size in &plan.sizes {
        let snap =
            snapbus_row(rows, &plan.peers, size, Mode::Throughput, Wait::Sleep).and_then(Row::rate);
        let best = best_throughput_peer(rows, &plan.peers, size);
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
}

/// The one-way latency table.
pub(super) fn latency(out: &mut String, input: &Input<'_>, rows: &BTreeMap<Key, Row>) {
    let plan = input.plan;
    let reps = plan.reps;
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
                let label = label(p);
                match (row.p50(), row.p99()) {
                    (Some(a), Some(b)) => {
                        let snap = snapbus_row(rows, &plan.peers, size, Mode::Latency, wait)
                            .and_then(Row::p50);
                        let best = best_peer(
                            rows,
                            &plan.peers,
                            &Query {
                                size,
                                mode: Mode::Latency,
                                wait: Some(wait),
                                per_message_only: false,
                            },
                        );
                        let ratio = ratio_cell(plan, idx, snap, best.map(|b| b.1), a.median);
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
}

/// The machine's own limits measured in the run: memcpy bandwidth, the cache-line round trip,
/// the stream between the CPUs.
/// Returns the rotating memcpy and the round trip, which the goals compare with.
pub(super) fn references(out: &mut String, input: &Input<'_>) -> (Option<Spread>, Option<Spread>) {
    let reps = input.plan.reps;
    let _ = writeln!(out, "\n### The machine's limits, same run\n");
    let memcpy = |rate: fn(&MemcpyReport) -> f64| memcpy_spread(input, rate);
    let (memcpy_rot, rtt) = reference_medians(input);
    let memcpy_res = memcpy(|m| m.resident_gbytes_per_sec);
    let memcpy_16m = memcpy(|m| m.rotating_16m_gbytes_per_sec);
    let memcpy_8m = memcpy(|m| m.rotating_8m_gbytes_per_sec);
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
    if let Some((rotating, same)) = paced_copies(input) {
        let _ = writeln!(
            out,
            "| one copy of 1 MiB every {} ms (the 1 MiB latency runs' pace) into a rotating 8 MiB buffer (a ring's next frame), median | {} | {ref_load:.0} % |\n\
             | the same into the same 1 MiB every time (a sample used again) | {} | {ref_load:.0} % |",
            crate::refs::PACE_NANOS / 1_000_000,
            spread_text(rotating, nanos_text, reps),
            spread_text(same, nanos_text, reps)
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
    if let Some(s) = stream_spread(input) {
        let _ = writeln!(
            out,
            "| bytes a process on CPU {} writes and one on CPU {} reads behind it (8 MiB ring, 64 KiB at a time, every word) | {} | {ref_load:.0} % |",
            producer_cpu(),
            consumer_cpu(),
            spread_text(s, gb, reps)
        );
    }

    (memcpy_rot, rtt)
}

/// The cross-CPU stream reference over the run's repetitions (runs that measured it).
pub(super) fn stream_spread(input: &Input<'_>) -> Option<Spread> {
    spread(
        input
            .refs
            .iter()
            .filter_map(|r| r.ping.as_ref().map(|p| p.stream_gbytes_per_sec))
            .filter(|v| *v > 0.0)
            .collect(),
    )
}

/// The paced copies of 1 MiB over the run's repetitions (runs that measured them): into a
/// rotating 8 MiB buffer, and into the same 1 MiB.
pub(super) fn paced_copies(input: &Input<'_>) -> Option<(Spread, Spread)> {
    let paced = |v: fn(&MemcpyReport) -> f64| {
        spread(
            input
                .refs
                .iter()
                .filter_map(|r| r.memcpy.as_ref().map(v))
                .filter(|v| *v > 0.0)
                .collect(),
        )
    };
    paced(|m| m.paced_8m_nanos).zip(paced(|m| m.paced_resident_nanos))
}

/// A memcpy reference over the run's repetitions.
fn memcpy_spread(input: &Input<'_>, rate: fn(&MemcpyReport) -> f64) -> Option<Spread> {
    spread(
        input
            .refs
            .iter()
            .filter_map(|r| r.memcpy.as_ref().map(rate))
            .collect(),
    )
}

/// The rotating memcpy and the cache-line round trip of the run (the machine's fingerprint
/// figures, and what the goals compare with).
pub(super) fn reference_medians(input: &Input<'_>) -> (Option<Spread>, Option<Spread>) {
    let rtt = spread(
        input
            .refs
            .iter()
            .filter_map(|r| r.ping.as_ref().map(|p| p.round_trip_nanos))
            .collect(),
    );
    (memcpy_spread(input, |m| m.rotating_gbytes_per_sec), rtt)
}

/// The project's goals, each met or not in this run.
pub(super) fn goals(
    out: &mut String,
    input: &Input<'_>,
    rows: &BTreeMap<Key, Row>,
    memcpy: Option<Spread>,
    rtt: Option<Spread>,
) {
    let (plan, python) = (input.plan, input.python);
    let _ = writeln!(out, "\n### Against the goals (medians of this run)\n");
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
                "| the Python path ≥ 12× `multiprocessing.Queue` | snapbus Python → \
                 Python {}/s, `multiprocessing.Queue` {}/s ({ratio:.1}×) | {} |",
                rate_text(s),
                rate_text(q),
                yes(ratio >= 12.0)
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "| the Python path ≥ 12× `multiprocessing.Queue` | not measured in \
                 this run (see the Python section) | – |"
            );
        }
    }
    super::machines::goal_rows(
        out,
        &super::machines::key_figures(rows, &plan.peers, python, paced_copies(input)),
    );
}

//! The machine a run measured, and the one before it. A figure tuned on one machine may not
//! hold on the next, so a run's page carries the machine's fingerprint (CPU model, caches, the
//! memcpy and cache-line references of the same run), and BENCHMARKS.md keeps the key ratios
//! of the last two machines side by side, between the `compare:machines` markers.
//!
//! Each machine's figures are kept in the section itself, as JSON in an HTML comment, so a new
//! run needs nothing but the page: when its fingerprint differs from the last run's (another
//! CPU or caches, or memcpy or the cache-line round trip off by more than a VM's spread), the
//! last run's machine becomes the previous one; otherwise the previous one stays.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Key, Row, Spread, nanos_text};
use crate::common::{Mode, Wait};
use crate::peers::PeerDef;
use crate::python_rows::PyOutcome;

pub(super) const BEGIN: &str = "<!-- compare:machines:begin -->";
pub(super) const END: &str = "<!-- compare:machines:end -->";
const THIS: &str = "<!-- compare:machine:this ";
const PREVIOUS: &str = "<!-- compare:machine:previous ";

/// memcpy figures this far apart (as a ratio) are another machine; a VM's runs vary ±15 %.
const MEMCPY_SAME: f64 = 1.3;
/// Cache-line round trips this far apart are another machine (they vary more than memcpy).
const RTT_SAME: f64 = 1.6;

/// What a run measured on: the CPU and its caches, and the references of the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Fingerprint {
    pub(super) cpu: String,
    pub(super) cpus: usize,
    /// `L1d 48 KiB, L2 1 MiB, L3 32 MiB` (per CPU 0, from sysfs).
    pub(super) caches: String,
    /// memcpy of 1 MiB blocks into a rotating 64 MiB buffer, GB/s (median).
    pub(super) memcpy_gbs: Option<f64>,
    /// Cache-line round trip between the two pinned CPUs, ns (median).
    pub(super) rtt_ns: Option<f64>,
}

impl Fingerprint {
    /// The line under a run's tables.
    pub(super) fn text(&self) -> String {
        format!(
            "{}, {} CPUs; {}; memcpy {}; cache-line round trip {}",
            self.cpu,
            self.cpus,
            self.caches,
            self.memcpy_gbs
                .map_or("not measured".into(), |g| format!("{g:.1} GB/s")),
            self.rtt_ns.map_or("not measured".into(), nanos_text)
        )
    }

    /// Whether `other` is the same machine as far as the figures can tell.
    pub(super) fn same_machine(&self, other: &Fingerprint) -> bool {
        let near = |a: Option<f64>, b: Option<f64>, by: f64| match (a, b) {
            (Some(a), Some(b)) if a > 0.0 && b > 0.0 => a.max(b) / a.min(b) < by,
            _ => true,
        };
        self.cpu == other.cpu
            && self.cpus == other.cpus
            && self.caches == other.caches
            && near(self.memcpy_gbs, other.memcpy_gbs, MEMCPY_SAME)
            && near(self.rtt_ns, other.rtt_ns, RTT_SAME)
    }
}

/// This machine's caches as sysfs gives them for CPU 0, smallest level first.
pub(super) fn caches() -> String {
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache") else {
        return "caches unknown".into();
    };
    let mut found: Vec<(u32, String, String)> = dir
        .filter_map(|e| {
            let p = e.ok()?.path();
            let read = |f: &str| {
                std::fs::read_to_string(p.join(f))
                    .ok()
                    .map(|s| s.trim().to_owned())
            };
            let (level, kind, size) = (read("level")?, read("type")?, read("size")?);
            (kind != "Instruction").then(|| {
                let name = if kind == "Data" { "d" } else { "" };
                (
                    level.parse().unwrap_or(0),
                    name.to_owned(),
                    size_text(&size),
                )
            })
        })
        .collect();
    found.sort();
    if found.is_empty() {
        return "caches unknown".into();
    }
    found
        .iter()
        .map(|(level, d, size)| format!("L{level}{d} {size}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// sysfs's `32768K` as `32 MiB`, `48K` as `48 KiB`.
fn size_text(s: &str) -> String {
    match s.strip_suffix('K').and_then(|k| k.parse::<u64>().ok()) {
        Some(k) if k >= 1024 && k % 1024 == 0 => format!("{} MiB", k / 1024),
        Some(k) => format!("{k} KiB"),
        None => s.to_owned(),
    }
}

/// A row of the fingerprint in the machines table: its label and how to show it.
type FingerprintRow = (&'static str, fn(&Fingerprint) -> String);

/// One machine's run: when, what it ran on, its key figures (label, text).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct MachineRun {
    pub(super) date: String,
    pub(super) fingerprint: Fingerprint,
    pub(super) figures: Vec<(String, String)>,
}

/// How a key figure compares with its goal.
#[derive(Clone, Copy)]
pub(super) enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

/// A key figure of a run: a ratio to a peer (or a time), with the goal it has, if any.
pub(super) struct KeyFigure {
    pub(super) label: &'static str,
    pub(super) goal: Option<Goal>,
    pub(super) value: Option<f64>,
    /// The figure and what it is made of, for the goals table.
    pub(super) detail: String,
}

impl KeyFigure {
    pub(super) fn text(&self) -> String {
        match (self.value, self.goal) {
            (None, _) => "not measured".into(),
            (Some(v), _) if self.label.ends_with("ns") => format!("{v:.0} ns"),
            // Two decimals below 10, one above: a bar of 12× is not met by 11.8× shown as 12×.
            (Some(v), _) if v >= 10.0 => format!("{v:.1}×"),
            (Some(v), _) => format!("{v:.2}×"),
        }
    }

    pub(super) fn met(&self) -> Option<bool> {
        Some(match (self.value?, self.goal?) {
            (v, Goal::AtLeast(g)) => v >= g,
            (v, Goal::AtMost(g)) => v <= g,
        })
    }

    pub(super) fn goal_text(&self) -> String {
        let unit = if self.label.ends_with("ns") {
            " ns"
        } else {
            "×"
        };
        match self.goal {
            Some(Goal::AtLeast(g)) => format!("≥ {g}{unit}"),
            Some(Goal::AtMost(g)) => format!("≤ {g}{unit}"),
            None => "–".into(),
        }
    }
}

/// The row of peer `name` at `size` (any way of waiting unless `wait` says).
fn named<'a>(
    rows: &'a BTreeMap<Key, Row>,
    peers: &[&'static PeerDef],
    name: &str,
    size: usize,
    mode: Mode,
    wait: Option<Wait>,
) -> Option<&'a Row> {
    let idx = peers.iter().position(|p| p.name == name)?;
    rows.iter()
        .find(|((s, m, i, w), _)| {
            *s == size && *m == mode && *i == idx && wait.is_none_or(|x| x == *w)
        })
        .map(|(_, r)| r)
}

/// The key figures: the speed bars that depend on the machine, as ratios to the same run's
/// peers, and the Python rows.
pub(super) fn key_figures(
    rows: &BTreeMap<Key, Row>,
    peers: &[&'static PeerDef],
    python: &PyOutcome,
    paced: Option<(Spread, Spread)>,
) -> Vec<KeyFigure> {
    let rate = |name, size| {
        named(rows, peers, name, size, Mode::Throughput, None)
            .and_then(Row::rate)
            .map(|s| s.median)
    };
    let p50 = |name, size| {
        named(rows, peers, name, size, Mode::Latency, Some(Wait::Spin))
            .and_then(Row::p50)
            .map(|s| s.median)
    };
    let ratio = |label, goal, a: Option<f64>, b: Option<f64>, text: fn(f64) -> String| {
        let value = a.zip(b).map(|(a, b)| a / b);
        let detail = match a.zip(b) {
            Some((a, b)) => format!("{} vs {}", text(a), text(b)),
            None => "a row was not measured".into(),
        };
        KeyFigure {
            label,
            goal,
            value,
            detail,
        }
    };
    let per_sec = |v: f64| format!("{}/s", super::rate_text(v));
    let ice = "iceoryx2";
    let snapshot_ns = python
        .value("snapshot(), 5-field dataclass, enabled")
        .map(|calls| 1e9 / calls);
    vec![
        ratio(
            "4 KiB messages/s, copying consumer ÷ iceoryx2",
            Some(Goal::AtLeast(1.2)),
            rate("snapbus", 4 << 10),
            rate(ice, 4 << 10),
            per_sec,
        ),
        ratio(
            "1 MiB messages/s, 8 MiB ring, in place ÷ iceoryx2",
            Some(Goal::AtLeast(1.0)),
            rate("snapbus-small-ring", 1 << 20),
            rate(ice, 1 << 20),
            per_sec,
        ),
        {
            let mut f = ratio(
                "1 MiB one-way p50, spinning, 8 MiB ring ÷ iceoryx2",
                Some(Goal::AtMost(1.5)),
                p50("snapbus-small-ring", 1 << 20),
                p50(ice, 1 << 20),
                nanos_text,
            );
            // What a copy of 1 MiB costs at that pace, in the same run: into a ring's next
            // frame, and into memory used again (the limits of the two designs).
            if let Some((rotating, same)) = paced {
                f.detail += &format!(
                    "; one copy of 1 MiB at that pace: {} into a rotating 8 MiB buffer, {} into \
                     the same 1 MiB",
                    nanos_text(rotating.median),
                    nanos_text(same.median)
                );
            }
            f
        },
        ratio(
            "1 MiB messages/s, 64 MiB ring, in place ÷ iceoryx2",
            None,
            rate("snapbus-in-place", 1 << 20),
            rate(ice, 1 << 20),
            per_sec,
        ),
        ratio(
            "64 B `emit_many` + batch reads ÷ batched Unix socket",
            Some(Goal::AtLeast(1.0)),
            rate("snapbus-emit-many", 64),
            rate("uds-batched", 64),
            per_sec,
        ),
        ratio(
            "64 B messages/s ÷ iceoryx2",
            None,
            rate("snapbus", 64),
            rate(ice, 64),
            per_sec,
        ),
        ratio(
            "64 B one-way p50, spinning ÷ iceoryx2",
            None,
            p50("snapbus", 64),
            p50(ice, 64),
            nanos_text,
        ),
        KeyFigure {
            label: "Python → Python ÷ `multiprocessing.Queue`",
            // Its goal has a row of its own in the goals table, with the rates.
            goal: None,
            value: python.value("snapbus Python → Python ÷ multiprocessing.Queue"),
            detail: "the Python section's row".into(),
        },
        KeyFigure {
            label: "Python `snapshot()` of a 5-field dataclass, ns",
            goal: Some(Goal::AtMost(250.0)),
            value: snapshot_ns,
            detail: "the Python section's row".into(),
        },
    ]
}

/// The goals table's rows for the key figures that have a goal.
pub(super) fn goal_rows(out: &mut String, figures: &[KeyFigure]) {
    for f in figures
        .iter()
        .filter(|f| f.goal.is_some() && f.value.is_some())
    {
        let met = match f.met() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        let _ = writeln!(
            out,
            "| {} {} | {} ({}) | {met} |",
            f.label.trim_end_matches(", ns"),
            f.goal_text(),
            f.text(),
            f.detail
        );
    }
}

/// This run as the machines section keeps it.
pub(super) fn this_run(date: &str, fingerprint: Fingerprint, figures: &[KeyFigure]) -> MachineRun {
    MachineRun {
        date: date.to_owned(),
        fingerprint,
        figures: figures
            .iter()
            .map(|f| (f.label.to_owned(), f.text()))
            .collect(),
    }
}

/// The runs an existing machines section keeps: (the last run, the previous machine's).
pub(super) fn kept(page: &str) -> (Option<MachineRun>, Option<MachineRun>) {
    let section = match (page.find(BEGIN), page.find(END)) {
        (Some(b), Some(e)) if e > b => &page[b..e],
        _ => return (None, None),
    };
    let read = |marker: &str| {
        let at = section.find(marker)? + marker.len();
        let json = section[at..].split(" -->").next()?;
        serde_json::from_str::<MachineRun>(json).ok()
    };
    (read(THIS), read(PREVIOUS))
}

/// The machines section for `this` run, given what the page kept.
pub(super) fn section(
    this: &MachineRun,
    last: Option<MachineRun>,
    previous: Option<MachineRun>,
) -> String {
    let previous = match last {
        Some(last) if !last.fingerprint.same_machine(&this.fingerprint) => Some(last),
        _ => previous,
    };
    let mut out = String::new();
    let json = |r: &MachineRun| serde_json::to_string(r).unwrap_or_default();
    let _ = writeln!(out, "{BEGIN}\n{THIS}{} -->", json(this));
    if let Some(p) = &previous {
        let _ = writeln!(out, "{PREVIOUS}{} -->", json(p));
    }
    let _ = writeln!(out, "## This machine and the previous one\n");
    let _ = writeln!(
        out,
        "Written by `compare` from its last full run and the last full run on another machine \
         (a machine is its CPU, caches and the memcpy and cache-line figures of its run: a VM \
         moved to another host is another machine). What differs between the columns depends \
         on the machine.\n"
    );
    let other = |f: &dyn Fn(&MachineRun) -> String| previous.as_ref().map_or("–".into(), f);
    let _ = writeln!(
        out,
        "| | this machine ({}) | previous machine ({}) |\n|---|---|---|",
        this.date,
        other(&|p| p.date.clone())
    );
    let fp_rows: [FingerprintRow; 4] = [
        ("CPU", |f| format!("{}, {} CPUs", f.cpu, f.cpus)),
        ("caches", |f| f.caches.clone()),
        ("memcpy, 1 MiB blocks into 64 MiB", |f| {
            f.memcpy_gbs.map_or("–".into(), |g| format!("{g:.1} GB/s"))
        }),
        ("cache-line round trip", |f| {
            f.rtt_ns.map_or("–".into(), nanos_text)
        }),
    ];
    for (label, get) in fp_rows {
        let _ = writeln!(
            out,
            "| {label} | {} | {} |",
            get(&this.fingerprint),
            other(&|p| get(&p.fingerprint))
        );
    }
    for (label, text) in &this.figures {
        let theirs = other(&|p| {
            p.figures
                .iter()
                .find(|(l, _)| l == label)
                .map_or("–".into(), |(_, t)| t.clone())
        });
        let _ = writeln!(out, "| {label} | {text} | {theirs} |");
    }
    let _ = writeln!(out, "{END}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(memcpy: f64, rtt: f64) -> Fingerprint {
        Fingerprint {
            cpu: "AMD EPYC".into(),
            cpus: 2,
            caches: "L1d 48 KiB, L2 1 MiB, L3 32 MiB".into(),
            memcpy_gbs: Some(memcpy),
            rtt_ns: Some(rtt),
        }
    }

    fn run(date: &str, fingerprint: Fingerprint, ratio: &str) -> MachineRun {
        MachineRun {
            date: date.into(),
            fingerprint,
            figures: vec![("4 KiB ÷ iceoryx2".into(), ratio.into())],
        }
    }

    #[test]
    fn a_vm_on_another_host_is_another_machine() {
        assert!(fp(28.8, 50.0).same_machine(&fp(25.9, 45.0)));
        assert!(!fp(28.8, 50.0).same_machine(&fp(10.9, 152.0)));
        assert!(!fp(28.8, 50.0).same_machine(&fp(28.0, 152.0)));
        let mut other_cpu = fp(28.8, 50.0);
        other_cpu.cpu = "Intel Xeon".into();
        assert!(!fp(28.8, 50.0).same_machine(&other_cpu));
    }

    #[test]
    fn the_last_run_becomes_the_previous_machine_only_when_the_machine_changed() {
        let a = run("2026-11-27", fp(10.9, 152.0), "0.93×");
        let b = run("2026-11-28", fp(28.8, 50.0), "1.23×");
        // First run on a new page: no previous machine.
        let page = section(&a, None, None);
        assert_eq!(kept(&page), (Some(a.clone()), None));
        // Another machine: the last run moves over.
        let page = section(&b, kept(&page).0, kept(&page).1);
        assert_eq!(kept(&page), (Some(b.clone()), Some(a.clone())));
        assert!(
            page.contains("| 4 KiB ÷ iceoryx2 | 1.23× | 0.93× |"),
            "{page}"
        );
        // The same machine again: the previous one stays.
        let b2 = run("2026-11-29", fp(27.0, 47.0), "1.25×");
        let page = section(&b2, kept(&page).0, kept(&page).1);
        assert_eq!(kept(&page), (Some(b2), Some(a)));
        assert!(
            page.contains("| 4 KiB ÷ iceoryx2 | 1.25× | 0.93× |"),
            "{page}"
        );
    }

    #[test]
    fn sysfs_sizes_read_as_people_write_them() {
        assert_eq!(size_text("32768K"), "32 MiB");
        assert_eq!(size_text("48K"), "48 KiB");
        assert_eq!(size_text("1024K"), "1 MiB");
        assert_eq!(size_text("odd"), "odd");
    }
}

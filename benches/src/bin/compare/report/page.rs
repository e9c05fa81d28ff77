//! The three shapes of a run's report, and where each is written.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{
    Input, Key, NOISY_PCT, Row, best_throughput_peer, machine, machines, nanos_text, rate_text,
    rows, tables, workspace_file,
};
use crate::common::{Mode, Wait};

const BEGIN: &str = "<!-- compare:begin -->";
const END: &str = "<!-- compare:end -->";
/// The markers of the `--every-byte` run's section.
const BEGIN_EVERY_BYTE: &str = "<!-- compare-every-byte:begin -->";
const END_EVERY_BYTE: &str = "<!-- compare-every-byte:end -->";
/// The markers of README.md's headline table.
const BEGIN_README: &str = "<!-- compare:readme:begin -->";
const END_README: &str = "<!-- compare:readme:end -->";

/// Where a run's report goes (it is always printed).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Destination {
    /// Printed only (`--quick`, a filtered run, `--no-write`).
    Nowhere,
    /// The page sections of the workspace's BENCHMARKS.md and README.md (a full run).
    Pages,
    /// `--out FILE`: the page section of that Markdown file.
    File(PathBuf),
    /// `--out DIR`: the full report into `DIR/<date>-<machine>/compare.md`, and the pages if
    /// the run is a full one.
    Runs { dir: PathBuf, pages: bool },
}

/// Where `--out` (or its absence) sends the report of a run; `full`: every peer and size, not
/// `--quick`.
pub(crate) fn destination(out: Option<&Path>, no_write: bool, full: bool) -> Destination {
    match out {
        Some(p) if p.is_dir() || p.as_os_str().to_string_lossy().ends_with('/') => {
            Destination::Runs {
                dir: p.to_path_buf(),
                pages: full,
            }
        }
        Some(p) => Destination::File(p.to_path_buf()),
        None if full && !no_write => Destination::Pages,
        None => Destination::Nowhere,
    }
}

/// A run's report in its three shapes.
pub(crate) struct Report {
    /// Everything: printed, and kept under `--out DIR`.
    pub(crate) full: String,
    /// The section of BENCHMARKS.md, with its markers.
    page: String,
    /// README.md's headline table, with its markers (not for `--every-byte`).
    headline: Option<String>,
    every_byte: bool,
    /// The run's folder name: `<date>-<machine>`.
    name: String,
    /// The machine and the key figures, for the machines section (not for `--every-byte`).
    machine: Option<machines::MachineRun>,
}

/// Renders the report of a run bound for `dest`.
pub(crate) fn render(input: &Input<'_>, dest: &Destination) -> Report {
    let rows = rows(input);
    let name = format!(
        "{}-{}",
        machine::date(input.started)
            .split(' ')
            .next()
            .unwrap_or("run"),
        machine::slug()
    );
    let kept = match dest {
        Destination::Runs { .. } => Some(format!("benches/runs/{name}/compare.md")),
        _ => None,
    };
    let fingerprint = fingerprint(input);
    let this = (!input.plan.every_byte).then(|| {
        let figures = machines::key_figures(
            &rows,
            &input.plan.peers,
            input.python,
            tables::paced_copies(input),
        );
        let day = machine::date(input.started);
        let day = day.split(' ').next().unwrap_or("?");
        machines::this_run(day, fingerprint.clone(), &figures)
    });
    Report {
        full: full(input, &rows),
        page: page(
            input,
            &rows,
            &machine::line(),
            &fingerprint,
            kept.as_deref(),
        ),
        headline: (!input.plan.every_byte).then(|| headline(input, &rows)),
        every_byte: input.plan.every_byte,
        name,
        machine: this,
    }
}

/// The machine's fingerprint: its CPU and caches, and the same run's references.
fn fingerprint(input: &Input<'_>) -> machines::Fingerprint {
    let (memcpy, rtt) = tables::reference_medians(input);
    machines::Fingerprint {
        cpu: machine::cpu_model(),
        cpus: machine::cpus(),
        caches: machines::caches(),
        memcpy_gbs: memcpy.map(|s| s.median),
        rtt_ns: rtt.map(|s| s.median),
    }
}

/// The title and when the run was made.
fn title(input: &Input<'_>) -> (String, String) {
    let title = if input.plan.every_byte {
        "Against peers, every consumer reading every byte (`compare --every-byte`)"
    } else {
        "Against peers, side by side (`compare`)"
    };
    let secs = input
        .finished
        .duration_since(input.started)
        .map_or(0, |d| d.as_secs());
    let when = format!(
        "started {}, took {} min {} s, {} repetition(s){}",
        machine::date(input.started),
        secs / 60,
        secs % 60,
        input.plan.reps,
        if input.plan.quick {
            "; **quick mode: one short repetition, not for comparing**"
        } else {
            ""
        }
    );
    (title.into(), when)
}

/// The full report: machine, method, each peer's configuration, every table and the ratios.
fn full(input: &Input<'_>, rows: &BTreeMap<Key, Row>) -> String {
    let plan = input.plan;
    let reps = plan.reps;
    let (title, when) = title(input);
    let mut out = String::new();
    let _ = writeln!(out, "# {title}\n");
    if plan.every_byte {
        let _ = writeln!(
            out,
            "Every consumer reads every byte of every message (the sum of its words, checked \
             against what the producer sent), where by default each checks only a message's \
             first two words and its last: peers that hand the consumer the message where it \
             lies (iceoryx2, snapbus reading in place) no longer skip the bytes a consumer \
             that copies has to read.\n"
        );
    }
    let _ = writeln!(
        out,
        "Written by [`compare`](../../src/bin/compare/main.rs); every figure comes from **one \
         run** ({when}) of:\n"
    );
    let _ = writeln!(out, "```sh\n{}\n```\n", input.command);
    machine::table(&mut out);
    method(&mut out, input);
    tables::throughput(&mut out, input, rows);
    tables::ratios(&mut out, plan, rows);
    tables::latency(&mut out, input, rows);
    let (memcpy, rtt) = tables::references(&mut out, input);
    if !plan.every_byte {
        crate::python_rows::render(&mut out, input.python);
        tables::goals(&mut out, input, rows, memcpy, rtt);
    }
    let _ = reps;
    out
}

/// The method paragraph and how each peer is configured (the full report).
fn method(out: &mut String, input: &Input<'_>) {
    let plan = input.plan;
    let reps = plan.reps;
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
}

/// The page section: the run in one paragraph, then its tables (`--every-byte`: throughput).
fn page(
    input: &Input<'_>,
    rows: &BTreeMap<Key, Row>,
    machine: &str,
    fingerprint: &machines::Fingerprint,
    kept: Option<&str>,
) -> String {
    let plan = input.plan;
    let (title, when) = title(input);
    let (begin, end) = markers(plan.every_byte);
    let mut out = String::new();
    let _ = writeln!(out, "{begin}\n## {title}\n");
    let full = match kept {
        Some(path) => format!("the run's full report, [`{path}`]({path})"),
        None => "the run's full report (printed by the run; `--out benches/runs/` keeps it)".into(),
    };
    let _ = writeln!(
        out,
        "Written by [`compare`](benches/src/bin/compare/main.rs) (edit the harness, not this \
         section) from one run ({when}) on {machine}. Producer and consumer are separate \
         processes pinned to two CPUs; cells are the median and (min–max) of the repetitions; \
         *other load* is the CPU time of other processes during a run, flagged above \
         {NOISY_PCT:.0} %. The method and each peer's configuration: {full}.\n"
    );
    let _ = writeln!(out, "```sh\n{}\n```", input.command);
    let _ = writeln!(
        out,
        "\n**The machine's fingerprint**: {}.",
        fingerprint.text()
    );
    tables::throughput(&mut out, input, rows);
    if !plan.every_byte {
        tables::latency(&mut out, input, rows);
        let (memcpy, rtt) = tables::references(&mut out, input);
        crate::python_rows::render(&mut out, input.python);
        tables::goals(&mut out, input, rows, memcpy, rtt);
    }
    let _ = writeln!(out, "{end}");
    out
}

/// One headline row: a snapbus peer at a size, against the best cross-process peer and the
/// Python queue.
struct Headline {
    label: &'static str,
    peer: &'static str,
    size: usize,
    mode: Mode,
    wait: Wait,
    /// GB/s instead of messages/s (throughput).
    gbytes: bool,
}

const HEADLINES: [Headline; 7] = [
    Headline {
        label: "64 B messages/s",
        peer: "snapbus",
        size: 64,
        mode: Mode::Throughput,
        wait: Wait::Sleep,
        gbytes: false,
    },
    Headline {
        label: "64 B messages/s, `emit_many`, batch reads",
        peer: "snapbus-emit-many",
        size: 64,
        mode: Mode::Throughput,
        wait: Wait::Sleep,
        gbytes: false,
    },
    Headline {
        label: "64 B latency p50, spinning consumer",
        peer: "snapbus",
        size: 64,
        mode: Mode::Latency,
        wait: Wait::Spin,
        gbytes: false,
    },
    Headline {
        label: "64 B latency p50, sleeping consumer",
        peer: "snapbus",
        size: 64,
        mode: Mode::Latency,
        wait: Wait::Sleep,
        gbytes: false,
    },
    Headline {
        label: "4 KiB messages/s",
        peer: "snapbus",
        size: 4 << 10,
        mode: Mode::Throughput,
        wait: Wait::Sleep,
        gbytes: false,
    },
    Headline {
        label: "1 MiB GB/s, reading in place",
        peer: "snapbus-in-place",
        size: 1 << 20,
        mode: Mode::Throughput,
        wait: Wait::Sleep,
        gbytes: true,
    },
    Headline {
        label: "1 MiB GB/s, 8 MiB ring, reading in place",
        peer: "snapbus-small-ring",
        size: 1 << 20,
        mode: Mode::Throughput,
        wait: Wait::Sleep,
        gbytes: true,
    },
];

/// README.md's headline table: a few rows of the run, with its date and machine.
fn headline(input: &Input<'_>, rows: &BTreeMap<Key, Row>) -> String {
    let peers = &input.plan.peers;
    let median = |name: &str, h: &Headline| -> Option<f64> {
        let idx = peers.iter().position(|p| p.name == name)?;
        let row = rows.get(&(h.size, h.mode, idx, h.wait))?;
        match h.mode {
            Mode::Throughput => row.rate(),
            Mode::Latency => row.p50(),
        }
        .map(|s| s.median)
    };
    let text = |h: &Headline, v: f64| match (h.mode, h.gbytes) {
        (Mode::Latency, _) => nanos_text(v),
        (Mode::Throughput, true) => format!("{:.2}", v * h.size as f64 / 1e9),
        (Mode::Throughput, false) => rate_text(v).trim_end().to_owned(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{BEGIN_README}\n| | snapbus | best other (cross-process) | Python `multiprocessing.Queue` |\n\
         |---|---:|---:|---:|"
    );
    for h in &HEADLINES {
        let Some(s) = median(h.peer, h) else {
            continue;
        };
        let best = match h.mode {
            Mode::Throughput => best_throughput_peer(rows, peers, h.size).map(|(p, v, _)| (p, v)),
            Mode::Latency => super::best_peer(
                rows,
                peers,
                &super::Query {
                    size: h.size,
                    mode: h.mode,
                    wait: Some(h.wait),
                    per_message_only: false,
                },
            )
            .map(|(p, v, _)| (p, v)),
        };
        let best = best.map_or("–".into(), |(p, v)| format!("{} {}", p.label, text(h, v)));
        let queue = median("python-mp-queue", h).map_or("–".into(), |v| text(h, v));
        let _ = writeln!(
            out,
            "| {} | **{}** | {best} | {queue} |",
            h.label,
            text(h, s)
        );
    }
    let cpu = machine::line();
    let _ = writeln!(
        out,
        "\nRun of {} ({}).\n{END_README}",
        machine::date(input.started),
        cpu.split(';').next().unwrap_or(&cpu)
    );
    out
}

/// The section markers of a run (`--every-byte` has its own section).
fn markers(every_byte: bool) -> (&'static str, &'static str) {
    if every_byte {
        (BEGIN_EVERY_BYTE, END_EVERY_BYTE)
    } else {
        (BEGIN, END)
    }
}

/// Writes `report` where `dest` says; returns the files written.
pub(crate) fn write(report: &Report, dest: &Destination) -> Result<Vec<PathBuf>> {
    let (begin, end) = markers(report.every_byte);
    let mut written = Vec::new();
    let pages = match dest {
        Destination::Nowhere => false,
        Destination::Pages => true,
        Destination::File(path) => {
            write_section(path, &report.page, begin, end)?;
            written.push(path.clone());
            false
        }
        Destination::Runs { dir, pages } => {
            let run = dir.join(&report.name);
            std::fs::create_dir_all(&run).with_context(|| format!("create {}", run.display()))?;
            let path = run.join(if report.every_byte {
                "compare-every-byte.md"
            } else {
                "compare.md"
            });
            std::fs::write(&path, &report.full)
                .with_context(|| format!("write {}", path.display()))?;
            written.push(path);
            *pages
        }
    };
    if pages {
        let bench = workspace_file("BENCHMARKS.md");
        write_section(&bench, &report.page, begin, end)?;
        if let Some(this) = &report.machine {
            let old = std::fs::read_to_string(&bench).unwrap_or_default();
            let (last, previous) = machines::kept(&old);
            let section = machines::section(this, last, previous);
            write_section(&bench, &section, machines::BEGIN, machines::END)?;
        }
        written.push(bench);
        if let Some(headline) = &report.headline {
            let readme = workspace_file("README.md");
            write_section(&readme, headline, BEGIN_README, END_README)?;
            written.push(readme);
        }
    }
    Ok(written)
}

/// Replaces the section between `begin` and `end` of the Markdown file at `path` with `text`
/// (appending it if the file has none; creating the file if missing).
fn write_section(path: &Path, text: &str, begin: &str, end: &str) -> Result<()> {
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
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::common::ConsumerReport;
    use crate::python_rows::PyOutcome;
    use crate::run::{Job, Outcome, Plan, RefOutcome};

    /// A run of snapbus and the batched socket at 64 B: throughput and latency.
    fn outcomes(plan: &Plan) -> Vec<Outcome> {
        let mut out = Vec::new();
        for (peer, rate, p50) in [(plan.peers[0], 10e6, 220), (plan.peers[1], 40e6, 0)] {
            let report = ConsumerReport {
                delivered: rate as u64,
                window_nanos: 1_000_000_000,
                ..ConsumerReport::default()
            };
            let job = |mode, wait| Job {
                peer,
                size: 64,
                mode,
                wait,
            };
            out.push(Outcome {
                job: job(Mode::Throughput, Wait::Sleep),
                result: Ok(report),
                other_load_pct: 1.0,
            });
            if p50 > 0 {
                out.push(Outcome {
                    job: job(Mode::Latency, Wait::Spin),
                    result: Ok(ConsumerReport {
                        p50_nanos: Some(p50),
                        p99_nanos: Some(p50 * 10),
                        ..ConsumerReport::default()
                    }),
                    other_load_pct: 1.0,
                });
            }
        }
        out
    }

    fn plan(every_byte: bool) -> Plan {
        Plan {
            quick: false,
            reps: 1,
            sizes: vec![64],
            peers: vec![
                crate::peers::find("snapbus").expect("peer"),
                crate::peers::find("uds-batched").expect("peer"),
            ],
            secs: 1.0,
            ref_secs: 0.5,
            every_byte,
        }
    }

    fn report(plan: &Plan, dest: &Destination) -> Report {
        let outcomes = outcomes(plan);
        let started = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_091_535);
        render(
            &Input {
                plan,
                outcomes: &outcomes,
                refs: &[RefOutcome::default()],
                skipped: &[],
                started,
                finished: started + Duration::from_secs(428),
                command: "cargo run --release -p snapbus-benches --bin compare".into(),
                python: &PyOutcome::Skipped("no interpreter".into()),
            },
            dest,
        )
    }

    #[test]
    fn the_page_is_the_run_in_a_paragraph_and_its_tables() {
        let plan = plan(false);
        let r = report(&plan, &Destination::Pages);
        assert!(r.page.starts_with(BEGIN) && r.page.trim_end().ends_with(END));
        assert!(
            r.page
                .contains("from one run (started 2025-11-25 17:25:35 UTC, took 7 min 8 s")
        );
        for heading in [
            "### Throughput",
            "### One-way latency",
            "### The machine's limits",
            "### Against the goals",
        ] {
            assert!(r.page.contains(heading), "{heading} missing:\n{}", r.page);
        }
        assert!(
            r.page.contains("| 64 B | **snapbus** | 10.00 M |"),
            "{}",
            r.page
        );
        // The method and the ratio lines stay in the full report.
        assert!(!r.page.contains("**Method.**") && r.full.contains("**Method.**"));
        assert!(!r.page.contains("best cross-process peer (") && r.full.contains("= **0.25×**"));
        assert!(!r.page.contains("issue #"), "no issue numbers in the page");
        let headline = r.headline.expect("a headline for the main run");
        assert!(
            headline.contains(
                "| 64 B messages/s | **10.00 M** | Unix socket, batched (64 KiB) 40.00 M | – |"
            ),
            "{headline}"
        );
        assert!(headline.contains("| 64 B latency p50, spinning consumer | **220 ns** | – | – |"));
        // A run kept under --out DIR links its full report.
        let kept = report(
            &plan,
            &Destination::Runs {
                dir: "runs".into(),
                pages: true,
            },
        );
        assert!(kept.page.contains(&format!(
            "[`benches/runs/{0}/compare.md`](benches/runs/{0}/compare.md)",
            kept.name
        )));
        assert!(kept.name.starts_with("2025-11-25-"), "{}", kept.name);
    }

    #[test]
    fn the_every_byte_page_has_its_own_markers_and_only_throughput() {
        let plan = plan(true);
        let r = report(&plan, &Destination::Pages);
        assert!(r.page.starts_with(BEGIN_EVERY_BYTE) && r.headline.is_none());
        assert!(r.page.contains("### Throughput") && !r.page.contains("### One-way latency"));
    }

    #[test]
    fn out_names_a_file_or_a_folder_of_runs() {
        let dir = std::env::temp_dir();
        assert_eq!(
            destination(Some(&dir), false, true),
            Destination::Runs {
                dir: dir.clone(),
                pages: true
            }
        );
        assert_eq!(
            destination(Some(Path::new("new/runs/")), false, false),
            Destination::Runs {
                dir: "new/runs/".into(),
                pages: false
            }
        );
        assert_eq!(
            destination(Some(Path::new("B.md")), false, true),
            Destination::File("B.md".into())
        );
        assert_eq!(destination(None, false, true), Destination::Pages);
        assert_eq!(destination(None, true, true), Destination::Nowhere);
        assert_eq!(destination(None, false, false), Destination::Nowhere);
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
        write_section(&path, &format!("{BEGIN}\nnew\n{END}\n"), BEGIN, END).expect("section");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            format!("# top\n\n{BEGIN}\nnew\n{END}\n\n## rest\nkept\n")
        );
        // The --every-byte section: appended the first time, then replaced; the other kept.
        let eb = |t: &str| format!("{BEGIN_EVERY_BYTE}\n{t}\n{END_EVERY_BYTE}");
        write_section(&path, &eb("one"), BEGIN_EVERY_BYTE, END_EVERY_BYTE).expect("section");
        write_section(&path, &eb("two"), BEGIN_EVERY_BYTE, END_EVERY_BYTE).expect("section");
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
        write_section(&path, &format!("{BEGIN}\nx\n{END}"), BEGIN, END).expect("section");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, format!("# only\n\n{BEGIN}\nx\n{END}\n"));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

//! `snapbus ls`: producers, consumers and schemas on a bus, with rates, lag and losses.
//!
//! Loss is split in two: LOST (overwritten before it was read, or left unfinished by a dead
//! producer) and DAMAGED (records lost to garbage in the ring; with the number of garbage spots
//! skipped, which is also shown when they hid no record). A consumer's LOST and LAG
//! come from its last reported cursors and the rings as they are now, so a consumer that
//! stopped reading (SIGSTOP, a hang) is seen falling behind; one that stopped reporting is
//! shown `stale`. HISTORY is the span between the oldest and the newest record a producer's
//! lane holds now: how far back a late consumer or a `snapshot` can see (`history_secs` in
//! `--json`). Records a consumer skipped for a schema key its producer's catalog does not
//! explain are counted (`unknown_keys`) and named under the table. Under the table, each consumer that keeps a status board (an exporter's state and
//! counters, the recorder's file) has a line of it. FILTER is the level filter in force in a
//! producer: the bus filter while one is set (`snapbus filter`), else the producer's own
//! `SNAPBUS_FILTER`.
//!
//! RECORDS and a producer's RATE/s come from its lane's counters, read by the broker; HISTORY
//! and the schemas' RATE/s and IN RINGS from a census of the ring's record headers, which the
//! broker runs at most every few seconds per ring, or now with `--history`. `--json` prints
//! [`LsJson`], a shape of its own.

use std::io::Write;

use anyhow::Context;
use serde::Serialize;
use snapbus_bus::client::{BusState, Census, ConsumerState, ProducerState, SchemaState};
use snapbus_bus::status::StatusValue;

use crate::bus::{bus_dir, connect};
use crate::cli::LsArgs;

/// A column's alignment.
#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
}

/// A text table whose columns are as wide as their widest cell; the last column is not padded.
struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(columns: &[(&'static str, Align)]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, (head, _))| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .chain([head.len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |out: &mut dyn Write, cells: &mut dyn Iterator<Item = &str>| {
            let mut text = String::new();
            for (i, cell) in cells.enumerate() {
                let (_, align) = self.columns[i];
                let last = i + 1 == self.columns.len();
                if i > 0 {
                    text.push_str("  ");
                }
                let pad = widths[i].saturating_sub(cell.chars().count());
                match (align, last) {
                    (Align::Left, true) => text.push_str(cell),
                    (Align::Left, false) => {
                        text.push_str(cell);
                        text.extend(std::iter::repeat_n(' ', pad));
                    }
                    (Align::Right, _) => {
                        text.extend(std::iter::repeat_n(' ', pad));
                        text.push_str(cell);
                    }
                }
            }
            writeln!(out, "{}", text.trim_end())
        };
        line(out, &mut self.columns.iter().map(|(h, _)| *h))?;
        for r in &self.rows {
            line(out, &mut r.iter().map(String::as_str))?;
        }
        Ok(())
    }
}

/// What `ls --json` prints: one object, the contract scripts read (documented in `snapbus ls
/// --help`). It is built from the client's [`BusState`] field by field, so the control
/// protocol can change without changing it; fields may be added, never renamed or removed.
/// Statuses are the text the table shows (`live`, `running (restarted 1x)`, `exited 1; restart
/// 2 of 5 in 2s`), a consumer's status board an object of key to value.
#[derive(Debug, Serialize)]
struct LsJson<'a> {
    /// The bus name.
    bus: &'a str,
    /// The broker's pid.
    broker_pid: u32,
    /// The bus filter ("" for none).
    filter: &'a str,
    /// Ring censuses the broker has run since it started.
    census_runs: u64,
    producers: Vec<ProducerJson<'a>>,
    /// Producers the broker refused (the most recent), with why.
    refused_producers: &'a [String],
    consumers: Vec<ConsumerJson<'a>>,
    schemas: Vec<SchemaJson<'a>>,
}

/// A producer in [`LsJson`] (see [`ProducerState`] for each field's meaning).
#[derive(Debug, Serialize)]
struct ProducerJson<'a> {
    id: u64,
    info: ProducerInfoJson<'a>,
    status: String,
    frames: u64,
    rate_hz: f64,
    dropped: u64,
    lane_bytes: u64,
    history_secs: f64,
    history_start_nanos: Option<u64>,
    history_records: u64,
    history_first_seq: Option<u64>,
    census_age_secs: Option<f64>,
    filter: Option<&'a str>,
    own_filter: Option<&'a str>,
}

/// What a producer said about itself, in [`ProducerJson`].
#[derive(Debug, Serialize)]
struct ProducerInfoJson<'a> {
    pid: u32,
    name: &'a str,
    cmdline: &'a [String],
    session_tag: Option<&'a str>,
    perf_tag: Option<&'a str>,
    lane_id: u64,
    started_nanos: u64,
    relayed: bool,
}

/// A consumer in [`LsJson`] (see [`ConsumerState`] for each field's meaning).
#[derive(Debug, Serialize)]
struct ConsumerJson<'a> {
    id: u64,
    info: ConsumerInfoJson<'a>,
    delivered: u64,
    lost: u64,
    damaged: u64,
    garbage: u64,
    unknown_keys: u64,
    lag_bytes: u64,
    report_age_secs: f64,
    refused: &'a [String],
    supervised: bool,
    status: String,
    log: Option<&'a str>,
    board: serde_json::Map<String, serde_json::Value>,
}

/// What a consumer said about itself, in [`ConsumerJson`].
#[derive(Debug, Serialize)]
struct ConsumerInfoJson<'a> {
    pid: u32,
    kind: &'a str,
    subscriptions: &'a [String],
}

/// A schema in [`LsJson`] (see [`SchemaState`] for each field's meaning).
#[derive(Debug, Serialize)]
struct SchemaJson<'a> {
    id: &'a str,
    version: u32,
    fingerprint: &'a str,
    descriptor: &'a str,
    conflict: bool,
    producers: &'a [u64],
    rate_hz: f64,
    in_rings: u64,
}

impl<'a> LsJson<'a> {
    fn of(s: &'a BusState) -> LsJson<'a> {
        LsJson {
            bus: &s.bus,
            broker_pid: s.broker_pid,
            filter: &s.filter,
            census_runs: s.census_runs,
            producers: s.producers.iter().map(ProducerJson::of).collect(),
            refused_producers: &s.refused_producers,
            consumers: s.consumers.iter().map(ConsumerJson::of).collect(),
            schemas: s.schemas.iter().map(SchemaJson::of).collect(),
        }
    }
}

impl<'a> ProducerJson<'a> {
    fn of(p: &'a ProducerState) -> ProducerJson<'a> {
        let i = &p.info;
        ProducerJson {
            id: p.id,
            info: ProducerInfoJson {
                pid: i.pid,
                name: &i.name,
                cmdline: &i.cmdline,
                session_tag: i.session_tag.as_deref(),
                perf_tag: i.perf_tag.as_deref(),
                lane_id: i.lane_id,
                started_nanos: i.started_nanos,
                relayed: i.relayed,
            },
            status: p.status.to_string(),
            frames: p.frames,
            rate_hz: p.rate_hz,
            dropped: p.dropped,
            lane_bytes: p.lane_bytes,
            history_secs: p.history_secs,
            history_start_nanos: p.history_start_nanos,
            history_records: p.history_records,
            history_first_seq: p.history_first_seq,
            census_age_secs: p.census_age_secs,
            filter: p.filter.as_deref(),
            own_filter: p.own_filter.as_deref(),
        }
    }
}

impl<'a> ConsumerJson<'a> {
    fn of(c: &'a ConsumerState) -> ConsumerJson<'a> {
        ConsumerJson {
            id: c.id,
            info: ConsumerInfoJson {
                pid: c.info.pid,
                kind: &c.info.kind,
                subscriptions: &c.info.subscriptions,
            },
            delivered: c.delivered,
            lost: c.lost,
            damaged: c.damaged,
            garbage: c.garbage,
            unknown_keys: c.unknown_keys,
            lag_bytes: c.lag_bytes,
            report_age_secs: c.report_age_secs,
            refused: &c.refused,
            supervised: c.supervised,
            status: c.status.to_string(),
            log: c.log.as_deref(),
            board: c
                .board
                .iter()
                .map(|e| {
                    let v = match &e.value {
                        StatusValue::Count(n) => (*n).into(),
                        StatusValue::Number(x) => (*x).into(),
                        StatusValue::Text(t) => t.as_str().into(),
                    };
                    (e.key.clone(), v)
                })
                .collect(),
        }
    }
}

impl<'a> SchemaJson<'a> {
    fn of(s: &'a SchemaState) -> SchemaJson<'a> {
        SchemaJson {
            id: &s.id,
            version: s.version,
            fingerprint: &s.fingerprint,
            descriptor: &s.descriptor,
            conflict: s.conflict,
            producers: &s.producers,
            rate_hz: s.rate_hz,
            in_rings: s.in_rings,
        }
    }
}

/// The state as `ls --json` prints it (for `snapbus mcp`).
#[cfg(feature = "mcp")]
pub(crate) fn ls_json(s: &BusState) -> anyhow::Result<serde_json::Value> {
    serde_json::to_value(LsJson::of(s)).context("rendering the state as JSON")
}

pub(crate) fn run(args: &LsArgs) -> anyhow::Result<()> {
    let dir = bus_dir(&args.bus)?;
    let census = if args.history {
        Census::Fresh
    } else {
        Census::Recent
    };
    let s = connect(&dir)?.state_with(census)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let line = serde_json::to_string(&LsJson::of(&s)).context("rendering the state as JSON")?;
        writeln!(out, "{line}")?;
        return Ok(());
    }
    writeln!(
        out,
        "bus '{}' (broker pid {}){}",
        s.bus,
        s.broker_pid,
        if s.filter.is_empty() {
            ", no bus filter (each producer uses its own)".to_owned()
        } else {
            format!(
                ", bus filter '{}' (in force in every producer until `snapbus filter --reset`)",
                s.filter
            )
        }
    )?;
    writeln!(out, "\nPRODUCERS")?;
    producers(&s).write(&mut out)?;
    for r in &s.refused_producers {
        writeln!(out, "  ! refused {r}")?;
    }
    writeln!(out, "\nCONSUMERS")?;
    let (t, refused) = consumers(&s);
    t.write(&mut out)?;
    for r in refused {
        writeln!(out, "  ! {r}")?;
    }
    for c in s.consumers.iter().filter(|c| !c.board.is_empty()) {
        let board: Vec<String> = c
            .board
            .iter()
            .map(|e| format!("{}={}", e.key, e.value))
            .collect();
        writeln!(
            out,
            "  consumer {} ({}): {}",
            c.id,
            c.info.kind,
            board.join(" ")
        )?;
    }
    writeln!(out, "\nSCHEMAS")?;
    schemas(&s).write(&mut out)?;
    out.flush()?;
    Ok(())
}

/// The PRODUCERS table.
fn producers(s: &BusState) -> Table {
    use Align::{Left, Right};
    let mut t = Table::new(&[
        ("ID", Right),
        ("NAME", Left),
        ("PID", Right),
        ("STATUS", Left),
        ("RECORDS", Right),
        ("RATE/s", Right),
        ("DROPPED", Right),
        ("HISTORY", Right),
        ("FILTER", Left),
        ("TAGS", Left),
    ]);
    for p in &s.producers {
        let tags = [&p.info.session_tag, &p.info.perf_tag]
            .iter()
            .filter_map(|t| t.as_deref())
            .collect::<Vec<_>>()
            .join(",");
        t.row(vec![
            p.id.to_string(),
            p.info.name.clone(),
            p.info.pid.to_string(),
            p.status.to_string(),
            p.frames.to_string(),
            format!("{:.1}", p.rate_hz),
            p.dropped.to_string(),
            history(p.history_secs, p.history_start_nanos.is_some()),
            p.filter.clone().unwrap_or_else(|| "-".into()),
            tags,
        ]);
    }
    t
}

/// The span of records a lane holds, as `ls` shows it: `1.8 s`, `12.5 min`, `-` for none.
fn history(secs: f64, any: bool) -> String {
    match secs {
        _ if !any => "-".into(),
        s if s < 60.0 => format!("{s:.1} s"),
        s if s < 3600.0 => format!("{:.1} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

/// The CONSUMERS table, and the lanes they refuse.
fn consumers(s: &BusState) -> (Table, Vec<String>) {
    use Align::{Left, Right};
    let mut t = Table::new(&[
        ("ID", Right),
        ("KIND", Left),
        ("PID", Right),
        ("STATUS", Left),
        ("DELIVERED", Right),
        ("LOST", Right),
        ("DAMAGED", Right),
        ("LAG BYTES", Right),
        ("SUBSCRIPTIONS", Left),
    ]);
    let mut refused = Vec::new();
    for c in &s.consumers {
        let subs = if c.info.subscriptions.is_empty() {
            "*".to_owned()
        } else {
            c.info.subscriptions.join(" ")
        };
        let status = if c.supervised || c.log.is_some() {
            format!("{} (attached)", c.status)
        } else {
            c.status.to_string()
        };
        t.row(vec![
            c.id.to_string(),
            c.info.kind.clone(),
            c.info.pid.to_string(),
            status,
            c.delivered.to_string(),
            c.lost.to_string(),
            if c.garbage > 0 {
                format!("{} ({} spots)", c.damaged, c.garbage)
            } else {
                c.damaged.to_string()
            },
            c.lag_bytes.to_string(),
            subs,
        ]);
        refused.extend(
            c.refused
                .iter()
                .map(|r| format!("consumer {} refuses {r}", c.id)),
        );
        if c.unknown_keys > 0 {
            refused.push(format!(
                "consumer {} skipped {} records whose schema key their producer's catalog does \
                 not explain (a producer's bug or damage)",
                c.id, c.unknown_keys
            ));
        }
    }
    (t, refused)
}

/// The SCHEMAS table.
fn schemas(s: &BusState) -> Table {
    use Align::{Left, Right};
    let mut t = Table::new(&[
        ("ID", Left),
        ("VER", Right),
        ("FINGERPRINT", Left),
        ("RATE/s", Right),
        ("IN RINGS", Right),
        ("PRODUCERS", Left),
    ]);
    for sc in &s.schemas {
        let producers: Vec<String> = sc.producers.iter().map(u64::to_string).collect();
        t.row(vec![
            sc.id.clone(),
            sc.version.to_string(),
            sc.fingerprint.clone(),
            format!("{:.1}", sc.rate_hz),
            sc.in_rings.to_string(),
            format!(
                "{}{}",
                producers.join(","),
                if sc.conflict {
                    "  CONFLICT: another descriptor has this id and version"
                } else {
                    ""
                }
            ),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::{Align, Table};

    /// Every column starts at the same character in every line, whatever the width of its
    /// cells (regression: `aggregator-1of3` pushed the rest of its row right).
    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut t = Table::new(&[
            ("ID", Align::Right),
            ("KIND", Align::Left),
            ("PID", Align::Right),
            ("STATUS", Align::Left),
        ]);
        t.row(vec![
            "1".into(),
            "echo".into(),
            "42".into(),
            "running".into(),
        ]);
        t.row(vec![
            "12".into(),
            "aggregator-1of3".into(),
            "123456".into(),
            "stale (no report for 7 s)".into(),
        ]);
        let mut out = Vec::new();
        t.write(&mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "ID  KIND                PID  STATUS",
                " 1  echo                 42  running",
                "12  aggregator-1of3  123456  stale (no report for 7 s)",
            ]
        );
    }
}

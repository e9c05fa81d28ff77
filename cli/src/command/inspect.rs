//! `snapbus inspect`: what a recording holds — its origin, producers, schemas with counts,
//! sizes and time ranges, losses, and damage (where a cut or damaged file stops being
//! readable, and damaged chunks that were skipped). A damaged, cut or unfinished file is
//! described, then reported as an error (non-zero exit).
//!
//! LOSSES says, per producer, where its history in the file starts (`snapbus.history`: the
//! first record's sequence number and time, and how many earlier records are not in the file
//! and why), the loss records (gaps while recording) and what a failed write could not write
//! (`snapbus.cut`). It says "none" only when it knows: every producer's history starts at its
//! lane's first record (or nothing before it was overwritten), no gap, and the file is whole.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, Write};

use anyhow::Context;
use serde_json::json;
use snapbus_consumers::recording::{
    CUT_METADATA, Damage, HISTORY_METADATA, Item, PRODUCER_METADATA, RECORDING_METADATA,
    ReadErrorKind, RecordingReader,
};

use crate::bus::utc;
use crate::cli::InspectArgs;

#[derive(Default)]
struct SchemaStats {
    records: u64,
    bytes: u64,
    first_nanos: u64,
    last_nanos: u64,
    producers: BTreeSet<u64>,
}

/// A producer's key in the file: its lane id (hex), or `#<id>` in files that do not record
/// lane ids.
fn lane_key(lane_id: Option<u64>, id: u64) -> String {
    match lane_id {
        Some(l) => format!("{l:016x}"),
        None => format!("#{id}"),
    }
}

/// Loss records of one producer.
#[derive(Default)]
struct Gaps {
    lost: u64,
    gaps: u64,
    name: String,
    id: u64,
}

pub(crate) fn run(args: &InspectArgs) -> anyhow::Result<()> {
    let file =
        File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = RecordingReader::new(BufReader::with_capacity(1 << 20, file)).with_resync();
    let mut recording = BTreeMap::new();
    // By lane key.
    let mut producers: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut histories: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut schemas: BTreeMap<(String, u32), SchemaStats> = BTreeMap::new();
    let mut losses: BTreeMap<String, Gaps> = BTreeMap::new();
    let mut cut: Option<BTreeMap<String, String>> = None;
    let mut skipped: Vec<Damage> = Vec::new();
    let mut damage = None;
    for item in reader.by_ref() {
        match item {
            Ok(Item::Message(m)) => {
                let s = schemas
                    .entry((m.channel.schema.id().to_owned(), m.channel.schema.version()))
                    .or_default();
                if s.records == 0 || m.t_nanos < s.first_nanos {
                    s.first_nanos = m.t_nanos;
                }
                s.last_nanos = s.last_nanos.max(m.t_nanos);
                s.records += 1;
                s.bytes += m.data.len() as u64;
                s.producers.insert(m.channel.producer_id);
            }
            Ok(Item::Loss {
                channel, record, ..
            }) => {
                let g = losses
                    .entry(lane_key(channel.lane_id, record.producer_id))
                    .or_default();
                g.lost += record.lost;
                g.gaps += 1;
                g.name.clone_from(&channel.producer);
                g.id = record.producer_id;
            }
            Ok(Item::Metadata { name, fields }) => {
                let lane = |f: &BTreeMap<String, String>| {
                    let id = f.get("id").and_then(|v| v.parse().ok()).unwrap_or(0);
                    let lane = f
                        .get("lane_id")
                        .and_then(|v| u64::from_str_radix(v, 16).ok());
                    lane_key(lane, id)
                };
                if name == RECORDING_METADATA {
                    recording = fields;
                } else if name == PRODUCER_METADATA {
                    producers.insert(lane(&fields), fields);
                } else if name == HISTORY_METADATA {
                    histories.insert(lane(&fields), fields);
                } else if name == CUT_METADATA {
                    cut = Some(fields);
                }
            }
            Ok(Item::Damaged(d)) => skipped.push(d),
            Err(e) => damage = Some(e),
        }
    }
    let complete = reader.complete();
    let records: u64 = schemas.values().map(|s| s.records).sum();
    let first = schemas.values().map(|s| s.first_nanos).min();
    let last = schemas.values().map(|s| s.last_nanos).max();
    let whole = complete && damage.is_none() && skipped.is_empty() && cut.is_none();
    let history_lines = history_lines(&producers, &histories);
    let history_known = !histories.is_empty() && histories.len() >= producers.len();
    let history_complete = history_known && history_lines.iter().all(|(_, from_start)| *from_start);
    let verdict = if !whole {
        "not known: the file is cut or damaged (see DAMAGE): records that were not written or \
         cannot be read are missing"
            .to_owned()
    } else if records == 0 {
        "unknown: the file holds no records".to_owned()
    } else if !history_known {
        "not known: the file does not say where each producer's history starts (written by an \
         older snapbus)"
            .to_owned()
    } else if !losses.is_empty() || !history_complete {
        "some: see above".to_owned()
    } else if histories
        .values()
        .any(|h| h.get("start").is_some_and(|s| s == "continued"))
    {
        "none in this part: every record since the previous part of the recording is in the file"
            .to_owned()
    } else {
        "none: every record the producers wrote is in the file".to_owned()
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let v = json!({
            "file": args.file.display().to_string(),
            "bytes": size,
            "complete": complete,
            "recording": recording,
            "records": records,
            "first_nanos": first,
            "last_nanos": last,
            "producers": producers.values().collect::<Vec<_>>(),
            "histories": histories.values().collect::<Vec<_>>(),
            "schemas": schemas.iter().map(|((id, version), s)| json!({
                "id": id, "version": version, "records": s.records, "bytes": s.bytes,
                "first_nanos": s.first_nanos, "last_nanos": s.last_nanos,
                "producers": s.producers,
            })).collect::<Vec<_>>(),
            "losses": losses.iter().map(|(lane, g)| json!({
                "producer_id": g.id, "lane_id": lane, "lost": g.lost, "gaps": g.gaps,
            })).collect::<Vec<_>>(),
            "loss_verdict": verdict,
            "cut": cut,
            "skipped": skipped.iter().map(|d| json!({
                "offset": d.offset, "bytes": d.len, "error": d.error,
                "records": d.held.as_ref().and_then(|h| h.records),
                "first_nanos": d.held.as_ref().map(|h| h.first_nanos),
                "last_nanos": d.held.as_ref().map(|h| h.last_nanos),
            })).collect::<Vec<_>>(),
            "damage": damage.as_ref().map(|e| json!({"offset": e.offset, "error": e.kind.to_string()})),
        });
        writeln!(out, "{v}")?;
    } else {
        let get = |k: &str| recording.get(k).map_or("?", String::as_str);
        writeln!(out, "file       {} ({size} bytes)", args.file.display())?;
        writeln!(
            out,
            "recording  {} of bus '{}', format {}, snapbus {}",
            get("source"),
            get("bus"),
            get("format_version"),
            get("snapbus_version")
        )?;
        match (first, last) {
            (Some(a), Some(b)) => writeln!(
                out,
                "time       {} → {} ({:.3} s)",
                utc(a),
                utc(b),
                (b - a) as f64 / 1e9
            )?,
            _ => writeln!(out, "time       (no records)")?,
        }
        writeln!(out, "records    {records}")?;
        writeln!(out, "\nPRODUCERS")?;
        for p in producers.values() {
            let f = |k: &str| p.get(k).map_or("", String::as_str);
            let tags = [f("session_tag"), f("perf_tag")]
                .into_iter()
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join(",");
            writeln!(
                out,
                "{:>4}  {:<20} pid {:<8} lane {:<16} {}",
                f("id"),
                f("name"),
                f("pid"),
                f("lane_id"),
                tags
            )?;
        }
        writeln!(out, "\nSCHEMAS")?;
        writeln!(
            out,
            "{:<32} {:>4} {:>10} {:>12} {:>10}  PRODUCERS",
            "ID", "VER", "RECORDS", "BYTES", "SECONDS"
        )?;
        for ((id, version), s) in &schemas {
            let ids: Vec<String> = s.producers.iter().map(u64::to_string).collect();
            writeln!(
                out,
                "{id:<32} {version:>4} {:>10} {:>12} {:>10.3}  {}",
                s.records,
                s.bytes,
                (s.last_nanos - s.first_nanos) as f64 / 1e9,
                ids.join(",")
            )?;
        }
        writeln!(out, "\nLOSSES")?;
        for (line, _) in &history_lines {
            writeln!(out, "{line}")?;
        }
        for g in losses.values() {
            writeln!(
                out,
                "producer {} '{}': {} records overwritten before they could be recorded ({} \
                 gap{})",
                g.id,
                g.name,
                g.lost,
                g.gaps,
                if g.gaps == 1 { "" } else { "s" }
            )?;
        }
        if let Some(c) = &cut {
            writeln!(out, "{}", cut_line(c))?;
        }
        writeln!(out, "{verdict}")?;
        writeln!(out, "\nDAMAGE")?;
        for d in &skipped {
            writeln!(out, "skipped: {d}")?;
        }
        if let Some(c) = &cut {
            writeln!(
                out,
                "cut: the writer failed ({}) and ended the file early",
                c.get("error").map_or("?", String::as_str)
            )?;
        }
        match (&damage, complete) {
            (None, true) if skipped.is_empty() && cut.is_none() => {
                writeln!(out, "none: read through the footer, every CRC checked")?
            }
            (None, true) => writeln!(out, "everything else was read, through the footer")?,
            (None, false) => writeln!(out, "the file has no footer")?,
            (Some(e), _) => {
                let what = if matches!(
                    e.kind,
                    ReadErrorKind::Truncated { .. } | ReadErrorKind::Unfinished
                ) {
                    "cut"
                } else {
                    "damaged"
                };
                writeln!(
                    out,
                    "{what} at byte {} of {size}: {}\neverything before it ({records} records) was read",
                    e.offset, e.kind
                )?;
            }
        }
    }
    out.flush()?;
    if let Some(e) = damage {
        return Err(anyhow::anyhow!("{}: {e}", args.file.display()));
    }
    if let Some(d) = skipped.first() {
        anyhow::bail!(
            "{}: {} damaged part{} skipped (the first {d}); everything else was read",
            args.file.display(),
            skipped.len(),
            if skipped.len() == 1 { " was" } else { "s were" }
        );
    }
    if let Some(c) = cut {
        anyhow::bail!("{}: {}", args.file.display(), cut_line(&c));
    }
    Ok(())
}

/// What a `snapbus.cut` record says.
pub(crate) fn cut_line(c: &BTreeMap<String, String>) -> String {
    let f = |k: &str| c.get(k).map_or("?", String::as_str);
    let range = match (
        c.get("unwritten_first_nanos").and_then(|v| v.parse().ok()),
        c.get("unwritten_last_nanos").and_then(|v| v.parse().ok()),
    ) {
        (Some(a), Some(b)) => format!(" (emitted {} → {})", utc(a), utc(b)),
        _ => String::new(),
    };
    format!(
        "not written: {} records the recorder had received{range} were lost when writing \
         failed: {}",
        f("unwritten"),
        f("error")
    )
}

/// A line per producer with a history record, and whether its history is complete (nothing
/// before its first record was lost).
fn history_lines(
    producers: &BTreeMap<String, BTreeMap<String, String>>,
    histories: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<(String, bool)> {
    histories
        .iter()
        .map(|(lane, h)| {
            let num = |k: &str| h.get(k).and_then(|v| v.parse::<u64>().ok());
            let name = producers
                .get(lane)
                .and_then(|p| p.get("name"))
                .map_or("?", String::as_str);
            let who = format!(
                "producer {} '{name}' (lane {lane})",
                h.get("id").map_or("?", String::as_str)
            );
            let start = h.get("start").map_or("", String::as_str);
            let Some(first) = num("first_seq") else {
                let over = num("overwritten").unwrap_or(0);
                return (
                    format!(
                        "{who}: no record in the file; {over} records were overwritten before \
                         they could be read"
                    ),
                    over == 0,
                );
            };
            let at = num("first_nanos").map_or_else(String::new, |t| format!(" ({})", utc(t)));
            let from = format!("{who}: history starts at seq {first}{at}");
            let earlier = num("earlier").unwrap_or(first);
            if earlier == 0 {
                return (format!("{from}, the lane's first record"), true);
            }
            match (start, num("overwritten")) {
                ("oldest", Some(0)) => (
                    format!(
                        "{from}: nothing was overwritten before it (the {earlier} earlier \
                         records are of schemas not recorded)"
                    ),
                    true,
                ),
                ("oldest", Some(n)) => (
                    format!(
                        "{from}: {n} earlier records were overwritten in the ring before they \
                         could be recorded"
                    ),
                    false,
                ),
                ("latest", _) => (
                    format!(
                        "{from}: {earlier} earlier records predate the recording (it started at \
                         the latest record)"
                    ),
                    false,
                ),
                ("continued", _) => (
                    format!(
                        "{from}: its {earlier} earlier records are in the earlier parts of this \
                         rotated recording"
                    ),
                    true,
                ),
                ("time", _) => {
                    let window = num("start_nanos").map_or_else(String::new, utc);
                    (
                        format!(
                            "{from}: {earlier} earlier records are not in the file (emitted \
                             before {window}, where the recording's window starts, or \
                             overwritten in the ring)"
                        ),
                        false,
                    )
                }
                _ => (
                    format!("{from}: {earlier} earlier records are not in the file"),
                    false,
                ),
            }
        })
        .collect()
}

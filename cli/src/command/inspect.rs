//! `snapbus inspect`: what a recording holds — its origin, producers, schemas with counts,
//! sizes and time ranges, losses, and damage (where a cut or damaged file stops being
//! readable). A damaged file is described, then reported as an error (non-zero exit).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Write};

use anyhow::Context;
use serde_json::json;
use snapbus_consumers::recording::{
    Item, PRODUCER_METADATA, RECORDING_METADATA, ReadErrorKind, RecordingReader,
};

use crate::bus::utc;
use crate::cli::InspectArgs;

#[derive(Default)]
struct SchemaStats {
    records: u64,
    bytes: u64,
    first_nanos: u64,
    last_nanos: u64,
    producers: std::collections::BTreeSet<u64>,
}

pub(crate) fn run(args: &InspectArgs) -> anyhow::Result<()> {
    let file =
        File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = RecordingReader::new(BufReader::with_capacity(1 << 20, file));
    let mut recording = BTreeMap::new();
    let mut producers: BTreeMap<u64, BTreeMap<String, String>> = BTreeMap::new();
    let mut schemas: BTreeMap<(String, u32), SchemaStats> = BTreeMap::new();
    let mut losses: BTreeMap<u64, u64> = BTreeMap::new();
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
            Ok(Item::Loss { record, .. }) => {
                *losses.entry(record.producer_id).or_default() += record.lost;
            }
            Ok(Item::Metadata { name, fields }) => {
                if name == RECORDING_METADATA {
                    recording = fields;
                } else if name == PRODUCER_METADATA {
                    let id = fields.get("id").and_then(|v| v.parse().ok()).unwrap_or(0);
                    producers.insert(id, fields);
                }
            }
            Err(e) => damage = Some(e),
        }
    }
    let complete = reader.complete();
    let records: u64 = schemas.values().map(|s| s.records).sum();
    let first = schemas.values().map(|s| s.first_nanos).min();
    let last = schemas.values().map(|s| s.last_nanos).max();
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
            "schemas": schemas.iter().map(|((id, version), s)| json!({
                "id": id, "version": version, "records": s.records, "bytes": s.bytes,
                "first_nanos": s.first_nanos, "last_nanos": s.last_nanos,
                "producers": s.producers,
            })).collect::<Vec<_>>(),
            "losses": losses.iter().map(|(p, n)| json!({"producer_id": p, "lost": n})).collect::<Vec<_>>(),
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
        for (id, p) in &producers {
            let f = |k: &str| p.get(k).map_or("", String::as_str);
            let tags = [f("session_tag"), f("perf_tag")]
                .into_iter()
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join(",");
            writeln!(
                out,
                "{id:>4}  {:<20} pid {:<8} {}",
                f("name"),
                f("pid"),
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
        if losses.is_empty() {
            writeln!(out, "none: every record the producers wrote is in the file")?;
        }
        for (p, n) in &losses {
            writeln!(
                out,
                "producer {p}: {n} records overwritten before they could be recorded"
            )?;
        }
        writeln!(out, "\nDAMAGE")?;
        match (&damage, complete) {
            (None, true) => writeln!(out, "none: read through the footer, every CRC checked")?,
            (None, false) => writeln!(out, "none, but the file has no footer")?,
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
    match damage {
        Some(e) => Err(anyhow::anyhow!("{}: {e}", args.file.display())),
        None => Ok(()),
    }
}

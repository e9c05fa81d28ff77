//! `snapbus inspect`: what a recording holds — its origin, producers, schemas with counts,
//! sizes and time ranges, losses, and damage (where a cut or damaged file stops being
//! readable, and damaged chunks that were skipped). A damaged, cut or unfinished file is
//! described, then reported as an error (non-zero exit). PRODUCERS gives the span of each
//! producer's records in the file (first and last record time, and how many).
//!
//! LOSSES says, per producer, where its history in the file starts (`snapbus.history`: the
//! first record's sequence number and time, and how many earlier records are not in the file
//! and why), the loss records (gaps while recording) and what a failed write could not write
//! (`snapbus.cut`). It says "none" only when it knows: every producer's history starts at its
//! lane's first record (or nothing before it was overwritten), no gap, and the file is whole.
//!
//! The file is read once into [`Contents`]; the report is then written as text (one function
//! per section) or as one JSON object, and the damage, if any, becomes the error.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;

use anyhow::Context;
use serde_json::json;
use snapbus_consumers::recording::{
    CUT_METADATA, ChunkBytes, Damage, HISTORY_METADATA, Item, PRODUCER_METADATA,
    RECORDING_METADATA, ReadError, ReadErrorKind, RecordingReader,
};

use crate::bus::utc;
use crate::cli::InspectArgs;

/// The fields of a metadata record.
type Fields = BTreeMap<String, String>;

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

/// The lane key of a producer or history metadata record.
fn fields_lane_key(f: &Fields) -> String {
    let id = f.get("id").and_then(|v| v.parse().ok()).unwrap_or(0);
    let lane = f
        .get("lane_id")
        .and_then(|v| u64::from_str_radix(v, 16).ok());
    lane_key(lane, id)
}

/// Loss records of one producer.
#[derive(Default)]
struct Gaps {
    lost: u64,
    /// Records lost to garbage in the producer's ring.
    damaged: u64,
    gaps: u64,
    name: String,
    id: u64,
}

/// What a read through the file found.
#[derive(Default)]
struct Contents {
    /// The file's size in bytes.
    size_bytes: u64,
    /// Whether the reader got through the footer.
    complete: bool,
    recording: Fields,
    /// By lane key.
    producers: BTreeMap<String, Fields>,
    /// By lane key.
    histories: BTreeMap<String, Fields>,
    /// By lane key: the span of each producer's records in the file (first, last, records).
    spans: BTreeMap<String, (u64, u64, u64)>,
    schemas: BTreeMap<(String, u32), SchemaStats>,
    /// By lane key.
    losses: BTreeMap<String, Gaps>,
    cut: Option<Fields>,
    skipped: Vec<Damage>,
    /// Where reading stopped, if it did before the end.
    damage: Option<ReadError>,
    /// The intact chunks: bytes stored and uncompressed, codecs.
    chunks: ChunkBytes,
}

impl Contents {
    /// Reads the file through, skipping damaged chunks.
    fn read(path: &Path) -> anyhow::Result<Self> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut contents = Contents {
            size_bytes: file.metadata().map(|m| m.len()).unwrap_or(0),
            ..Contents::default()
        };
        let mut reader =
            RecordingReader::new(BufReader::with_capacity(1 << 20, file)).with_resync();
        for item in reader.by_ref() {
            match item {
                Ok(item) => contents.add(item),
                Err(e) => contents.damage = Some(e),
            }
        }
        contents.complete = reader.complete();
        contents.chunks = reader.chunk_bytes().clone();
        Ok(contents)
    }

    /// Counts one item of the file.
    fn add(&mut self, item: Item) {
        match item {
            Item::Message(m) => {
                let s = self
                    .schemas
                    .entry((m.channel.schema.id().to_owned(), m.channel.schema.version()))
                    .or_default();
                if s.records == 0 || m.t_nanos < s.first_nanos {
                    s.first_nanos = m.t_nanos;
                }
                s.last_nanos = s.last_nanos.max(m.t_nanos);
                s.records += 1;
                s.bytes += m.data.len() as u64;
                s.producers.insert(m.channel.producer_id);
                let span = self
                    .spans
                    .entry(lane_key(m.channel.lane_id, m.channel.producer_id))
                    .or_insert((m.t_nanos, m.t_nanos, 0));
                span.0 = span.0.min(m.t_nanos);
                span.1 = span.1.max(m.t_nanos);
                span.2 += 1;
            }
            Item::Loss {
                channel, record, ..
            } => {
                let g = self
                    .losses
                    .entry(lane_key(channel.lane_id, record.producer_id))
                    .or_default();
                g.lost += record.lost;
                g.damaged += record.damaged;
                g.gaps += u64::from(record.lost > 0);
                g.name.clone_from(&channel.producer);
                g.id = record.producer_id;
            }
            Item::Metadata { name, fields } => {
                if name == RECORDING_METADATA {
                    self.recording = fields;
                } else if name == PRODUCER_METADATA {
                    self.producers.insert(fields_lane_key(&fields), fields);
                } else if name == HISTORY_METADATA {
                    self.histories.insert(fields_lane_key(&fields), fields);
                } else if name == CUT_METADATA {
                    self.cut = Some(fields);
                }
            }
            Item::Damaged(d) => self.skipped.push(d),
        }
    }

    /// Records lost to garbage in the producers' rings (loss records' `damaged`).
    fn ring_damage(&self) -> u64 {
        self.losses.values().map(|g| g.damaged).sum()
    }

    /// Records of every schema.
    fn records(&self) -> u64 {
        self.schemas.values().map(|s| s.records).sum()
    }

    /// The first and last record times.
    fn time_range(&self) -> (Option<u64>, Option<u64>) {
        (
            self.schemas.values().map(|s| s.first_nanos).min(),
            self.schemas.values().map(|s| s.last_nanos).max(),
        )
    }

    /// Whether the file is read through its footer with nothing damaged, skipped or cut.
    fn whole(&self) -> bool {
        self.complete && self.damage.is_none() && self.skipped.is_empty() && self.cut.is_none()
    }

    /// The last line of LOSSES: whether records are missing, given the history lines.
    fn loss_verdict(&self, history_lines: &[(String, bool)]) -> String {
        let history_known =
            !self.histories.is_empty() && self.histories.len() >= self.producers.len();
        let history_complete =
            history_known && history_lines.iter().all(|(_, from_start)| *from_start);
        if !self.whole() {
            "not known: the file is cut or damaged (see DAMAGE): records that were not written \
             or cannot be read are missing"
                .to_owned()
        } else if self.records() == 0 {
            "unknown: the file holds no records".to_owned()
        } else if !history_known {
            "not known: the file does not say where each producer's history starts (written by \
             an older snapbus)"
                .to_owned()
        } else if self.losses.values().any(|g| g.lost > 0) || !history_complete {
            "some: see above".to_owned()
        } else if self.ring_damage() > 0 {
            format!(
                "some: {} records lost to garbage in the producers' rings (see DAMAGE)",
                self.ring_damage()
            )
        } else if self
            .histories
            .values()
            .any(|h| h.get("start").is_some_and(|s| s == "continued"))
        {
            "none in this part: every record since the previous part of the recording is in the \
             file"
                .to_owned()
        } else {
            "none: every record the producers wrote is in the file".to_owned()
        }
    }
}

pub(crate) fn run(args: &InspectArgs) -> anyhow::Result<()> {
    let contents = Contents::read(&args.file)?;
    let history_lines = history_lines(&contents.producers, &contents.histories);
    let verdict = contents.loss_verdict(&history_lines);
    let mut out = std::io::stdout().lock();
    if args.json {
        write_json(&mut out, &args.file, &contents, &verdict)?;
    } else {
        write_summary(&mut out, &args.file, &contents)?;
        write_producers(&mut out, &contents)?;
        write_schemas(&mut out, &contents)?;
        write_losses(&mut out, &contents, &history_lines, &verdict)?;
        write_damage(&mut out, &contents)?;
    }
    out.flush()?;
    damage_error(&args.file, contents)
}

/// The whole report as one JSON object on one line.
fn write_json(
    out: &mut impl Write,
    path: &Path,
    c: &Contents,
    verdict: &str,
) -> anyhow::Result<()> {
    let (first, last) = c.time_range();
    let v = json!({
        "file": path.display().to_string(),
        "bytes": c.size_bytes,
        "complete": c.complete,
        "recording": c.recording,
        "records": c.records(),
        "compression": json!({
            "codecs": c.chunks.codecs, "chunks": c.chunks.chunks,
            "stored_bytes": c.chunks.stored, "uncompressed_bytes": c.chunks.uncompressed,
            "ratio": c.chunks.ratio(),
        }),
        "first_nanos": first,
        "last_nanos": last,
        "producers": c.producers.values().collect::<Vec<_>>(),
        "producer_spans": c.spans.iter().map(|(lane, &(a, b, n))| json!({
            "lane": lane, "records": n, "first_nanos": a, "last_nanos": b,
            "span_secs": (b - a) as f64 / 1e9,
        })).collect::<Vec<_>>(),
        "histories": c.histories.values().collect::<Vec<_>>(),
        "schemas": c.schemas.iter().map(|((id, version), s)| json!({
            "id": id, "version": version, "records": s.records, "bytes": s.bytes,
            "first_nanos": s.first_nanos, "last_nanos": s.last_nanos,
            "producers": s.producers,
        })).collect::<Vec<_>>(),
        "losses": c.losses.iter().map(|(lane, g)| json!({
            "producer_id": g.id, "lane_id": lane, "lost": g.lost, "gaps": g.gaps,
            "damaged": g.damaged,
        })).collect::<Vec<_>>(),
        "ring_damage": c.ring_damage(),
        "loss_verdict": verdict,
        "cut": c.cut,
        "skipped": c.skipped.iter().map(|d| json!({
            "offset": d.offset, "bytes": d.len, "error": d.error,
            "records": d.held.as_ref().and_then(|h| h.records),
            "first_nanos": d.held.as_ref().map(|h| h.first_nanos),
            "last_nanos": d.held.as_ref().map(|h| h.last_nanos),
        })).collect::<Vec<_>>(),
        "damage": c.damage.as_ref().map(|e| json!({"offset": e.offset, "error": e.kind.to_string()})),
    });
    writeln!(out, "{v}")?;
    Ok(())
}

/// The head of the text report: file, origin, time range, record count.
fn write_summary(out: &mut impl Write, path: &Path, c: &Contents) -> anyhow::Result<()> {
    let get = |k: &str| c.recording.get(k).map_or("?", String::as_str);
    writeln!(
        out,
        "file       {} ({} bytes)",
        path.display(),
        c.size_bytes
    )?;
    writeln!(
        out,
        "recording  {} of bus '{}', format {}, snapbus {}",
        get("source"),
        get("bus"),
        get("format_version"),
        get("snapbus_version")
    )?;
    match c.time_range() {
        (Some(a), Some(b)) => writeln!(
            out,
            "time       {} → {} ({:.3} s)",
            utc(a),
            utc(b),
            (b - a) as f64 / 1e9
        )?,
        _ => writeln!(out, "time       (no records)")?,
    }
    writeln!(out, "records    {}", c.records())?;
    writeln!(out, "chunks     {}", chunk_line(&c.chunks))?;
    Ok(())
}

/// The chunks' codecs and compression ratio (stored / uncompressed bytes).
fn chunk_line(c: &ChunkBytes) -> String {
    if c.chunks == 0 {
        return "(none read)".into();
    }
    let codecs = c.codecs.iter().cloned().collect::<Vec<_>>().join("+");
    let smaller = if c.stored == 0 || c.stored == c.uncompressed {
        String::new()
    } else {
        format!(", {:.1}x smaller", c.uncompressed as f64 / c.stored as f64)
    };
    format!(
        "{}, compression {codecs}: {} bytes stored for {} uncompressed (ratio {:.3}{smaller})",
        c.chunks,
        c.stored,
        c.uncompressed,
        c.ratio()
    )
}

/// PRODUCERS: a line per producer metadata record.
fn write_producers(out: &mut impl Write, c: &Contents) -> anyhow::Result<()> {
    writeln!(out, "\nPRODUCERS")?;
    for (lane, p) in &c.producers {
        let f = |k: &str| p.get(k).map_or("", String::as_str);
        let span = match c.spans.get(lane) {
            Some(&(a, b, n)) => format!(
                "{n} records, {} → {} ({:.3} s)",
                utc(a),
                utc(b),
                (b - a) as f64 / 1e9
            ),
            None => "no records".into(),
        };
        let tags = [f("session_tag"), f("perf_tag")]
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join(",");
        writeln!(
            out,
            "{:>4}  {:<20} pid {:<8} lane {:<16}  {}{}{span}",
            f("id"),
            f("name"),
            f("pid"),
            f("lane_id"),
            tags,
            if tags.is_empty() { "" } else { "  " },
        )?;
    }
    Ok(())
}

/// SCHEMAS: the table of schemas with counts, sizes and time spans.
fn write_schemas(out: &mut impl Write, c: &Contents) -> anyhow::Result<()> {
    writeln!(out, "\nSCHEMAS")?;
    writeln!(
        out,
        "{:<32} {:>4} {:>10} {:>12} {:>10}  PRODUCERS",
        "ID", "VER", "RECORDS", "BYTES", "SECONDS"
    )?;
    for ((id, version), s) in &c.schemas {
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
    Ok(())
}

/// LOSSES: where each producer's history starts, the gaps, what a failed write lost, and the
/// verdict.
fn write_losses(
    out: &mut impl Write,
    c: &Contents,
    history_lines: &[(String, bool)],
    verdict: &str,
) -> anyhow::Result<()> {
    writeln!(out, "\nLOSSES")?;
    for (line, _) in history_lines {
        writeln!(out, "{line}")?;
    }
    for g in c.losses.values().filter(|g| g.lost > 0) {
        writeln!(
            out,
            "producer {} '{}': {} records overwritten before they could be recorded ({} gap{})",
            g.id,
            g.name,
            g.lost,
            g.gaps,
            if g.gaps == 1 { "" } else { "s" }
        )?;
    }
    if let Some(cut) = &c.cut {
        writeln!(out, "{}", cut_line(cut))?;
    }
    writeln!(out, "{verdict}")?;
    Ok(())
}

/// DAMAGE: the skipped parts, the cut, and where reading stopped (or that it did not).
fn write_damage(out: &mut impl Write, c: &Contents) -> anyhow::Result<()> {
    writeln!(out, "\nDAMAGE")?;
    for g in c.losses.values().filter(|g| g.damaged > 0) {
        writeln!(
            out,
            "producer {} '{}': {} records lost to garbage in its ring (skipped by the reader; \
             the file itself is sound)",
            g.id, g.name, g.damaged
        )?;
    }
    for d in &c.skipped {
        writeln!(out, "skipped: {d}")?;
    }
    if let Some(cut) = &c.cut {
        writeln!(
            out,
            "cut: the writer failed ({}) and ended the file early",
            cut.get("error").map_or("?", String::as_str)
        )?;
    }
    match (&c.damage, c.complete) {
        (None, true) if c.skipped.is_empty() && c.cut.is_none() && c.ring_damage() == 0 => {
            writeln!(out, "none: read through the footer, every CRC checked")?
        }
        (None, true) if c.skipped.is_empty() && c.cut.is_none() => {
            writeln!(out, "the file: read through the footer, every CRC checked")?
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
                "{what} at byte {} of {}: {}\neverything before it ({} records) was read",
                e.offset,
                c.size_bytes,
                e.kind,
                c.records()
            )?;
        }
    }
    Ok(())
}

/// The error the command ends with: where reading stopped, else the skipped parts, else the
/// cut; `Ok` for a whole file.
fn damage_error(path: &Path, c: Contents) -> anyhow::Result<()> {
    if let Some(e) = c.damage {
        return Err(anyhow::anyhow!("{}: {e}", path.display()));
    }
    if let Some(d) = c.skipped.first() {
        let mut skipped = Skipped::default();
        c.skipped.iter().for_each(|d| skipped.add(d));
        anyhow::bail!(
            "{}: {} (the first {d})",
            path.display(),
            skipped.line("read")
        );
    }
    if let Some(cut) = c.cut {
        anyhow::bail!("{}: {}", path.display(), cut_line(&cut));
    }
    Ok(())
}

/// "part was" or "parts were", for `n` damaged parts skipped (inspect's and export's errors).
pub(crate) fn parts_were(n: u64) -> &'static str {
    if n == 1 { "part was" } else { "parts were" }
}

/// The damaged parts a reading command skipped, and the records in them as far as the file
/// says (a damaged chunk's message indexes, the records of channels only a damaged part
/// declared): what its closing error states, truthfully.
#[derive(Debug, Default)]
pub(crate) struct Skipped {
    pub(crate) parts: u64,
    /// Records the skipped parts held, where the file says how many.
    records: u64,
    /// Parts whose records are not known (a range skipped to resynchronise).
    unknown: u64,
}

impl Skipped {
    pub(crate) fn add(&mut self, d: &snapbus_consumers::recording::Damage) {
        self.parts += 1;
        match d.held.as_ref().and_then(|h| h.records) {
            Some(n) => self.records += n,
            None => self.unknown += 1,
        }
    }

    /// "N damaged parts were skipped: they held M records, which were not VERB (and K held
    /// records not counted); every other record was VERB".
    pub(crate) fn line(&self, verb: &str) -> String {
        let mut s = format!(
            "{} damaged {} skipped (see above): they held {} record{}, which {} not {verb}",
            self.parts,
            parts_were(self.parts),
            self.records,
            if self.records == 1 { "" } else { "s" },
            if self.records == 1 { "was" } else { "were" },
        );
        if self.unknown > 0 {
            s.push_str(&format!(
                ", and {} skipped range{} held an unknown number of records",
                self.unknown,
                if self.unknown == 1 { "" } else { "s" }
            ));
        }
        s.push_str(&format!("; every record outside them was {verb}"));
        s
    }
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

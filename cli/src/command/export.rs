//! `snapbus export`: converts a recording to JSON lines, CSV, Parquet, or MCAP with JSON
//! messages.
//!
//! The recording is read once, front to back, with constant memory (Parquet keeps at most one
//! batch of rows per schema). Loss records are exported with every `--schema` filter (a gap
//! can hide records of any schema): as `{"loss": …}` lines (jsonl), a `snapbus.loss` table
//! (csv, parquet) or a `snapbus.loss` topic (mcap-json). A damaged or cut recording is exported
//! up to the damage, and then the command fails with the reader's error, which names the byte
//! offset. A payload that does not decode is written with its error in jsonl (as `echo` does)
//! and skipped by the other formats; either way the command fails at the end, saying how many.
//!
//! A `--schema` filter is checked against the schemas of the recording: if no glob matches
//! any, the command fails naming the schemas the recording holds, and leaves no output behind;
//! a glob that matches nothing next to ones that match is a warning.
//!
//! Output that exists is refused unless `--force`; with `--force` a file is overwritten, and in
//! a directory (csv, parquet) the files of the export are overwritten and other files are left
//! alone.

mod columns;
mod jsonl;
mod mcap_json;
#[cfg(feature = "parquet")]
mod parquet_dir;
mod tables;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use snapbus_consumers::recording::{ChannelInfo, Item, LossRecord, Message, RecordingReader};
use snapbus_schemas::{DecodeError, Snapshot, Value, Wire, decode};

use crate::cli::{ExportArgs, ExportFormat};

/// Where the records go.
trait Sink {
    /// A record whose payload decoded to `value`.
    fn message(&mut self, m: &Message, value: &Value<'_>) -> anyhow::Result<()>;
    /// A record whose payload did not decode. Returns whether it was written anyway (by
    /// default it is not).
    fn undecodable(&mut self, m: &Message, err: &DecodeError) -> anyhow::Result<bool> {
        let _ = (m, err);
        Ok(false)
    }
    /// A loss record.
    fn loss(
        &mut self,
        channel: &Arc<ChannelInfo>,
        t_nanos: u64,
        record: &LossRecord,
    ) -> anyhow::Result<()>;
    /// A metadata record of the recording.
    fn metadata(&mut self, name: &str, fields: &BTreeMap<String, String>) -> anyhow::Result<()> {
        let _ = (name, fields);
        Ok(())
    }
    /// Completes the output; returns the files written.
    fn finish(self: Box<Self>) -> anyhow::Result<Vec<PathBuf>>;
}

/// A loss record as a value of its schema, for the sinks that write decoded values.
fn loss_value(record: &LossRecord) -> anyhow::Result<Value<'static>> {
    let bytes = record.encode_to_vec().context("encoding a loss record")?;
    let value =
        decode(LossRecord::descriptor().root(), &bytes).context("decoding a loss record")?;
    Ok(value.into_owned())
}

/// Runs `snapbus export`.
pub(crate) fn run(args: &ExportArgs) -> anyhow::Result<()> {
    if args.format == ExportFormat::Parquet && !cfg!(feature = "parquet") {
        // Before anything is opened or created.
        bail!(NO_PARQUET);
    }
    let globs = crate::bus::globs(&args.schemas)?;
    let input =
        File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let mut reader = RecordingReader::new(input).with_resync();
    // A file that is not a recording at all fails before any output is created.
    let first = match reader.next() {
        Some(Err(e)) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("reading {}", args.file.display()));
        }
        first => first,
    };
    let dir_output = matches!(args.format, ExportFormat::Csv | ExportFormat::Parquet);
    let output_existed = args.output.exists();
    prepare_output(&args.file, &args.output, dir_output, args.force)?;
    let mut sink: Box<dyn Sink> = match args.format {
        ExportFormat::Jsonl => Box::new(jsonl::Jsonl::create(&args.output)?),
        ExportFormat::Csv => Box::new(tables::Tables::new(&args.output, tables::csv_format())),
        ExportFormat::Parquet => parquet_sink(&args.output)?,
        ExportFormat::McapJson => Box::new(mcap_json::McapJson::create(&args.output)?),
    };

    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    // Every schema in the recording, and which globs matched one.
    let mut present: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut glob_matched = vec![false; globs.len()];
    let mut exported = 0u64;
    let mut losses = 0u64;
    let mut bad = Undecodable::default();
    let mut damage = None;
    let mut skipped = 0u64;
    let mut cut = None;
    for item in first.into_iter().chain(reader) {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                damage = Some(e);
                break;
            }
        };
        match item {
            Item::Message(m) => {
                let id = m.channel.schema.id();
                if !present.contains(id) {
                    present.insert(id.to_owned());
                }
                let mut wanted = globs.is_empty();
                for (g, matched) in globs.iter().zip(&mut glob_matched) {
                    if g.matches(id) {
                        (wanted, *matched) = (true, true);
                    }
                }
                if !wanted {
                    continue;
                }
                let written = match decode(m.channel.schema.root(), &m.data) {
                    Ok(value) => {
                        sink.message(&m, &value)?;
                        true
                    }
                    Err(e) => {
                        let written = sink.undecodable(&m, &e)?;
                        bad.note(&m, &e);
                        written
                    }
                };
                if written {
                    exported += 1;
                    match counts.get_mut(id) {
                        Some(n) => *n += 1,
                        None => {
                            counts.insert(id.to_owned(), 1);
                        }
                    }
                }
            }
            Item::Loss {
                channel,
                t_nanos,
                record,
            } => {
                sink.loss(&channel, t_nanos, &record)?;
                losses += 1;
            }
            Item::Metadata { name, fields } => {
                if name == snapbus_consumers::recording::CUT_METADATA {
                    cut = Some(fields.clone());
                }
                sink.metadata(&name, &fields)?;
            }
            Item::Damaged(d) => {
                eprintln!("snapbus export: {}: {d}", args.file.display());
                skipped += 1;
            }
        }
    }
    let files = sink.finish()?;
    let unmatched: Vec<&str> = globs
        .iter()
        .zip(&glob_matched)
        .filter(|(_, m)| !**m)
        .map(|(g, _)| g.as_str())
        .collect();
    if !globs.is_empty() && unmatched.len() == globs.len() && damage.is_none() {
        // Nothing matched: the (empty) output is not left behind to be mistaken for data.
        remove_output(&args.output, dir_output, output_existed, &files);
        let ids: Vec<String> = present.into_iter().collect();
        bail!(
            "{}; nothing was exported",
            crate::bus::no_schema_matches(&unmatched, &ids, "the recording")
        );
    }
    let line = summary(&args.output, dir_output, exported, &counts, losses, &files);
    eprintln!("{line}");
    if !unmatched.is_empty() {
        let ids: Vec<String> = present.into_iter().collect();
        eprintln!(
            "snapbus export: warning: {}",
            crate::bus::no_schema_matches(&unmatched, &ids, "the recording")
        );
    }
    if let Some(e) = damage {
        return Err(anyhow::Error::new(e)).with_context(|| {
            format!(
                "{} is damaged; the {exported} records before the damage were exported",
                args.file.display()
            )
        });
    }
    if skipped > 0 {
        bail!(
            "{} is damaged: {skipped} damaged part{} skipped (see above); every other record \
             was exported",
            args.file.display(),
            if skipped == 1 { " was" } else { "s were" }
        );
    }
    if let Some(c) = cut {
        bail!(
            "{} is incomplete: {}",
            args.file.display(),
            crate::command::inspect::cut_line(&c)
        );
    }
    if let Some(first) = bad.first {
        bail!(
            "{} record{} could not be decoded ({}); the first: {first}",
            bad.count,
            if bad.count == 1 { "" } else { "s" },
            if matches!(args.format, ExportFormat::Jsonl) {
                "they are in the output with a \"decode_error\" payload"
            } else {
                "they are not in the output"
            }
        );
    }
    Ok(())
}

/// Records whose payload did not decode.
#[derive(Default)]
struct Undecodable {
    count: u64,
    /// A description of the first.
    first: Option<String>,
}

impl Undecodable {
    fn note(&mut self, m: &Message, err: &DecodeError) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(format!(
                "schema {} v{} at t_nanos {} (chunk at byte offset {}): {err}",
                m.channel.schema.id(),
                m.channel.schema.version(),
                m.t_nanos,
                m.offset
            ));
        }
    }
}

#[cfg(feature = "parquet")]
fn parquet_sink(out: &Path) -> anyhow::Result<Box<dyn Sink>> {
    Ok(Box::new(tables::Tables::new(out, parquet_dir::format())))
}

#[cfg(not(feature = "parquet"))]
fn parquet_sink(_out: &Path) -> anyhow::Result<Box<dyn Sink>> {
    bail!(NO_PARQUET)
}

/// Why `--format parquet` fails in a build without the `parquet` feature.
const NO_PARQUET: &str = "this snapbus was built without Parquet support; rebuild it with \
                          `--features parquet` (e.g. `cargo install --path cli --features \
                          parquet`), or export to csv";

/// Refuses existing output unless `force`, refuses writing over the input, and creates the
/// output directory.
fn prepare_output(input: &Path, out: &Path, dir: bool, force: bool) -> anyhow::Result<()> {
    if let Ok(meta) = std::fs::metadata(out) {
        if !force {
            bail!(
                "{} exists; choose another path, or pass --force to overwrite it",
                out.display()
            );
        }
        if dir && !meta.is_dir() {
            bail!("{} exists and is not a directory", out.display());
        }
        if !dir && meta.is_dir() {
            bail!(
                "{} is a directory; this format writes one file",
                out.display()
            );
        }
        if same_file(input, out) {
            bail!("{} is the recording being exported", out.display());
        }
    }
    if dir {
        crate::bus::create_dir(out).with_context(|| format!("creating {}", out.display()))?;
    }
    Ok(())
}

/// Removes what an export that found nothing to export wrote: its files, and the output
/// directory if this export created it and it is empty now.
fn remove_output(out: &Path, dir: bool, existed: bool, files: &[PathBuf]) {
    if dir {
        for f in files {
            let _ = std::fs::remove_file(f);
        }
        if !existed {
            let _ = std::fs::remove_dir(out);
        }
    } else {
        let _ = std::fs::remove_file(out);
    }
}

/// Whether two paths name the same file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The one line printed at the end: records per schema, losses, files.
fn summary(
    out: &Path,
    dir: bool,
    exported: u64,
    counts: &BTreeMap<String, u64>,
    losses: u64,
    files: &[PathBuf],
) -> String {
    let per_schema = counts
        .iter()
        .map(|(id, n)| format!("{id} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut s = format!(
        "snapbus export: {exported} record{}",
        if exported == 1 { "" } else { "s" }
    );
    if !per_schema.is_empty() {
        s.push_str(&format!(" ({per_schema})"));
    }
    if losses > 0 {
        s.push_str(&format!(
            ", {losses} loss record{}",
            if losses == 1 { "" } else { "s" }
        ));
    }
    if dir {
        let names = files
            .iter()
            .filter_map(|f| f.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!(
            " → {} file{} in {}",
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            out.display()
        ));
        if !names.is_empty() {
            s.push_str(&format!(": {names}"));
        }
    } else {
        s.push_str(&format!(" → {}", out.display()));
    }
    s
}

//! `snapbus export`: converts a recording to JSON lines, CSV, Parquet, or MCAP with JSON
//! messages, or sends it to an OTLP receiver with its original timestamps (`export/otlp.rs`).
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

mod jsonl;
mod mcap_json;
#[cfg(feature = "otlp")]
mod otlp;
#[cfg(feature = "parquet")]
mod parquet_dir;
mod tables;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::recording::{
    CUT_METADATA, ChannelInfo, Item, LossRecord, Message, ReadError, RecordingReader,
};
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
    fn loss(&mut self, loss: &Loss<'_>) -> anyhow::Result<()>;
    /// A metadata record of the recording.
    fn metadata(&mut self, name: &str, fields: &BTreeMap<String, String>) -> anyhow::Result<()> {
        let _ = (name, fields);
        Ok(())
    }
    /// Completes the output; returns the files written.
    fn finish(self: Box<Self>) -> anyhow::Result<Vec<PathBuf>>;
}

/// A loss record of the recording, on the channel whose producer it speaks of.
struct Loss<'a> {
    channel: &'a Arc<ChannelInfo>,
    t_nanos: u64,
    record: &'a LossRecord,
}

impl Loss<'_> {
    /// The record as a value of its schema, for the sinks that write decoded values.
    fn value(&self) -> anyhow::Result<Value<'static>> {
        let bytes = self
            .record
            .encode_to_vec()
            .context("encoding a loss record")?;
        let value =
            decode(LossRecord::descriptor().root(), &bytes).context("decoding a loss record")?;
        Ok(value.into_owned())
    }
}

/// Opens the recording `file` and reads its first item, so that a file that is not a
/// recording at all fails before anything is created or sent; returns all its items.
fn open_recording(
    file: &Path,
) -> anyhow::Result<impl Iterator<Item = Result<Item, ReadError>> + use<>> {
    let input = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut reader = RecordingReader::new(input).with_resync();
    let first = match reader.next() {
        Some(Err(e)) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("reading {}", file.display()));
        }
        first => first,
    };
    Ok(first.into_iter().chain(reader))
}

/// Runs `snapbus export`: checks the request and opens the recording, prepares the output,
/// streams the records into the sink ([`Tally::read`]), then reports and checks the end
/// ([`Tally::finish`]).
pub(crate) fn run(args: &ExportArgs) -> anyhow::Result<()> {
    if args.format == ExportFormat::Parquet && !cfg!(feature = "parquet") {
        // Before anything is opened or created.
        bail!(NO_PARQUET);
    }
    if args.format == ExportFormat::Rrd {
        return crate::command::rerun::export(args);
    }
    let globs = crate::bus::globs(&args.schemas)?;
    if args.format == ExportFormat::Otlp {
        #[cfg(feature = "otlp")]
        return otlp::run(args, &globs);
        #[cfg(not(feature = "otlp"))]
        bail!("this snapbus was built without OTLP support (cargo feature `otlp`)");
    }
    let Some(out) = args.output.as_deref() else {
        bail!("--output is required with --format {:?}", args.format);
    };
    if args.endpoint.is_some() {
        bail!("--endpoint is for --format otlp only");
    }
    let items = open_recording(&args.file)?;
    let output = Output {
        dir: matches!(args.format, ExportFormat::Csv | ExportFormat::Parquet),
        existed: out.exists(),
    };
    prepare_output(&args.file, out, output.dir, args.force)?;
    let mut sink = create_sink(args, out)?;
    let mut tally = Tally::new(&globs);
    tally.read(items, sink.as_mut(), &args.file)?;
    let files = sink.finish()?;
    tally.finish(args, out, output, &files)
}

/// The sink of `args.format`, writing to `out`.
fn create_sink(args: &ExportArgs, out: &Path) -> anyhow::Result<Box<dyn Sink>> {
    Ok(match args.format {
        ExportFormat::Jsonl => Box::new(jsonl::Jsonl::create(out)?),
        ExportFormat::Csv => Box::new(tables::Tables::new(out, tables::csv_format())),
        ExportFormat::Parquet => parquet_sink(out)?,
        ExportFormat::McapJson => Box::new(mcap_json::McapJson::create(out, false)?),
        ExportFormat::Foxglove if cfg!(feature = "foxglove") => {
            Box::new(mcap_json::McapJson::create(out, true)?)
        }
        ExportFormat::Foxglove => {
            bail!("this snapbus was built without Foxglove support (cargo feature `foxglove`)")
        }
        ExportFormat::Otlp => bail!("--format otlp writes no file"),
        ExportFormat::Rrd => bail!("the rrd export is the rerun bridge's (command/rerun.rs)"),
    })
}

/// The kind of output, and whether it was there before the export.
#[derive(Clone, Copy)]
struct Output {
    /// A directory of files (csv, parquet) rather than one file.
    dir: bool,
    /// Whether the output path existed before the export.
    existed: bool,
}

/// What the export read and wrote.
struct Tally<'a> {
    /// The `--schema` globs (none: every schema).
    globs: &'a [Glob],
    /// Records written, per schema.
    counts: BTreeMap<String, u64>,
    /// Every schema in the recording.
    present: BTreeSet<String>,
    /// Which `--schema` globs matched a schema of the recording.
    glob_matched: Vec<bool>,
    exported: u64,
    losses: u64,
    bad: Undecodable,
    /// Where reading stopped, if it did before the end.
    damage: Option<ReadError>,
    /// Damaged parts skipped.
    skipped: crate::command::inspect::Skipped,
    /// The `snapbus.cut` record, if the writer failed.
    cut: Option<BTreeMap<String, String>>,
}

impl<'a> Tally<'a> {
    fn new(globs: &'a [Glob]) -> Self {
        Tally {
            globs,
            counts: BTreeMap::new(),
            present: BTreeSet::new(),
            glob_matched: vec![false; globs.len()],
            exported: 0,
            losses: 0,
            bad: Undecodable::default(),
            damage: None,
            skipped: crate::command::inspect::Skipped::default(),
            cut: None,
        }
    }

    /// Writes every item to `sink` until the end or the first read error (kept in `damage`).
    fn read(
        &mut self,
        items: impl Iterator<Item = Result<Item, ReadError>>,
        sink: &mut dyn Sink,
        file: &Path,
    ) -> anyhow::Result<()> {
        for item in items {
            let item = match item {
                Ok(item) => item,
                Err(e) => {
                    self.damage = Some(e);
                    break;
                }
            };
            match item {
                Item::Message(m) => self.message(&m, sink)?,
                Item::Loss {
                    channel,
                    t_nanos,
                    record,
                } => {
                    sink.loss(&Loss {
                        channel: &channel,
                        t_nanos,
                        record: &record,
                    })?;
                    self.losses += 1;
                }
                Item::Metadata { name, fields } => {
                    if name == CUT_METADATA {
                        self.cut = Some(fields.clone());
                    }
                    sink.metadata(&name, &fields)?;
                }
                Item::Damaged(d) => {
                    snapbus_bus::say!("snapbus export: {}: {d}", file.display());
                    self.skipped.add(&d);
                }
            }
        }
        Ok(())
    }

    /// Writes a record to `sink` if its schema is wanted (decoded, or as the sink writes
    /// undecodable ones).
    fn message(&mut self, m: &Message, sink: &mut dyn Sink) -> anyhow::Result<()> {
        let id = m.channel.schema.id();
        if !self.present.contains(id) {
            self.present.insert(id.to_owned());
        }
        let mut wanted = self.globs.is_empty();
        for (g, matched) in self.globs.iter().zip(&mut self.glob_matched) {
            if g.matches(id) {
                (wanted, *matched) = (true, true);
            }
        }
        if !wanted {
            return Ok(());
        }
        let written = match m.channel.schema.decode(&m.data) {
            Ok(value) => {
                sink.message(m, &value)?;
                true
            }
            Err(e) => {
                let written = sink.undecodable(m, &e)?;
                self.bad.note(m, &e);
                written
            }
        };
        if written {
            self.exported += 1;
            match self.counts.get_mut(id) {
                Some(n) => *n += 1,
                None => {
                    self.counts.insert(id.to_owned(), 1);
                }
            }
        }
        Ok(())
    }

    /// The end of the export, after the sink finished writing `files`: fails (removing the
    /// output) if no `--schema` glob matched, prints the summary and a warning for globs that
    /// matched nothing, then fails for damage, skipped parts, a cut, or undecodable records.
    fn finish(
        self,
        args: &ExportArgs,
        out: &Path,
        output: Output,
        files: &[PathBuf],
    ) -> anyhow::Result<()> {
        let unmatched: Vec<&str> = self
            .globs
            .iter()
            .zip(&self.glob_matched)
            .filter(|(_, m)| !**m)
            .map(|(g, _)| g.as_str())
            .collect();
        let no_match = (!unmatched.is_empty()).then(|| {
            let ids: Vec<String> = self.present.iter().cloned().collect();
            crate::bus::no_schema_matches(&unmatched, &ids, "the recording")
        });
        if let Some(no_match) = &no_match
            && unmatched.len() == self.globs.len()
            && self.damage.is_none()
        {
            // Nothing matched: the (empty) output is not left behind to be mistaken for data.
            remove_output(out, output.dir, output.existed, files);
            bail!("{no_match}; nothing was exported");
        }
        let line = summary(
            out,
            output.dir,
            self.exported,
            &self.counts,
            self.losses,
            files,
        );
        snapbus_bus::say!("{line}");
        if let Some(no_match) = &no_match {
            snapbus_bus::say!("snapbus export: warning: {no_match}");
        }
        self.damage_error(args)
    }

    /// The error for what could not be exported: where reading stopped, else the skipped
    /// parts, else the cut, else the undecodable records; `Ok` if everything was exported.
    fn damage_error(self, args: &ExportArgs) -> anyhow::Result<()> {
        let file = args.file.display();
        if let Some(e) = self.damage {
            let exported = self.exported;
            return Err(anyhow::Error::new(e)).with_context(|| {
                format!("{file} is damaged; the {exported} records before the damage were exported")
            });
        }
        if self.skipped.parts > 0 {
            bail!(
                "{file} is damaged: {} records were exported; {}",
                self.exported,
                self.skipped.line("exported")
            );
        }
        if let Some(c) = self.cut {
            bail!(
                "{file} is incomplete: {}",
                crate::command::inspect::cut_line(&c)
            );
        }
        if let Some(first) = self.bad.first {
            bail!(
                "{} record{} could not be decoded ({}); the first: {first}",
                self.bad.count,
                if self.bad.count == 1 { "" } else { "s" },
                if matches!(args.format, ExportFormat::Jsonl) {
                    "they are in the output with a \"decode_error\" payload"
                } else {
                    "they are not in the output"
                }
            );
        }
        Ok(())
    }
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
const NO_PARQUET: &str = "this snapbus was built without Parquet support \
                          (--no-default-features); rebuild it with the default features \
                          (`cargo install --path cli`), or export to csv";

/// Refuses existing output unless `force`, refuses writing over the input, and creates the
/// output directory.
fn prepare_output(input: &Path, out: &Path, dir: bool, force: bool) -> anyhow::Result<()> {
    if !dir {
        // Absent, or (with --force) a file or symlink of ours: never another user's.
        snapbus_consumers::output::check(out, force)?;
    } else {
        snapbus_consumers::output::check_dir(out)?;
    }
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

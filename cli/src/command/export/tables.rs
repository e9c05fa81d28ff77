//! A directory of tables, one file per schema (csv and parquet).
//!
//! A schema's file is `<schema id>.<ext>`. When a recording holds several versions of one
//! schema id, each version has its own columns and its own file, `<id>.v<N>.<ext>` (the file
//! already written as `<id>.<ext>` is renamed when the second version appears), and two
//! different descriptors with the same id and version (a producer bug) are told apart by
//! their fingerprint, `<id>.v<N>.<fingerprint>.<ext>`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use snapbus_consumers::recording::{LossRecord, Message};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Value};

use super::{Loss, Sink};
use snapbus_consumers::table::{Cell, Fixed, Plan};

/// Writes the rows of one table file.
pub(super) trait TableWriter {
    /// Appends one row (one cell per column of the plan).
    fn row(&mut self, cells: &[Cell<'_>]) -> anyhow::Result<()>;
    /// Writes what is buffered and completes the file.
    fn finish(self: Box<Self>) -> anyhow::Result<()>;
}

/// Creates the writer of a new table file.
pub(super) type Create =
    fn(path: &Path, schema: &SchemaDescriptor, plan: &Plan) -> anyhow::Result<Box<dyn TableWriter>>;

/// A table file format.
pub(super) struct Format {
    /// The file name extension.
    pub(super) ext: &'static str,
    /// Creates a table file.
    pub(super) create: Create,
    /// A column per element of short fixed arrays of numbers (CSV), or a list column.
    pub(super) split_arrays: bool,
}

/// (schema id, version, fingerprint).
type Key = (String, u32, u64);

struct Table {
    key: Key,
    stem: String,
    plan: Plan,
    writer: Box<dyn TableWriter>,
}

/// One table per schema in a directory.
pub(super) struct Tables {
    dir: PathBuf,
    format: Format,
    tables: Vec<Table>,
    by_key: HashMap<Key, usize>,
    by_channel: HashMap<u16, usize>,
}

impl Tables {
    /// Tables in `dir` (which exists).
    pub(super) fn new(dir: &Path, format: Format) -> Tables {
        Tables {
            dir: dir.to_owned(),
            format,
            tables: Vec::new(),
            by_key: HashMap::new(),
            by_channel: HashMap::new(),
        }
    }

    fn path(&self, stem: &str) -> PathBuf {
        self.dir.join(format!("{stem}.{}", self.format.ext))
    }

    /// The table of `schema` (recorded on `channel`), created on first use.
    fn table(&mut self, channel: u16, schema: &SchemaDescriptor) -> anyhow::Result<usize> {
        if let Some(&i) = self.by_channel.get(&channel) {
            return Ok(i);
        }
        let key: Key = (
            schema.id().to_owned(),
            schema.version(),
            schema.fingerprint(),
        );
        let i = match self.by_key.get(&key) {
            Some(&i) => i,
            None => self.add(key, schema)?,
        };
        self.by_channel.insert(channel, i);
        Ok(i)
    }

    fn add(&mut self, key: Key, schema: &SchemaDescriptor) -> anyhow::Result<usize> {
        // Name every table of this id again: a second version renames the first one's file.
        let mut same_id: Vec<&Key> = self
            .tables
            .iter()
            .map(|t| &t.key)
            .filter(|k| k.0 == key.0)
            .collect();
        same_id.push(&key);
        let versions: HashSet<u32> = same_id.iter().map(|k| k.1).collect();
        let distinct_versions = versions.len() == same_id.len();
        let stem_of = |k: &Key| {
            let id = file_safe(&k.0);
            match (same_id.len(), distinct_versions) {
                (1, _) => id,
                (_, true) => format!("{id}.v{}", k.1),
                (_, false) => format!("{id}.v{}.{:016x}", k.1, k.2),
            }
        };
        let new_stem = stem_of(&key);
        let renames: Vec<(usize, String)> = self
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| t.key.0 == key.0)
            .map(|(i, t)| (i, stem_of(&t.key)))
            .filter(|(i, stem)| self.tables[*i].stem != *stem)
            .collect();
        for (i, stem) in renames {
            let from = self.path(&self.tables[i].stem);
            let to = self.path(&stem);
            std::fs::rename(&from, &to)
                .with_context(|| format!("renaming {} to {}", from.display(), to.display()))?;
            self.tables[i].stem = stem;
        }
        // Another schema's id may look like `<id>.v<N>`: never share a file.
        let mut stem = new_stem;
        if self.tables.iter().any(|t| t.stem == stem) {
            stem = format!("{stem}.{:016x}", key.2);
        }
        let plan = Plan::new(schema, self.format.split_arrays);
        let path = self.path(&stem);
        let writer = (self.format.create)(&path, schema, &plan)
            .with_context(|| format!("creating {}", path.display()))?;
        self.tables.push(Table {
            key: key.clone(),
            stem,
            plan,
            writer,
        });
        let i = self.tables.len() - 1;
        self.by_key.insert(key, i);
        Ok(i)
    }

    fn row(
        &mut self,
        channel: u16,
        schema: &SchemaDescriptor,
        fixed: &Fixed<'_>,
        value: &Value<'_>,
    ) -> anyhow::Result<()> {
        let i = self.table(channel, schema)?;
        let path = self.path(&self.tables[i].stem);
        let t = &mut self.tables[i];
        let cells = t.plan.row(fixed, value);
        t.writer
            .row(&cells)
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// A schema id as a file name (ids are already `[A-Za-z0-9_.-]`; this is belt and braces).
fn file_safe(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

impl Sink for Tables {
    fn message(&mut self, m: &Message, value: &Value<'_>) -> anyhow::Result<()> {
        let c = &m.channel;
        let fixed = Fixed::of_message(m);
        self.row(c.id, &c.schema, &fixed, value)
    }

    fn loss(&mut self, loss: &Loss<'_>) -> anyhow::Result<()> {
        let schema = LossRecord::descriptor();
        let fixed = Fixed {
            t_nanos: loss.t_nanos,
            producer_id: loss.record.producer_id,
            producer: &loss.channel.producer,
            pid: loss.channel.pid,
            level: loss.channel.level.name(),
            seq: 0,
            version: schema.version(),
        };
        self.row(loss.channel.id, schema, &fixed, &loss.value()?)
    }

    fn finish(self: Box<Self>) -> anyhow::Result<Vec<PathBuf>> {
        let this = *self;
        let mut files = Vec::with_capacity(this.tables.len());
        for t in this.tables {
            let path = this.dir.join(format!("{}.{}", t.stem, this.format.ext));
            t.writer
                .finish()
                .with_context(|| format!("writing {}", path.display()))?;
            files.push(path);
        }
        files.sort();
        Ok(files)
    }
}

/// CSV: a header row, then one row per record; cells as [`Cell::to_text`] renders them.
pub(super) fn csv_format() -> Format {
    Format {
        ext: "csv",
        create: create_csv,
        split_arrays: true,
    }
}

struct CsvTable {
    out: csv::Writer<std::fs::File>,
}

fn create_csv(
    path: &Path,
    _schema: &SchemaDescriptor,
    plan: &Plan,
) -> anyhow::Result<Box<dyn TableWriter>> {
    let file = crate::bus::create_file(path)?;
    let mut out = csv::WriterBuilder::new()
        .buffer_capacity(256 << 10)
        .from_writer(file);
    out.write_record(plan.columns().iter().map(|c| c.name.as_str()))?;
    Ok(Box::new(CsvTable { out }))
}

impl TableWriter for CsvTable {
    fn row(&mut self, cells: &[Cell<'_>]) -> anyhow::Result<()> {
        for c in cells {
            self.out.write_field(c.to_text().as_ref())?;
        }
        self.out.write_record(std::iter::empty::<&[u8]>())?;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> anyhow::Result<()> {
        self.out.flush()?;
        Ok(())
    }
}

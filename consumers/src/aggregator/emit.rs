//! Emitting summaries: into the sink, the CSV files and the counters.

use std::fs::File;
use std::io::{BufRead, BufReader};

use super::group::Finished;
use super::group::Group;
use super::options::AggregatorOptions;
use super::sink::SummarySink;
use super::summary::{Acc, Closed, EXPERIMENT, Layout, Source};
use crate::HookError;
use crate::fields::KeyValue;

/// Counters of an aggregator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AggregatorStats {
    /// Records of subscribed schemas received.
    pub records: u64,
    /// Records summarized by this worker.
    pub summarized: u64,
    /// Records of groups that belong to other workers.
    pub other_workers: u64,
    /// Records of schemas that cannot be summarized as asked, or whose payload is malformed.
    pub skipped: u64,
    /// Window summaries emitted.
    pub windows: u64,
    /// Experiment summaries emitted.
    pub experiments: u64,
    /// Windows not emitted again after a restart.
    pub already_emitted: u64,
    /// Records overwritten before they could be read.
    pub lost: u64,
}

/// Who a summary is about: a producer (or producers combined) and the group-by values.
#[derive(Clone, Copy)]
pub(super) struct Who<'a> {
    pub(super) source: &'a Source,
    pub(super) group: &'a [KeyValue],
}

impl Group {
    pub(super) fn who(&self) -> Who<'_> {
        Who {
            source: &self.source,
            group: &self.values,
        }
    }
}

/// What is emitted.
pub(super) enum Kind {
    Window,
    Experiment,
}

/// Where summaries go: the sink, the CSV files, the counters.
pub(super) struct Emitter<S> {
    pub(super) sink: S,
    pub(super) opts: AggregatorOptions,
    pub(super) window_name: String,
    pub(super) buf: Vec<u8>,
    pub(super) stats: AggregatorStats,
}

impl<S: SummarySink> Emitter<S> {
    /// Emits a summary (and writes its CSV row).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit(
        &mut self,
        csv: &mut Option<csv::Writer<File>>,
        layout: &Layout,
        who: Who<'_>,
        kind: Kind,
        index: u64,
        lost: u64,
        acc: &Acc,
    ) -> Result<(), HookError> {
        let closed = Closed {
            source: who.source,
            group: who.group,
            window: match kind {
                Kind::Window => &self.window_name,
                Kind::Experiment => EXPERIMENT,
            },
            index,
            lost,
            acc,
        };
        layout.encode(&closed, &mut self.buf)?;
        self.sink.emit(&layout.desc, &self.buf)?;
        if let Some(dir) = &self.opts.csv_dir {
            if csv.is_none() {
                *csv = Some(open_csv(dir, layout, &self.opts)?);
            }
            if let Some(w) = csv.as_mut() {
                w.write_record(layout.csv_row(&closed))?;
            }
        }
        match kind {
            Kind::Window => self.stats.windows += 1,
            Kind::Experiment => self.stats.experiments += 1,
        }
        Ok(())
    }

    /// Emits a closed window, unless an earlier run emitted it.
    pub(super) fn finished(
        &mut self,
        csv: &mut Option<csv::Writer<File>>,
        layout: &Layout,
        g: &Group,
        f: &Finished,
    ) -> Result<(), HookError> {
        if f.emitted_before {
            self.stats.already_emitted += 1;
            return Ok(());
        }
        self.emit(csv, layout, g.who(), Kind::Window, f.index, f.lost, &f.acc)
    }
}

/// `<dir>/<summary id>[-<i>of<N>].csv`, appended to if it exists with the same columns.
fn open_csv(
    dir: &std::path::Path,
    layout: &Layout,
    opts: &AggregatorOptions,
) -> Result<csv::Writer<File>, HookError> {
    // Bus data is private, like the sockets: directories 0700, files 0600.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let label = opts.worker_label();
    let name = if label.is_empty() {
        format!("{}.csv", layout.desc.id())
    } else {
        format!("{}-{label}.csv", layout.desc.id())
    };
    let path = dir.join(name);
    let header = layout.csv_header();
    // Never through a symlink, never another user's file (`crate::output`).
    let file = crate::output::append(&path).map_err(|e| e.to_string())?;
    let existing = {
        let mut line = String::new();
        BufReader::new(&file)
            .read_line(&mut line)
            .ok()
            .map(|_| line)
    };
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(file);
    match existing.filter(|l| !l.is_empty()) {
        None => w.write_record(&header)?,
        Some(line) => {
            let theirs: Vec<&str> = line.trim_end().split(',').collect();
            let mut ours = csv::WriterBuilder::new().from_writer(Vec::new());
            ours.write_record(&header)?;
            let ours = String::from_utf8(ours.into_inner().map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            if theirs != ours.trim_end().split(',').collect::<Vec<_>>() {
                return Err(format!(
                    "{} exists with other columns (another schema version, group-by or field \
                     set); choose another --csv directory",
                    path.display()
                )
                .into());
            }
        }
    }
    Ok(w)
}

//! Runs: the recorder of `snapbus up --record DIR` (`snapbus record --dir DIR`), which keeps
//! every run of the bus in a file of its own in one directory, rotated by size, with a total
//! size cap that removes the oldest runs first. It wraps a [`Recorder`] per run.
//!
//! # What a run is
//!
//! A run starts when a producer appears on a bus that had none, and ends when the last
//! producer has ended (closed its lane, or died and its lane was read to the end). A script
//! run after another one, each with its `multiprocessing` workers, is one run per script: a
//! researcher running `train.py --seed 1` then `--seed 2` gets two files, and one file for
//! everything a script and its children wrote at once. Producers that overlap in time are
//! one run (two experiments started side by side on one bus share a file: give them a bus
//! each, `--bus`); so is a producer that never ends, such as an attached aggregator once it
//! emits its summaries.
//!
//! # Files
//!
//! `DIR/run-<UTC start, YYYYMMDDThhmmss.mmmZ>-<first producer's name>-<part>.mcap`, sorted
//! by name in time order; `-0000` is the first part, and a run is cut into a new part each
//! `rotate_bytes`. Each part is a complete recording once finished (indexes, summary, footer):
//! when its run ends, when it is rotated, and when the recorder stops (`snapbus down`,
//! `detach`, SIGTERM).
//!
//! # The cap
//!
//! Once the `run-*.mcap` files in the directory take more than `keep_bytes` (checked every
//! second and whenever a run ends), the oldest are removed, one file at a time, until they fit;
//! the files of the run being recorded and of the last finished run are never removed, so a
//! cap smaller than one run keeps the last one. Only regular files named as runs are counted
//! or removed: anything else in the directory is left alone.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use snapbus_bus::lane::StartAt;
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::status::StatusBoard;

use crate::recorder::{Recorder, RecorderOptions};
use crate::recording::{WriteError, WriterOptions};
use crate::{BatchReads, Consumer, Flow, HookError, Lag, ProducerChange, Record, RunOptions};

/// The default total size of the runs kept (10 GiB).
pub const DEFAULT_KEEP_BYTES: u64 = 10 << 30;
/// The default size of one part of a run (1 GiB).
pub const DEFAULT_ROTATE_BYTES: u64 = 1 << 30;

/// How to record runs.
#[derive(Debug, Clone)]
pub struct RunsOptions {
    /// The directory (it exists).
    pub dir: PathBuf,
    /// Start a new part of a run once the current one holds about this many bytes.
    pub rotate_bytes: u64,
    /// Remove the oldest runs' files once the runs take more than this many bytes.
    pub keep_bytes: u64,
    /// What the files are written with.
    pub writer: WriterOptions,
    /// Where reading starts in the lanes.
    pub start: StartAt,
}

/// A [`Consumer`] that writes each run of the bus into its own recording (see the
/// [module](self)). Call [`RunRecorder::finish`] after [`run`](crate::run) returns.
pub struct RunRecorder {
    opts: RunsOptions,
    /// Lanes that joined and have not ended.
    live: HashSet<u64>,
    /// The run being recorded, and its files' name stem.
    current: Option<(Recorder, String)>,
    /// The stem of the last finished run (never removed by the cap).
    last_stem: Option<String>,
    runs: u64,
    messages: u64,
    lost: u64,
    removed: u64,
    board: StatusBoard,
}

impl RunRecorder {
    /// A recorder of runs into `opts.dir`, idle until a producer appears.
    pub fn new(opts: RunsOptions) -> RunRecorder {
        let board = StatusBoard::new();
        board.set("dir", opts.dir.display().to_string());
        board.set("keep_bytes", opts.keep_bytes);
        board.set("state", "idle");
        let mut r = RunRecorder {
            opts,
            live: HashSet::new(),
            current: None,
            last_stem: None,
            runs: 0,
            messages: 0,
            lost: 0,
            removed: 0,
            board,
        };
        r.update_dir_status();
        r
    }

    /// How to run it: kind `recorder`, its start, batch reads, its status board.
    pub fn run_options(&self) -> RunOptions {
        let mut o = RunOptions::new("recorder");
        o.subscribe.start = self.opts.start;
        o.subscribe.count_history_as_lost = self.opts.start == StartAt::Oldest;
        o.status = Some(self.board.clone());
        o.batch = Some(BatchReads::default());
        o
    }

    /// Finishes the run being recorded, if any; returns the runs recorded and the messages in
    /// their files.
    pub fn finish(mut self) -> Result<(u64, u64), WriteError> {
        self.end_run()?;
        Ok((self.runs, self.messages))
    }

    /// Records lost while recording (in the files as loss records) or before each producer's
    /// first record, over every run.
    pub fn lost(&self) -> u64 {
        self.lost + self.current.as_ref().map_or(0, |(r, _)| run_losses(r))
    }

    /// The files of runs removed to keep under the cap.
    pub fn removed(&self) -> u64 {
        self.removed
    }

    fn start_run(&mut self, first_producer: &str) -> Result<(), WriteError> {
        let stem = self.free_stem(first_producer);
        let path = self.opts.dir.join(format!("{stem}.mcap"));
        let mut recorder = Recorder::create(RecorderOptions {
            path,
            rotate_bytes: Some(self.opts.rotate_bytes),
            writer: self.opts.writer.clone(),
            start: self.opts.start,
        })?;
        recorder.set_board(self.board.clone());
        self.runs += 1;
        self.board.set("runs", self.runs);
        self.board.set("state", "recording");
        self.current = Some((recorder, stem));
        Ok(())
    }

    /// `run-<UTC now>-<name>`, made unique in the directory.
    fn free_stem(&self, producer: &str) -> String {
        let name: String = producer
            .chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '.' => c,
                _ => '_',
            })
            .take(32)
            .collect();
        let now = snapbus_bus::lane::now_realtime_nanos();
        let base = format!("run-{}-{name}", compact_utc(now));
        let taken = |stem: &str| self.opts.dir.join(format!("{stem}-0000.mcap")).exists();
        let mut stem = base.clone();
        let mut n = 2;
        while taken(&stem) {
            stem = format!("{base}.{n}");
            n += 1;
        }
        stem
    }

    fn end_run(&mut self) -> Result<(), WriteError> {
        let Some((recorder, stem)) = self.current.take() else {
            return Ok(());
        };
        self.lost += run_losses(&recorder);
        let (files, messages) = recorder.finish()?;
        self.messages += messages;
        self.last_stem = Some(stem);
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        snapbus_bus::say!(
            "snapbus record: the run ended: {messages} records in {}",
            names.join(", ")
        );
        for key in ["file", "file_bytes"] {
            self.board.remove(key);
        }
        self.board.set("state", "idle");
        self.board.set("messages", self.messages);
        self.keep_under_cap();
        Ok(())
    }

    /// The run files in the directory, oldest first: (name, bytes).
    fn run_files(&self) -> Vec<(String, u64)> {
        let Ok(entries) = std::fs::read_dir(&self.opts.dir) else {
            return Vec::new();
        };
        let mut files: Vec<(String, u64)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let meta = e.metadata().ok()?; // not followed: the entry itself
                let run = name.starts_with("run-") && name.ends_with(".mcap");
                (run && meta.file_type().is_file()).then_some((name, meta.len()))
            })
            .collect();
        files.sort();
        files
    }

    /// Removes the oldest run files until the runs fit `keep_bytes` (never the current or the
    /// last finished run's); updates the status.
    fn keep_under_cap(&mut self) {
        let files = self.run_files();
        let mut total: u64 = files.iter().map(|(_, b)| b).sum();
        let protected = |name: &str| {
            let of = |stem: &Option<String>| {
                stem.as_deref()
                    .is_some_and(|s| name.strip_prefix(s).is_some_and(|r| r.starts_with('-')))
            };
            of(&self.last_stem) || of(&self.current.as_ref().map(|(_, s)| s.clone()))
        };
        let mut removed = 0;
        for (name, bytes) in &files {
            if total <= self.opts.keep_bytes {
                break;
            }
            if protected(name) {
                continue;
            }
            let path = self.opts.dir.join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    total -= bytes;
                    removed += 1;
                    snapbus_bus::say!(
                        "snapbus record: removed {} ({bytes} bytes): the runs in {} took more \
                         than {} bytes",
                        path.display(),
                        self.opts.dir.display(),
                        self.opts.keep_bytes
                    );
                }
                Err(e) => snapbus_bus::say!(
                    "snapbus record: could not remove {} to keep under the cap: {e}",
                    path.display()
                ),
            }
        }
        self.removed += removed;
        self.update_dir_status();
    }

    fn update_dir_status(&mut self) {
        let files = self.run_files();
        self.board.set("files_kept", files.len() as u64);
        self.board
            .set("bytes_used", files.iter().map(|(_, b)| b).sum::<u64>());
        self.board.set("removed", self.removed);
    }

    fn recorder(&mut self, first_producer: &str) -> Result<&mut Recorder, HookError> {
        if self.current.is_none() {
            self.start_run(first_producer)?;
        }
        Ok(&mut self.current.as_mut().expect("started above").0)
    }
}

fn run_losses(r: &Recorder) -> u64 {
    r.losses() + r.history_losses() + r.damaged()
}

/// `2026-11-29T00:15:00.123Z` as `20261129T001500.123Z`: sortable, and no `:` in a file name.
fn compact_utc(nanos: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(nanos);
    humantime::format_rfc3339_millis(t)
        .to_string()
        .replace(['-', ':'], "")
}

impl Consumer for RunRecorder {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.recorder(r.producer.name)?.on_event(r)
    }

    fn on_lag(&mut self, lag: Lag<'_>) -> Result<Flow, HookError> {
        self.recorder(lag.producer.name)?.on_lag(lag)
    }

    fn on_schema(&mut self, _schema: &Arc<SchemaDescriptor>) -> Result<Flow, HookError> {
        Ok(Flow::Continue)
    }

    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        match change {
            ProducerChange::Joined(p) => {
                self.live.insert(p.lane_id);
                self.recorder(p.name)?;
            }
            ProducerChange::Died(_) => {}
            ProducerChange::Ended(p) => {
                self.live.remove(&p.lane_id);
                if self.live.is_empty() {
                    self.end_run()?;
                }
            }
        }
        Ok(Flow::Continue)
    }

    fn flush(&mut self) -> Result<(), HookError> {
        if let Some((r, _)) = self.current.as_mut() {
            r.flush()?;
            // The run's own count, over the runs before it.
            let run = match self.board.get("messages") {
                Some(snapbus_bus::status::StatusValue::Count(n)) => n,
                _ => 0,
            };
            self.board.set("messages", self.messages + run);
        }
        self.board.set("lost", self.lost());
        self.keep_under_cap();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::compact_utc;

    #[test]
    fn file_stamps_are_utc_and_sort_in_time_order() {
        assert_eq!(compact_utc(0), "19700101T000000.000Z");
        // 2026-11-29T00:15:00.123Z
        let t = 1_795_911_300_123_000_000;
        assert_eq!(compact_utc(t), "20261129T001500.123Z");
        assert_eq!(compact_utc(951_782_400_000_000_000), "20000229T000000.000Z");
        assert!(compact_utc(t) < compact_utc(t + 1_000_000));
    }
}

//! The recorder: every record of the subscribed schemas into MCAP files (see
//! [`recording`](crate::recording)), with explicit loss records, rotation, and a flush to the
//! file every second so that a killed recorder loses at most the last second.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use snapbus_bus::ProducerInfo;
use snapbus_bus::lane::StartAt;
use snapbus_bus::lane::now_realtime_nanos;
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::status::StatusBoard;

use crate::recording::{History, HistoryStart, RecordingWriter, WriteError, WriterOptions};
use crate::{BatchReads, Consumer, Flow, HookError, Lag, Producer, Record, RunOptions};

/// How to record.
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    /// The file to write; with rotation, files are named `<stem>-0000.<ext>`, `<stem>-0001…`.
    pub path: PathBuf,
    /// Start a new file once the current one holds about this many bytes.
    pub rotate_bytes: Option<u64>,
    /// What the files are written with.
    pub writer: WriterOptions,
    /// Where reading starts in the lanes (recorded as each producer's history start; see
    /// [`Recorder::run_options`]).
    pub start: StartAt,
}

/// What the recorder knows of a lane's history.
#[derive(Debug, Default)]
struct LaneHistory {
    /// Its `snapbus.history` record is written (in the current file).
    written: bool,
    /// Its history started in an earlier file of this rotated recording.
    continued: bool,
    /// Records lost before its first record (reported by `on_lag` before any record).
    overwritten: u64,
    /// The producer, for a history written at the end (a lane with losses but no record).
    producer: Option<(u64, ProducerInfo)>,
}

/// A [`Consumer`] that writes what it receives into recordings. Call
/// [`Recorder::finish`] after [`run`](crate::run) returns to write the files' indexes.
pub struct Recorder {
    opts: RecorderOptions,
    writer: Option<RecordingWriter>,
    files: Vec<PathBuf>,
    messages: u64,
    losses: u64,
    /// Records lost to garbage in the rings (in the files as loss records' `damaged`).
    damaged: u64,
    history_losses: u64,
    /// By lane id.
    lanes: HashMap<u64, LaneHistory>,
    /// The lane of the last record, if its history is written in the current file (saves a
    /// lookup per record).
    last_lane: Option<u64>,
    /// What `snapbus ls` shows of it: the file being written, records and bytes so far.
    board: StatusBoard,
}

impl Recorder {
    /// Creates the (first) file now, so that a bad path fails before subscribing.
    pub fn create(opts: RecorderOptions) -> Result<Recorder, WriteError> {
        let mut r = Recorder {
            opts,
            writer: None,
            files: Vec::new(),
            messages: 0,
            losses: 0,
            damaged: 0,
            history_losses: 0,
            lanes: HashMap::new(),
            last_lane: None,
            board: StatusBoard::new(),
        };
        r.open_next()?;
        Ok(r)
    }

    fn open_next(&mut self) -> Result<(), WriteError> {
        let path = match self.opts.rotate_bytes {
            None => self.opts.path.clone(),
            Some(_) => rotated_path(&self.opts.path, self.files.len()),
        };
        self.writer = Some(RecordingWriter::create(&path, &self.opts.writer)?);
        self.last_lane = None;
        if !self.files.is_empty() {
            // A new part: each producer's history in it continues the previous part's.
            for lane in self.lanes.values_mut().filter(|l| l.written) {
                lane.written = false;
                lane.continued = true;
            }
        }
        self.files.push(path);
        Ok(())
    }

    fn writer(&mut self) -> Result<&mut RecordingWriter, WriteError> {
        let full = match (&self.writer, self.opts.rotate_bytes) {
            (Some(w), Some(limit)) => w.approx_bytes() >= limit,
            _ => false,
        };
        if full {
            if let Some(w) = self.writer.take() {
                self.messages += w.finish()?;
            }
            self.open_next()?;
        }
        if self.writer.is_none() {
            self.open_next()?;
        }
        Ok(self.writer.as_mut().expect("opened above"))
    }

    /// How to run this recorder: kind `recorder`, its start, and, from the oldest record,
    /// counting what the rings had overwritten before the first record read (so that each
    /// producer's history start says how many earlier records were overwritten).
    pub fn run_options(&self, kind: &str) -> RunOptions {
        let mut o = RunOptions::new(kind);
        o.subscribe.start = self.opts.start;
        o.subscribe.count_history_as_lost = self.opts.start == StartAt::Oldest;
        o.status = Some(self.board.clone());
        // A file needs no microseconds: read a batch behind the producers (a stop still
        // reads up to where they were, `RunOptions::drain_on_stop`).
        o.batch = Some(BatchReads::default());
        o
    }

    /// Writes the producer's history record before its first record in the current file.
    fn history(&mut self, r: &Record<'_>) -> Result<(), WriteError> {
        let start = self.history_start();
        let lane = self.lanes.entry(r.producer.lane_id).or_default();
        if !lane.written {
            lane.written = true;
            let history = if lane.continued {
                History {
                    start: HistoryStart::Continued,
                    first_seq: Some(r.header.seq),
                    first_nanos: Some(r.header.t_nanos),
                    overwritten: None,
                }
            } else {
                History {
                    start,
                    first_seq: Some(r.header.seq),
                    first_nanos: Some(r.header.t_nanos),
                    overwritten: (self.opts.start == StartAt::Oldest).then_some(lane.overwritten),
                }
            };
            // The caller opened (or rotated) the file: no rotation between a history record
            // and the records it describes.
            if let Some(w) = self.writer.as_mut() {
                w.write_history(r.producer_id, r.producer, &history)?;
            }
        }
        Ok(())
    }

    fn history_start(&self) -> HistoryStart {
        match self.opts.start {
            StartAt::Oldest => HistoryStart::Oldest,
            StartAt::Latest => HistoryStart::Latest,
            StartAt::Time(t) => HistoryStart::Time(t),
        }
    }

    /// Writes the history of lanes that had losses but no record, then the indexes and
    /// footers; returns the files written and the messages in them. After a failed write,
    /// the file is ended as [`RecordingWriter`] says and the first failure is returned.
    pub fn finish(mut self) -> Result<(Vec<PathBuf>, u64), WriteError> {
        let start = self.history_start();
        let pending: Vec<_> = self
            .lanes
            .values_mut()
            .filter(|l| !l.written)
            .filter_map(|l| {
                l.written = true;
                let (id, info) = l.producer.take()?;
                Some((id, info, l.overwritten))
            })
            .collect();
        let mut first_err = None;
        if let Some(w) = self.writer.as_mut() {
            for (id, info, overwritten) in pending {
                let history = History {
                    start,
                    first_seq: None,
                    first_nanos: None,
                    overwritten: Some(overwritten),
                };
                if let Err(e) = w.write_history(id, Producer::from(&info), &history) {
                    first_err = Some(e);
                    break;
                }
            }
        }
        if let Some(w) = self.writer.take() {
            // After a failed write this ends the file and returns the first failure.
            self.messages += w.finish()?;
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok((self.files, self.messages))
    }

    /// Shows its status (file, records, bytes, losses) on `board` instead of its own (a
    /// consumer that wraps it shows one board).
    pub fn set_board(&mut self, board: StatusBoard) {
        self.board = board;
    }

    /// Records lost while recording (after a producer's first recorded record; in the files
    /// as loss records).
    pub fn losses(&self) -> u64 {
        self.losses
    }

    /// Records lost to garbage in the producers' rings (in the files as loss records).
    pub fn damaged(&self) -> u64 {
        self.damaged
    }

    /// Records the rings had overwritten before each producer's first recorded record (in the
    /// files as the producers' history start).
    pub fn history_losses(&self) -> u64 {
        self.history_losses
    }
}

/// An owned copy of a producer view (kept for a history written at the end).
fn owned(p: Producer<'_>) -> ProducerInfo {
    ProducerInfo {
        pid: p.pid,
        name: p.name.to_owned(),
        cmdline: p.cmdline.to_vec(),
        session_tag: p.session_tag.map(str::to_owned),
        perf_tag: p.perf_tag.map(str::to_owned),
        lane_id: p.lane_id,
        started_nanos: p.started_nanos,
        relayed: p.relayed,
    }
}

/// `run.mcap`, 3 → `run-0003.mcap`.
pub fn rotated_path(path: &Path, index: usize) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "recording".into());
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{index:04}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{index:04}"),
    };
    path.with_file_name(name)
}

impl Consumer for Recorder {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        // Rotate first, so that a new part gets each producer's history before its records.
        self.writer()?;
        if self.last_lane != Some(r.producer.lane_id) {
            self.history(r)?;
            self.last_lane = Some(r.producer.lane_id);
        }
        // Through the file the history went into: no rotation between the two (a history
        // record pushing the part past `--rotate-mb` rotates before the next record).
        let w = self.writer.as_mut().expect("opened by writer() above");
        w.write(
            r.producer_id,
            r.producer,
            r.schema,
            r.emitter,
            &r.header,
            r.payload,
        )?;
        Ok(Flow::Continue)
    }

    fn on_lag(&mut self, lag: Lag<'_>) -> Result<Flow, HookError> {
        let Lag {
            producer_id,
            producer,
            mut lost,
            damaged,
        } = lag;
        let lane = self.lanes.entry(producer.lane_id).or_default();
        if lost > 0 && !lane.written && !lane.continued && self.opts.start == StartAt::Oldest {
            // Reading from the oldest record, before the producer's first record: what the
            // ring had overwritten, part of where its history starts. (From `latest` or a
            // time, a loss before the first record happened while recording: a loss record.)
            lane.overwritten += lost;
            lane.producer = Some((producer_id, owned(producer)));
            self.history_losses += lost;
            lost = 0;
        }
        if lost == 0 && damaged == 0 {
            return Ok(Flow::Continue);
        }
        // Damage is always a loss record (with the history start, it would read as records
        // overwritten before the recording began).
        self.losses += lost;
        self.damaged += damaged;
        self.writer()?
            .write_loss(producer_id, producer, (lost, damaged), now_realtime_nanos())?;
        Ok(Flow::Continue)
    }

    fn on_schema(&mut self, _schema: &Arc<SchemaDescriptor>) -> Result<Flow, HookError> {
        Ok(Flow::Continue)
    }

    fn flush(&mut self) -> Result<(), HookError> {
        if let Some(w) = self.writer.as_mut() {
            w.flush()?;
            let b = &self.board;
            b.set("file", w.path().display().to_string());
            b.set("files", self.files.len() as u64);
            b.set("messages", self.messages + w.messages());
            b.set("file_bytes", w.approx_bytes());
            b.set("lost", self.losses);
        }
        Ok(())
    }
}

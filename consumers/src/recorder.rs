//! The recorder: every record of the subscribed schemas into MCAP files (see
//! [`recording`](crate::recording)), with explicit loss records, rotation, and a flush to the
//! file every second so that a killed recorder loses at most the last second.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use snapbus_bus::control::ProducerInfo;
use snapbus_bus::lane::now_realtime_nanos;
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::subscriber::Record;

use crate::recording::{RecordingWriter, WriteError, WriterOptions};
use crate::{Consumer, Flow, HookError};

/// How to record.
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    /// The file to write; with rotation, files are named `<stem>-0000.<ext>`, `<stem>-0001…`.
    pub path: PathBuf,
    /// Start a new file once the current one holds about this many bytes.
    pub rotate_bytes: Option<u64>,
    /// What the files are written with.
    pub writer: WriterOptions,
}

/// A [`Consumer`] that writes what it receives into recordings. Call
/// [`Recorder::finish`] after [`run`](crate::run) returns to write the files' indexes.
pub struct Recorder {
    opts: RecorderOptions,
    writer: Option<RecordingWriter>,
    files: Vec<PathBuf>,
    messages: u64,
    losses: u64,
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

    /// Writes the indexes and footers; returns the files written and the messages in them.
    pub fn finish(mut self) -> Result<(Vec<PathBuf>, u64), WriteError> {
        if let Some(w) = self.writer.take() {
            self.messages += w.finish()?;
        }
        Ok((self.files, self.messages))
    }

    /// Loss records written so far.
    pub fn losses(&self) -> u64 {
        self.losses
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
        self.writer()?.write(
            r.producer_id,
            r.producer,
            r.schema,
            r.emitter,
            &r.meta,
            r.payload,
        )?;
        Ok(Flow::Continue)
    }

    fn on_lag(
        &mut self,
        producer_id: u64,
        producer: &ProducerInfo,
        lost: u64,
    ) -> Result<Flow, HookError> {
        self.losses += lost;
        self.writer()?
            .write_loss(producer_id, producer, lost, now_realtime_nanos())?;
        Ok(Flow::Continue)
    }

    fn on_schema(&mut self, _schema: &Arc<SchemaDescriptor>) -> Result<Flow, HookError> {
        Ok(Flow::Continue)
    }

    fn flush(&mut self) -> Result<(), HookError> {
        if let Some(w) = self.writer.as_mut() {
            w.flush()?;
        }
        Ok(())
    }
}

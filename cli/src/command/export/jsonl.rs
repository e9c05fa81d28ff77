//! `--format jsonl`: one JSON object per record, as `echo` prints them.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;
use snapbus_consumers::recording::Message;
use snapbus_schemas::{DecodeError, Value};

use super::{Loss, Sink};

/// Writes JSON lines into one file.
pub(super) struct Jsonl {
    path: PathBuf,
    out: BufWriter<File>,
}

impl Jsonl {
    /// Creates (or truncates) `path`.
    pub(super) fn create(path: &Path) -> anyhow::Result<Jsonl> {
        let file = crate::bus::create_file(path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Jsonl {
            path: path.to_owned(),
            out: BufWriter::with_capacity(256 << 10, file),
        })
    }

    fn line(&mut self, v: &serde_json::Value) -> anyhow::Result<()> {
        serde_json::to_writer(&mut self.out, v)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"))
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

impl Sink for Jsonl {
    fn message(&mut self, m: &Message, _value: &Value<'_>) -> anyhow::Result<()> {
        self.line(&crate::bus::message_json(m))
    }

    fn undecodable(&mut self, m: &Message, _err: &DecodeError) -> anyhow::Result<bool> {
        // `payload` is `{"decode_error": …}`, as `echo` prints it.
        self.line(&crate::bus::message_json(m))?;
        Ok(true)
    }

    fn loss(&mut self, loss: &Loss<'_>) -> anyhow::Result<()> {
        let record = loss.record;
        self.line(&json!({
            "loss": {
                "producer_id": record.producer_id,
                "producer_pid": record.producer_pid,
                "lost": record.lost,
                "damaged": record.damaged,
            },
            "t_nanos": loss.t_nanos,
        }))
    }

    fn finish(mut self: Box<Self>) -> anyhow::Result<Vec<PathBuf>> {
        self.out
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))?;
        Ok(vec![self.path])
    }
}

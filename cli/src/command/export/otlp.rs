//! `snapbus export --format otlp`: a recording sent to an OTLP/HTTP receiver with its
//! original timestamps, through the same exporter as `snapbus otlp` (same mapping, retries
//! and counters). Metric points are the last value per [`INTERVAL_NANOS`] of recorded time;
//! unlike the live exporter, the export waits for the receiver (up to `--timeout` for each
//! part) instead of dropping, so a healthy receiver gets everything. If the receiver stops
//! taking data, what is left is counted as not exported; the summary line says what was sent
//! and what was dropped, and the command fails if anything was.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::Consumer;
use snapbus_consumers::otlp::{DropReason, Endpoints, OtlpExporter, OtlpOptions, Signal};
use snapbus_consumers::recording::Message;
use snapbus_consumers::{Producer, Record, RecordHeader};
use snapbus_schemas::Value;

use super::{Loss, Sink, Tally};
use crate::cli::ExportArgs;

/// Metric points are aggregated per this much recorded time (as the live exporter's default
/// interval).
pub(crate) const INTERVAL_NANOS: u64 = 10_000_000_000;

/// Feeds a recording's records to an [`OtlpExporter`].
struct OtlpSink {
    exporter: OtlpExporter,
    timeout: std::time::Duration,
    bucket: Option<u64>,
    /// Why the export stopped sending, and how many records were read after that.
    stopped: Option<String>,
    unsent_records: u64,
    losses: u64,
}

impl OtlpSink {
    /// Waits until the receiver took everything so far; stops the export if it does not
    /// within the timeout.
    fn drain(&mut self) {
        if self.stopped.is_none() && !self.exporter.drain(Instant::now() + self.timeout) {
            let last = self.exporter.stats().snapshot().last_error;
            self.stopped = Some(format!(
                "the receiver did not take the data within {:?} (last error: {})",
                self.timeout,
                if last.is_empty() { "none" } else { &last }
            ));
        }
    }
}

impl Sink for OtlpSink {
    fn message(&mut self, m: &Message, _value: &Value<'_>) -> anyhow::Result<()> {
        let bucket = m.t_nanos / INTERVAL_NANOS;
        // Only a later bucket drains: records of several producers arrive slightly out of
        // order around a boundary, and flipping back and forth cost a round trip each.
        if self.bucket.is_some_and(|b| bucket > b) || self.exporter.queue_half_full() {
            self.drain();
        }
        if self.stopped.is_some() {
            self.unsent_records += 1;
            return Ok(());
        }
        self.bucket = Some(self.bucket.map_or(bucket, |b| b.max(bucket)));
        let c = &m.channel;
        let record = Record {
            producer_id: c.producer_id,
            producer: Producer {
                pid: c.pid,
                name: &c.producer,
                cmdline: &[],
                session_tag: c.metadata.get("session_tag").map(String::as_str),
                perf_tag: c.metadata.get("perf_tag").map(String::as_str),
                lane_id: c.lane_id.unwrap_or(c.producer_id),
                started_nanos: 0,
                relayed: false,
            },
            schema: &c.schema,
            emitter: c.emitter.as_deref(),
            header: RecordHeader {
                seq: u64::from(m.sequence),
                t_nanos: m.t_nanos,
                level: c.level,
                schema_key: 0,
                schema_version: u16::try_from(c.schema.version()).unwrap_or(u16::MAX),
                emitter_id: 0,
                payload_len: m.data.len(),
            },
            payload: &m.data,
            extracted: None,
        };
        if self.exporter.on_schema(&c.schema).is_err() || self.exporter.on_event(&record).is_err() {
            bail!("exporting a {} record", c.schema.id());
        }
        Ok(())
    }

    fn loss(&mut self, _loss: &Loss<'_>) -> anyhow::Result<()> {
        self.losses += 1;
        Ok(())
    }

    fn finish(self: Box<Self>) -> anyhow::Result<Vec<PathBuf>> {
        Ok(Vec::new())
    }
}

/// Runs `snapbus export --format otlp`.
pub(super) fn run(args: &ExportArgs, globs: &[Glob]) -> anyhow::Result<()> {
    if args.output.is_some() {
        bail!("--format otlp writes no file: leave out --output (the receiver is --endpoint)");
    }
    let endpoints = Endpoints::resolve(args.endpoint.as_deref(), |k| std::env::var(k).ok())?;
    let items = super::open_recording(&args.file)?;
    let mut opts = OtlpOptions::new(endpoints.clone());
    // Shutdown happens after the last drain: nothing should be left by then.
    opts.shutdown_deadline = std::time::Duration::ZERO;
    let exporter = OtlpExporter::start(opts).context("starting the sender thread")?;
    let mut sink = OtlpSink {
        exporter,
        timeout: args.timeout,
        bucket: None,
        stopped: None,
        unsent_records: 0,
        losses: 0,
    };
    let mut tally = Tally::new(globs);
    tally.read(items, &mut sink, &args.file)?;
    sink.drain();
    sink.exporter.shutdown();
    let s = sink.exporter.stats().snapshot();
    let mut line = format!(
        "snapbus export: {} record{} read",
        tally.exported,
        if tally.exported == 1 { "" } else { "s" }
    );
    for sig in Signal::ALL {
        line += &format!("; {} {} exported", s.exported(sig), sig.items());
        let dropped: Vec<String> = DropReason::ALL
            .iter()
            .filter(|r| s.dropped(sig, **r) > 0)
            .map(|r| format!("{} {}", s.dropped(sig, *r), r.name()))
            .collect();
        if !dropped.is_empty() {
            line += &format!(
                " ({} dropped: {})",
                s.dropped_total(sig),
                dropped.join(", ")
            );
        }
    }
    if sink.losses > 0 {
        line += &format!("; {} loss records (not sent)", sink.losses);
    }
    let urls: Vec<&str> = Signal::ALL
        .iter()
        .filter_map(|g| endpoints.get(*g))
        .collect();
    line += &format!(" → {}", urls.join(", "));
    snapbus_bus::say!("{line}");
    let dropped: u64 = Signal::ALL.iter().map(|g| s.dropped_total(*g)).sum();
    if let Some(why) = &sink.stopped {
        bail!(
            "{why}; {} records were not sent, and {dropped} items were dropped",
            sink.unsent_records
        );
    }
    if dropped > 0 {
        bail!(
            "{dropped} items were not exported (see above; last error: {})",
            s.last_error
        );
    }
    tally_ok(tally, args)
}

/// The recording's own problems (damage, a cut, undecodable records), as the other formats
/// report them.
fn tally_ok(tally: Tally<'_>, args: &ExportArgs) -> anyhow::Result<()> {
    tally.damage_error(args)
}

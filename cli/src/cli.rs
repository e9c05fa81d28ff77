//! Argument definitions (clap derive). One struct of options per verb; the verbs themselves
//! live in `command/<verb>.rs`, and so do the options of the built-in consumers (`record`,
//! `plot`, `aggregate`), which `attach` and `spawn` share through
//! [`consumer_kinds`](crate::consumer_kinds). A leaf: the command line they make up
//! ([`Cli`](crate::command::Cli)) is in `command/mod.rs`, with the registry of consumers.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Which bus.
#[derive(Debug, Clone, Args)]
pub(crate) struct BusArgs {
    /// The bus name (default: $SNAPBUS_BUS, else 'default').
    #[arg(long)]
    pub(crate) bus: Option<String>,
}

/// Options of `snapbus down`.
#[derive(Debug, Args)]
pub(crate) struct DownArgs {
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Leave the supervised consumers running: the next `snapbus up` re-adopts them (same
    /// ids, same restart policy).
    #[arg(long)]
    pub(crate) keep_consumers: bool,
}

/// Options of `snapbus up`.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Run in this terminal instead of detaching.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// Seconds a dead producer's lane stays readable (for snapshots).
    #[arg(long, default_value_t = 300)]
    pub(crate) retention_secs: u64,
    /// Keep every run of the bus in DIR (default: $SNAPBUS_RECORD): the broker supervises a
    /// recorder (`snapbus record --dir DIR`) that writes one MCAP file per run (a run starts
    /// when a producer appears on a bus that had none and ends when the last one ends),
    /// rotated and under a size cap that removes the oldest runs first. DIR is created if
    /// missing.
    #[arg(long, value_name = "DIR")]
    pub(crate) record: Option<PathBuf>,
    /// With --record: remove the oldest runs once the runs in DIR take more than SIZE (e.g.
    /// 500M, 20G; default 10G). The last run is always kept.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub(crate) record_keep_bytes: Option<u64>,
    /// With --record: start a new part of a run once its file holds about this many
    /// megabytes (default 1024).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) record_rotate_mb: Option<u64>,
    /// Stop once no producer has been connected, and no consumer but the ones the broker
    /// supervises, for this many seconds (default: run until `snapbus down`). The broker a
    /// producer starts for itself (`snapbus.init()`) runs with 60.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) idle_exit_secs: Option<u64>,
}

/// Waiting for a bus to appear (`echo`, the consumers' verbs, `attach`, `spawn`).
#[derive(Debug, Clone, Args)]
pub(crate) struct WaitArgs {
    /// Wait for the bus to be started (`snapbus up`) instead of failing at once: for SECS
    /// (30s, 2m, or seconds), or with no value until it is.
    #[arg(long, value_name = "SECS", num_args = 0..=1, value_parser = parse_duration)]
    pub(crate) wait: Option<Option<Duration>>,
}

/// Options of `snapbus ls`.
#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Print the state as one JSON object.
    ///
    /// The object: `bus`, `broker_pid`, `filter` (the bus filter, "" for none),
    /// `census_runs` (ring censuses the broker has run), and three arrays.
    /// `producers`: `id`, `info` {`pid`, `name`, `cmdline`, `session_tag`, `perf_tag`,
    /// `lane_id`, `started_nanos`, `relayed` (re-emitted from another machine by a bridge)},
    /// `status` (as the table shows it), `frames`, `rate_hz`,
    /// `dropped`, `lane_bytes`, `history_secs`, `history_start_nanos`, `history_records`,
    /// `history_first_seq`, `census_age_secs`, `filter`, `own_filter`.
    /// `consumers`: `id`, `info` {`pid`, `kind`, `subscriptions`}, `status` (as the table
    /// shows it), `delivered`, `lost`, `damaged`, `garbage`, `lag_bytes`, `report_age_secs`,
    /// `refused`, `supervised`, `log`, `board` (its status board, key to value).
    /// `schemas`: `id`, `version`, `fingerprint`, `descriptor`, `conflict`, `producers` (ids),
    /// `rate_hz`, `in_rings`. Times are CLOCK_REALTIME nanoseconds; absent values are null.
    /// Fields may be added, never renamed or removed.
    #[arg(long)]
    pub(crate) json: bool,
    /// Count the history each ring holds now (HISTORY, and the schemas' RATE/s and IN RINGS):
    /// the broker reads every record header of every ring. Without it, those columns come from
    /// a count at most a few seconds old; the producers' RECORDS and RATE/s are always current
    /// (from the lanes' counters).
    #[arg(long)]
    pub(crate) history: bool,
}

/// Where a new consumer starts (`--from`): the clap face of
/// [`StartAt`](snapbus_bus::lane::StartAt), which adds a start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum From {
    /// The oldest records still in the rings (history).
    Oldest,
    /// Only records written from now on.
    Latest,
}

impl From {
    /// Where the subscriber starts.
    pub(crate) fn start(self) -> snapbus_bus::lane::StartAt {
        match self {
            From::Oldest => snapbus_bus::lane::StartAt::Oldest,
            From::Latest => snapbus_bus::lane::StartAt::Latest,
        }
    }
}

/// How a recording's chunks are compressed (`--compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Codec {
    /// LZ4 frames (MCAP's `lz4`): files several times smaller, about 1 GB/s to compress.
    Lz4,
    /// Chunks stored as they are (the fastest writes; the largest files).
    None,
}

impl Codec {
    /// The writer's compression.
    pub(crate) fn compression(self) -> snapbus_consumers::recording::Compression {
        match self {
            Codec::Lz4 => snapbus_consumers::recording::Compression::Lz4,
            Codec::None => snapbus_consumers::recording::Compression::None,
        }
    }
}

/// Options of `snapbus echo`.
#[derive(Debug, Args)]
pub(crate) struct EchoArgs {
    /// Schema-id globs to subscribe to (default: all), e.g. 'demo.*'.
    pub(crate) globs: Vec<String>,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Start at the oldest records still in the rings, or at new ones.
    #[arg(long, value_enum, default_value_t = From::Latest)]
    pub(crate) from: From,
    /// Exit after this many events.
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Exit once every producer on the bus has ended (closed its lane, or died and was read
    /// to the end); at once if there is none.
    #[arg(long)]
    pub(crate) until_end: bool,
    /// Print each payload as the hex of its wire bytes instead of decoded values.
    #[arg(long)]
    pub(crate) raw: bool,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
}

/// Options of `snapbus hz`.
#[derive(Debug, Args)]
pub(crate) struct HzArgs {
    /// Schema-id globs (default: all).
    pub(crate) globs: Vec<String>,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Seconds between reports.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) period_secs: f64,
    /// Exit after this many reports.
    #[arg(long)]
    pub(crate) reports: Option<u64>,
}

/// Options of `snapbus filter`.
#[derive(Debug, Args)]
pub(crate) struct FilterArgs {
    /// Directives: a default level and/or TARGET=LEVEL items, comma-separated (levels: trace,
    /// debug, info, warn, error, off), e.g. 'info,monty.models=debug'.
    #[arg(required_unless_present = "reset", conflicts_with = "reset")]
    pub(crate) directives: Option<String>,
    /// Remove the bus filter: every producer goes back to its own (`SNAPBUS_FILTER`).
    #[arg(long)]
    pub(crate) reset: bool,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

/// Image size `WxH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageSize {
    pub(crate) width: u32,
    pub(crate) height: u32,
}

impl std::str::FromStr for ImageSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("expected WIDTHxHEIGHT with both in 1..=4096 (e.g. 32x24), got {s:?}");
        let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let width: u32 = w.trim().parse().map_err(|_| bad())?;
        let height: u32 = h.trim().parse().map_err(|_| bad())?;
        if !(1..=4096).contains(&width) || !(1..=4096).contains(&height) {
            return Err(bad());
        }
        Ok(ImageSize { width, height })
    }
}

/// Options of `snapbus demo`.
#[derive(Debug, Args)]
#[command(after_long_help = crate::demo::VALUES_HELP)]
pub(crate) struct DemoArgs {
    /// Number of episodes.
    #[arg(long, default_value_t = 3)]
    pub(crate) episodes: u32,
    /// Steps per episode.
    #[arg(long, default_value_t = 5)]
    pub(crate) steps: u32,
    /// Steps per second (0: as fast as possible).
    #[arg(long, default_value_t = 20.0)]
    pub(crate) rate: f64,
    /// Size of the observation image, WIDTHxHEIGHT.
    #[arg(long, default_value = "8x6")]
    pub(crate) image: ImageSize,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Don't start any consumer (the echo, the aggregator); only emit the events.
    #[arg(long)]
    pub(crate) no_echo: bool,
    /// Don't attach the aggregator (per-episode and experiment summaries of demo.step).
    #[arg(long)]
    pub(crate) no_aggregator: bool,
}

/// Options of `snapbus schemas`.
#[derive(Debug, Args)]
pub(crate) struct SchemasArgs {
    /// Print JSON (one object per schema, with the full descriptor) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `snapbus snapshot`.
#[derive(Debug, Args)]
pub(crate) struct SnapshotArgs {
    /// The MCAP file to write.
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// Only records of the last DURATION (e.g. 30s, 500ms, 2m, 1h; default: everything).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) last: Option<Duration>,
    /// Schema-id globs (default: all); repeatable. If none matches a schema on the bus, the
    /// snapshot is refused, naming the schemas there.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// Overwrite an existing file.
    #[arg(long)]
    pub(crate) force: bool,
    /// How chunks are compressed: lz4 (files several times smaller) or none.
    #[arg(long, value_enum, value_name = "CODEC", default_value_t = Codec::Lz4)]
    pub(crate) compression: Codec,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

/// Options of `snapbus replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// Recordings to replay, in order (e.g. the rotated files of one recording).
    #[arg(required = true)]
    pub(crate) files: Vec<PathBuf>,
    /// Play back this many times faster than recorded (0.5: half speed).
    #[arg(long, default_value_t = 1.0, conflicts_with = "max")]
    pub(crate) speed: f64,
    /// As fast as possible (consumers that cannot keep up lose records, and say so).
    #[arg(long)]
    pub(crate) max: bool,
    /// Schema-id globs to replay (default: all); repeatable.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// Print the records as JSON lines instead (no bus needed), each file in record-time order
    /// across producers.
    #[arg(long)]
    pub(crate) print: bool,
    /// The replay producer's name in `snapbus ls`.
    #[arg(long, default_value = "replay")]
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

/// Options of `snapbus inspect`.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The recording.
    pub(crate) file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    /// One JSON object per record (like `echo`), in one file.
    Jsonl,
    /// One CSV file per schema in the output directory, nested fields flattened to dotted
    /// columns.
    Csv,
    /// One Parquet file per schema in the output directory (pandas, pyarrow, polars, DuckDB):
    /// `t_nanos` a UTC timestamp, numbers and arrays in their own dtype, tensors flat with a
    /// `.shape` column; producer, pid, level, seq and version columns.
    Parquet,
    /// An MCAP file with JSON messages and JSON Schemas (any MCAP tool decodes it).
    McapJson,
    /// An MCAP file for Foxglove: mcap-json with topics as paths (`/demo/step`), and each
    /// image or (N, 3) array also on a topic of its own as `foxglove.RawImage` /
    /// `foxglove.PointCloud`.
    Foxglove,
    /// Sent to an OTLP/HTTP receiver (--endpoint) with the original timestamps: numeric
    /// fields as gauges (the last value per 10 s of recorded time), events as log records,
    /// spans as spans; no file is written.
    Otlp,
    /// A rerun `.rrd` file, written by the rerun bridge (`snapbus rerun --help`; a Python with
    /// rerun-sdk 0.36 to 0.41: --python).
    Rrd,
}

/// Options of `snapbus export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The recording.
    pub(crate) file: PathBuf,
    /// Output format.
    #[arg(long, value_enum)]
    pub(crate) format: ExportFormat,
    /// Output file (jsonl, mcap-json, foxglove) or directory (csv, parquet); not with otlp.
    #[arg(short, long)]
    pub(crate) output: Option<PathBuf>,
    /// With --format otlp: the receiver's base URL (URL/v1/metrics, URL/v1/logs,
    /// URL/v1/traces; default: $OTEL_EXPORTER_OTLP_ENDPOINT, else http://127.0.0.1:4318).
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint: Option<String>,
    /// With --format otlp: how long to wait for the receiver to take each part before giving
    /// up (what is left is counted as not exported, and the command fails).
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    /// Schema-id globs to export (default: all); repeatable. If none matches a record of the
    /// recording, the export fails naming the schemas it holds.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// Overwrite existing output.
    #[arg(long)]
    pub(crate) force: bool,
    /// For --format rrd: the Python interpreter of the rerun bridge (default:
    /// $SNAPBUS_RERUN_PYTHON, else $SNAPBUS_PYTHON, else `python3` on $PATH).
    #[arg(long, value_name = "PATH")]
    pub(crate) python: Option<String>,
}

/// How many workers `spawn` starts.
#[derive(Debug, Args)]
pub(crate) struct SpawnWorkers {
    /// How many workers.
    #[arg(short = 'n', long = "workers", value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=32))]
    pub(crate) workers: u32,
}

/// How the broker restarts the workers `spawn` starts.
#[derive(Debug, Args)]
pub(crate) struct SpawnRestart {
    /// Whether the broker restarts a worker that fails (see `attach --help`).
    #[arg(long, value_enum, default_value_t = Restart::OnFailure)]
    pub(crate) restart: Restart,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
}

/// How `attach` runs a consumer.
#[derive(Debug, Args)]
pub(crate) struct SuperviseArgs {
    /// Run in this terminal instead of under the broker.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// Whether the broker restarts the consumer when it fails (exits non-zero or is killed):
    /// up to 5 times, after 1, 2, 4, 8 and 16 s; not when it exits 78 (a full disk or a
    /// read-only filesystem) or failed before it subscribed (a restart would fail the same
    /// way). A broker started after a crash, or after `down --keep-consumers`, takes over.
    #[arg(long, value_enum, default_value_t = Restart::OnFailure)]
    pub(crate) restart: Restart,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
}

/// Restart policy of a supervised consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Restart {
    /// Never restart.
    Never,
    /// Restart after a failure (not after `detach` or a clean exit).
    OnFailure,
}

/// Options of `snapbus detach`.
#[derive(Debug, Args)]
pub(crate) struct DetachArgs {
    /// The consumer's id (from `attach` or `snapbus ls`).
    pub(crate) id: u64,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

/// Parses a size in bytes: `1048576`, or with a binary suffix `64K`, `500M`, `20G`, `1T`
/// (also `KiB`, `MB`, …: all powers of 1024).
pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("expected a size such as 500M, 20G or a number of bytes, got {s:?}");
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad()),
    };
    match n.checked_mul(1 << shift) {
        Some(0) | None => Err(bad()),
        Some(b) => Ok(b),
    }
}

/// Parses `30s`, `500ms`, `2m`, `1h 30m` (humantime's syntax) or a bare number of seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("expected a duration such as 30s, 500ms, 2m or 1h, got {s:?}");
    let d = match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs <= 1e9 => Duration::from_secs_f64(secs),
        Ok(_) => return Err(bad()),
        Err(_) => humantime::parse_duration(s.trim()).map_err(|_| bad())?,
    };
    if d.is_zero() {
        return Err(bad());
    }
    Ok(d)
}

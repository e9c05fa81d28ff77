//! The aggregator: step-level records turned into per-window and per-experiment statistics,
//! emitted back onto the bus as `<schema>.summary` snapshots (and, optionally, CSV rows).
//!
//! # What is summarized
//!
//! - **Groups.** Records are grouped by source producer (its lane) and by the values of the
//!   `group_by` fields (dotted paths to scalars, strings or enums; enums by variant name).
//! - **Fields.** Every numeric field (integers, floats, bools as 0/1, options of those) at any
//!   depth of structs and tuples, except the group-by and window fields; fixed arrays of up to
//!   16 numbers element by element (`position.0`); longer arrays, sequences and tensors by
//!   their per-record mean, minimum and maximum (`observation.mean`, …). `fields` narrows this
//!   to some dotted paths. Values inside enums, maps and sequences of structs are not
//!   summarized. NaN values are not counted. A `fields` glob that matches no field of a schema,
//!   and a schema without the episode field (`Window::Episode`), are warned about on stderr
//!   when the schema is first met; [`Aggregator::unmatched_options`] lists what matched no
//!   schema at all.
//! - **Statistics** per field: count, mean, std (population), min, max, last, and p50/p95/p99:
//!   the value at rank ⌊p·(n−1)⌋ of the sorted values, exact for up to
//!   [`EXACT_QUANTILES_UP_TO`] values, beyond that from a DDSketch (`sketches-ddsketch`),
//!   within [`QUANTILE_RELATIVE_ACCURACY`] of it.
//! - **Windows** ([`Window`]): per episode (the window closes when the episode field changes),
//!   every N records of a group, or per T seconds of record time (closed by a later record, or
//!   one second after its end by the wall clock; a record that arrives later still counts in
//!   the experiment, never in a second window of that bucket). Schemas without the episode
//!   field are summarized per experiment only.
//! - **Experiment**: when a producer ends (or dies and its lane has been read to the end), its
//!   open windows close and one `window = "experiment"` summary per group is emitted: the merge
//!   of all the windows this worker closed (`index` = their number).
//!
//! # The summary schema
//!
//! `<schema>.summary`, the source schema's version: `producer`, `producer_pid`,
//! `producer_lane`, `group { <group-by fields> }` (only with `group_by`), `window`
//! (`episode`, `steps:N`, `secs:T` or `experiment`), `index` (the episode number, the window's
//! number within the group, or the T-second bucket since the epoch), `count` (records),
//! `lost` (records of the producer — any schema — overwritten before they were read, since
//! the group's previous window closed; for the experiment: all of them; with
//! `count_history_as_lost` in the run options, as `snapbus aggregate` sets it, this includes
//! records already overwritten when the worker started), `first_t_nanos`,
//! `last_t_nanos`, `first_seq`, `last_seq` (the lane's record numbers), and `stats { <field>
//! { count, mean, std, min, max, last, p50, p95, p99 } }` with dotted fields as nested structs.
//! Summary schemas are never summarized again unless a subscription glob ends in `.summary`.
//!
//! # Workers
//!
//! With `workers = N`, worker `i` summarizes the groups whose hash of (schema id, producer
//! lane, group values) is `i` modulo N (XXH3-64), so N workers see every group exactly once.
//!
//! # Restarts
//!
//! A restarted worker ([`Resume`]) reads what its earlier runs emitted (their summaries stay
//! in the ring), re-reads the rings from the oldest record, and does not emit again a window
//! that was emitted (known from each group's last emitted `last_seq`); the records of those
//! windows still count towards the experiment summary. What the rings no longer hold is
//! reported as `lost`.
//!
//! # Example: summaries of every schema on a bus, per 100 records, into CSV files
//!
//! ```no_run
//! use snapbus_bus::runtime::{BusDir, BusName};
//! use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, PublisherSink, Window};
//! use snapbus_consumers::{RunOptions, run};
//!
//! let dir = BusDir::locate(&BusName::resolve(None)?);
//! let mut opts = AggregatorOptions::new(Window::Steps(100));
//! opts.csv_dir = Some("summaries".into());
//! let sink = PublisherSink::start(&dir, "aggregator")?;
//! let mut run_opts = RunOptions::new("aggregator");
//! run_opts.skip_lanes = vec![sink.publisher().info().lane_id];
//! run(&dir, &run_opts, &mut Aggregator::new(opts, sink), None)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub(crate) mod plan;
mod stats;
mod summary;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use snapbus_bus::Level;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::lane::StartAt;
use snapbus_bus::publisher::{EmitMeta, Publisher, PublisherConfig, PublisherError};
use snapbus_bus::runtime::BusDir;
use snapbus_bus::subscriber::Glob;
use snapbus_schemas::SchemaDescriptor;

use crate::{Consumer, Flow, HookError, Producer, ProducerChange, Record, RunError, RunOptions};
use plan::{Extracted, KeyValue, Plan, PlanError};
pub use stats::{EXACT_QUANTILES_UP_TO, QUANTILE_RELATIVE_ACCURACY};
use summary::{Acc, Closed, Emitted, Layout, Source};
pub use summary::{EXPERIMENT, SUMMARY_SUFFIX};

/// How records are cut into windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// One window per value of the episode field (it closes when the value changes).
    Episode,
    /// Every N records of a group.
    Steps(u64),
    /// Every T of record time, aligned to the epoch.
    Secs(Duration),
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Window::Episode => write!(f, "episode"),
            Window::Steps(n) => write!(f, "steps:{n}"),
            Window::Secs(d) => write!(f, "secs:{}", d.as_secs_f64()),
        }
    }
}

impl FromStr for Window {
    type Err = String;
    fn from_str(s: &str) -> Result<Window, String> {
        let bad = || format!("expected episode, steps:N (N ≥ 1) or secs:T (T > 0), got {s:?}");
        match s.split_once(':') {
            None if s == "episode" => Ok(Window::Episode),
            Some(("steps", n)) => match n.parse::<u64>() {
                Ok(n) if n > 0 => Ok(Window::Steps(n)),
                _ => Err(bad()),
            },
            Some(("secs", t)) => match t.parse::<f64>() {
                Ok(t) if (0.001..=1e9).contains(&t) => Ok(Window::Secs(Duration::from_secs_f64(t))),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

/// What to summarize and how.
#[derive(Debug, Clone)]
pub struct AggregatorOptions {
    /// The subscription globs (a summary schema is summarized only if one of these ends in
    /// `.summary`).
    pub globs: Vec<Glob>,
    /// Dotted paths of the fields that group records (besides the producer).
    pub group_by: Vec<String>,
    /// How records are cut into windows.
    pub window: Window,
    /// The field holding the episode number (for [`Window::Episode`]).
    pub episode_field: String,
    /// Dotted-path globs of the fields to summarize (empty: every numeric field).
    pub fields: Vec<Glob>,
    /// This worker's number, `0..workers`.
    pub worker: u32,
    /// How many workers share the work.
    pub workers: u32,
    /// A directory to write one CSV file per summary schema into (one row per closed window).
    pub csv_dir: Option<PathBuf>,
}

impl AggregatorOptions {
    /// Every schema, per episode (field `episode`), one worker, no CSV.
    pub fn new(window: Window) -> AggregatorOptions {
        AggregatorOptions {
            globs: Vec::new(),
            group_by: Vec::new(),
            window,
            episode_field: "episode".to_owned(),
            fields: Vec::new(),
            worker: 0,
            workers: 1,
            csv_dir: None,
        }
    }

    /// The worker's label, `2of3` (empty for a single worker).
    pub fn worker_label(&self) -> String {
        if self.workers > 1 {
            format!("{}of{}", self.worker + 1, self.workers)
        } else {
            String::new()
        }
    }
}

/// Where summaries go.
pub trait SummarySink {
    /// Emits one summary payload of `schema`.
    fn emit(&mut self, schema: &Arc<SchemaDescriptor>, payload: &[u8]) -> Result<(), HookError>;
}

/// Summaries collected in memory (tests, benchmarks).
impl SummarySink for Vec<(Arc<SchemaDescriptor>, Vec<u8>)> {
    fn emit(&mut self, schema: &Arc<SchemaDescriptor>, payload: &[u8]) -> Result<(), HookError> {
        self.push((Arc::clone(schema), payload.to_vec()));
        Ok(())
    }
}

/// Summaries published on the bus by a producer of the aggregator's own.
pub struct PublisherSink {
    publisher: Publisher,
    keys: HashMap<u64, u16>,
    emitter: u16,
}

/// Level of summary snapshots (INFO).
const SUMMARY_LEVEL: Level = Level::INFO;

impl PublisherSink {
    /// Starts the producer (`name` in `snapbus ls`) on the bus of `dir`.
    pub fn start(dir: &BusDir, name: &str) -> Result<PublisherSink, PublisherError> {
        let publisher = Publisher::start(
            dir.clone(),
            PublisherConfig {
                name: name.to_owned(),
                // Summaries are small and few: 8 MiB holds hundreds of thousands.
                lane: LaneConfig {
                    capacity: 8 << 20,
                    max_frame: 1 << 20,
                    block_size: 64 << 10,
                },
                session_tag: None,
                perf_tag: None,
            },
        )?;
        let emitter = publisher.emitter("snapbus.aggregator");
        // Joined before anything is emitted, so that `ls` lists it and a snapshot taken
        // right after a summary sees its lane (the bus is running: the caller checked).
        let t0 = std::time::Instant::now();
        while !publisher.is_connected() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(PublisherSink {
            publisher,
            keys: HashMap::new(),
            emitter,
        })
    }

    /// The producer (for its name and lane id).
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }
}

impl SummarySink for PublisherSink {
    fn emit(&mut self, schema: &Arc<SchemaDescriptor>, payload: &[u8]) -> Result<(), HookError> {
        let key = match self.keys.get(&schema.fingerprint()) {
            Some(k) => *k,
            None => {
                let k = self.publisher.register_schema(schema)?;
                self.keys.insert(schema.fingerprint(), k);
                k
            }
        };
        let version = u16::try_from(schema.version())
            .map_err(|_| format!("{} version {} > 65535", schema.id(), schema.version()))?;
        let meta = EmitMeta {
            schema_key: key,
            schema_version: version,
            level: SUMMARY_LEVEL,
            emitter: self.emitter,
        };
        self.publisher.emit_raw(meta, payload)?;
        Ok(())
    }
}

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

/// What an earlier run of a worker emitted, per group (see [`previous_summaries`]).
#[derive(Debug, Clone, Default)]
pub struct Resume {
    groups: HashMap<(String, u32, Vec<u8>), EmittedBefore>,
    /// Summaries found.
    pub summaries: u64,
}

/// What an earlier run emitted for one group: its last window's `last_seq` and `index`, and
/// whether the experiment summary was out.
#[derive(Debug, Clone, Copy, Default)]
struct EmittedBefore {
    last_seq: Option<u64>,
    last_index: u64,
    experiment: bool,
}

impl Resume {
    /// Takes note of one summary an earlier run emitted (`schema` is its `<id>.summary`
    /// schema; anything else is ignored). `window` is this run's window setting: windows of
    /// another setting do not count as emitted.
    pub fn add_summary(&mut self, schema: &SchemaDescriptor, payload: &[u8], window: Window) {
        if let Some(e) = summary::read_emitted(schema, payload) {
            self.add(schema.version(), e, &window.to_string());
        }
    }

    fn add(&mut self, version: u32, e: Emitted, window: &str) {
        let mut key = e.lane_id.to_le_bytes().to_vec();
        e.group.iter().for_each(|v| v.encode_into(&mut key));
        let entry = self.groups.entry((e.schema, version, key)).or_default();
        if e.window == EXPERIMENT {
            entry.experiment = true;
        } else if e.window == window && entry.last_seq.is_none_or(|s| s < e.last_seq) {
            entry.last_seq = Some(e.last_seq);
            entry.last_index = e.index;
        }
        self.summaries += 1;
    }

    /// Groups with summaries.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }
}

/// What `opts` name that `schema` lacks, as the aggregator warns when it first meets the
/// schema: each `fields` glob that matches no numeric field, the episode field (with
/// [`Window::Episode`]), a group-by field. Empty for a schema it summarizes as asked (and for
/// summary schemas, which it summarizes only when asked to).
pub fn option_mismatches(opts: &AggregatorOptions, schema: &SchemaDescriptor) -> Vec<String> {
    let wanted = opts
        .globs
        .iter()
        .any(|g| g.as_str().ends_with(SUMMARY_SUFFIX));
    if schema.id().ends_with(SUMMARY_SUFFIX) && !wanted {
        return Vec::new();
    }
    let name = format!("{} v{}", schema.id(), schema.version());
    let window_field = match opts.window {
        Window::Episode => Some(opts.episode_field.as_str()),
        _ => None,
    };
    let plan = match Plan::compile(schema.root(), &opts.group_by, window_field, &opts.fields) {
        Ok(p) => p,
        Err(PlanError::GroupField(f)) => {
            return vec![format!(
                "{name} has no group-by field {f:?}: it is not summarized"
            )];
        }
    };
    let mut out = Vec::new();
    if window_field.is_some() && !plan.has_window_field {
        out.push(format!(
            "{name} has no integer field {:?} (--episode-field): summarized per experiment only",
            opts.episode_field
        ));
    }
    for g in &opts.fields {
        let alone = Plan::compile(
            schema.root(),
            &opts.group_by,
            window_field,
            std::slice::from_ref(g),
        );
        if !alone.is_ok_and(|p| !p.leaves.is_empty()) {
            out.push(format!(
                "--field '{}' matches no numeric field of {name}",
                g.as_str()
            ));
        }
    }
    out
}

/// Reads the summaries still in the rings that producers named `name` emitted (an earlier run
/// of this worker), for [`Aggregator::resume_from`].
pub fn previous_summaries(
    dir: &BusDir,
    name: &str,
    opts: &AggregatorOptions,
) -> Result<Resume, RunError> {
    struct Collect<'a> {
        name: &'a str,
        window: Window,
        resume: Resume,
    }
    impl Consumer for Collect<'_> {
        fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
            if r.producer.name == self.name {
                self.resume.add_summary(r.schema, r.payload, self.window);
            }
            Ok(Flow::Continue)
        }
    }
    let mut c = Collect {
        name,
        window: opts.window,
        resume: Resume::default(),
    };
    let mut run_opts = RunOptions::new("aggregator-resume");
    run_opts.globs = vec![
        Glob::new(&format!("*{SUMMARY_SUFFIX}"))
            .map_err(|e| RunError::Hook(e.to_string().into()))?,
    ];
    run_opts.start = StartAt::Oldest;
    run_opts.cut = true;
    run_opts.until_end = true;
    run_opts.handle_signals = false;
    crate::run(dir, &run_opts, &mut c, None)?;
    Ok(c.resume)
}

/// The aggregator consumer. Feed it with [`crate::run`]; it emits into `S`.
pub struct Aggregator<S: SummarySink> {
    out: Emitter<S>,
    summaries_wanted: bool,
    schemas: Vec<SchemaState>,
    /// A schema `Arc`'s address → (its state's index, its lane, the `Arc` itself, kept so that
    /// the address is not reused while it is a key here).
    by_ptr: HashMap<usize, (usize, u64, Arc<SchemaDescriptor>)>,
    last_schema: Option<(usize, usize)>,
    producers: HashMap<u64, ProducerState>,
    /// The lane of the last record and its producer's loss count (saves a lookup per record).
    last_producer: Option<(u64, u64)>,
    resume: Resume,
    scratch: Extracted,
    key: Vec<u8>,
    /// What the options named that the schemas summarized so far lack (see
    /// [`Aggregator::unmatched_options`]).
    matches: OptionMatches,
}

/// Which of the options that name fields matched a field of a summarized schema.
#[derive(Debug, Default)]
struct OptionMatches {
    /// Schemas with a plan (`id vN`).
    summarized: Vec<String>,
    /// Per `--field` glob: whether it matched a field of one of them.
    fields: Vec<bool>,
    /// Whether one of them has the episode field (`--window episode`).
    episode_field: bool,
}

struct ProducerState {
    source: Arc<Source>,
    lost: u64,
}

struct SchemaState {
    desc: Arc<SchemaDescriptor>,
    /// `None`: not summarized (the reason was printed once).
    plan: Option<(Plan, Layout)>,
    groups: Vec<Group>,
    index: HashMap<Vec<u8>, usize>,
    last: Option<usize>,
    malformed: u64,
    csv: Option<csv::Writer<File>>,
}

struct Open {
    acc: Acc,
    /// The episode number or the time bucket.
    key: u64,
    index: u64,
}

struct Group {
    lane_id: u64,
    /// The group-by values as extracted ([`Extracted::group`]).
    key: Vec<u8>,
    source: Arc<Source>,
    values: Vec<KeyValue>,
    mine: bool,
    open: Option<Open>,
    experiment: Acc,
    windows: u64,
    next_index: u64,
    lost_mark: u64,
    resume: Option<EmittedBefore>,
    experiment_emitted: bool,
}

/// A window that closed, to be emitted.
struct Finished {
    acc: Acc,
    index: u64,
    lost: u64,
    /// An earlier run of this worker emitted it already.
    emitted_before: bool,
}

/// What is emitted.
enum Kind {
    Window,
    Experiment,
}

impl<S: SummarySink> Aggregator<S> {
    /// A new aggregator emitting into `sink`.
    pub fn new(opts: AggregatorOptions, sink: S) -> Aggregator<S> {
        let summaries_wanted = opts
            .globs
            .iter()
            .any(|g| g.as_str().ends_with(SUMMARY_SUFFIX));
        Aggregator {
            out: Emitter {
                window_name: opts.window.to_string(),
                opts,
                sink,
                buf: Vec::new(),
                stats: AggregatorStats::default(),
            },
            summaries_wanted,
            schemas: Vec::new(),
            by_ptr: HashMap::new(),
            last_schema: None,
            producers: HashMap::new(),
            last_producer: None,
            resume: Resume::default(),
            scratch: Extracted::default(),
            key: Vec::new(),
            matches: OptionMatches::default(),
        }
    }

    /// The options naming fields that no schema summarized so far has: each `--field` glob
    /// that matched no field of any of them, and `--episode-field` (with `--window episode`) if
    /// none has it. Empty while no schema was summarized. The aggregator warns about each
    /// schema as it meets it; `--until-end` turns what is left at the end into an error.
    pub fn unmatched_options(&self) -> Vec<String> {
        let m = &self.matches;
        if m.summarized.is_empty() {
            return Vec::new();
        }
        let schemas = m.summarized.join(", ");
        let mut out: Vec<String> = self
            .out
            .opts
            .fields
            .iter()
            .zip(&m.fields)
            .filter(|(_, hit)| !**hit)
            .map(|(g, _)| format!("--field '{}' matched no field of {schemas}", g.as_str()))
            .collect();
        if self.out.opts.window == Window::Episode && !m.episode_field {
            out.push(format!(
                "--episode-field '{}' is an integer field of none of {schemas} (summarized per \
                 experiment only)",
                self.out.opts.episode_field
            ));
        }
        out
    }

    /// Don't emit again what an earlier run emitted (see [`previous_summaries`]).
    pub fn resume_from(&mut self, resume: Resume) {
        self.resume = resume;
    }

    /// Counters so far.
    pub fn stats(&self) -> AggregatorStats {
        self.out.stats
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.out.sink
    }

    /// Windows open now (not emitted: they are incomplete).
    pub fn open_windows(&self) -> usize {
        self.schemas
            .iter()
            .flat_map(|s| &s.groups)
            .filter(|g| g.open.is_some())
            .count()
    }

    fn schema_index(&mut self, schema: &Arc<SchemaDescriptor>, lane_id: u64) -> usize {
        let ptr = Arc::as_ptr(schema) as usize;
        if let Some((p, i)) = self.last_schema {
            if p == ptr {
                return i;
            }
        }
        let i = match self.by_ptr.get(&ptr) {
            Some((i, _, _)) => *i,
            None => {
                let i = match self
                    .schemas
                    .iter()
                    .position(|s| s.desc.fingerprint() == schema.fingerprint())
                {
                    Some(i) => i,
                    None => {
                        let state = self.compile(schema);
                        self.schemas.push(state);
                        self.schemas.len() - 1
                    }
                };
                self.by_ptr.insert(ptr, (i, lane_id, Arc::clone(schema)));
                i
            }
        };
        self.last_schema = Some((ptr, i));
        i
    }

    fn compile(&mut self, schema: &Arc<SchemaDescriptor>) -> SchemaState {
        let mut state = SchemaState {
            desc: Arc::clone(schema),
            plan: None,
            groups: Vec::new(),
            index: HashMap::new(),
            last: None,
            malformed: 0,
            csv: None,
        };
        if schema.id().ends_with(SUMMARY_SUFFIX) && !self.summaries_wanted {
            return state;
        }
        let window_field = match self.out.opts.window {
            Window::Episode => Some(self.out.opts.episode_field.as_str()),
            _ => None,
        };
        let plan = match Plan::compile(
            schema.root(),
            &self.out.opts.group_by,
            window_field,
            &self.out.opts.fields,
        ) {
            Ok(p) => p,
            Err(PlanError::GroupField(f)) => {
                eprintln!(
                    "snapbus aggregator: not summarizing {} v{}: it has no group-by field {f:?} \
                     (a number, bool, string or enum outside options and sequences)",
                    schema.id(),
                    schema.version()
                );
                return state;
            }
        };
        let group = &plan.keys[..self.out.opts.group_by.len()];
        let layout = match Layout::new(schema, group, &plan.leaves) {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "snapbus aggregator: not summarizing {} v{}: {e}",
                    schema.id(),
                    schema.version()
                );
                return state;
            }
        };
        let how = match (self.out.opts.window, plan.has_window_field) {
            (Window::Episode, false) => {
                eprintln!(
                    "snapbus aggregator: warning: {} v{} has no integer field {:?} \
                     (--episode-field): summarized per experiment only",
                    schema.id(),
                    schema.version(),
                    self.out.opts.episode_field
                );
                format!(
                    "per experiment only (it has no integer field {:?})",
                    self.out.opts.episode_field
                )
            }
            (w, _) => format!("per {w}"),
        };
        // Which --field globs name a field of this schema (each compiled alone).
        let m = &mut self.matches;
        m.fields.resize(self.out.opts.fields.len(), false);
        for (g, hit) in self.out.opts.fields.iter().zip(&mut m.fields) {
            let alone = Plan::compile(
                schema.root(),
                &self.out.opts.group_by,
                window_field,
                std::slice::from_ref(g),
            );
            if alone.is_ok_and(|p| !p.leaves.is_empty()) {
                *hit = true;
            } else {
                eprintln!(
                    "snapbus aggregator: warning: --field '{}' matches no numeric field of {} v{}",
                    g.as_str(),
                    schema.id(),
                    schema.version()
                );
            }
        }
        m.episode_field |= plan.has_window_field;
        m.summarized
            .push(format!("{} v{}", schema.id(), schema.version()));
        eprintln!(
            "snapbus aggregator: summarizing {} v{} {how} as {}: {} field(s){}",
            schema.id(),
            schema.version(),
            layout.desc.id(),
            plan.leaves.len(),
            if plan.leaves.is_empty() {
                String::new()
            } else {
                format!(" ({})", plan.leaves.join(", "))
            }
        );
        state.plan = Some((plan, layout));
        state
    }

    fn producer(&mut self, info: Producer<'_>) -> &mut ProducerState {
        self.producers
            .entry(info.lane_id)
            .or_insert_with(|| ProducerState {
                source: Arc::new(Source {
                    name: info.name.to_owned(),
                    pid: info.pid,
                    lane_id: info.lane_id,
                }),
                lost: 0,
            })
    }

    /// Closes every window of the producer with lane `lane_id` and emits its experiment
    /// summaries.
    fn end_producer(&mut self, lane_id: u64) -> Result<(), HookError> {
        let lost = self.producers.get(&lane_id).map_or(0, |p| p.lost);
        for s in &mut self.schemas {
            let SchemaState {
                plan,
                groups,
                csv,
                index,
                last,
                ..
            } = s;
            let Some((_, layout)) = plan else { continue };
            for g in groups
                .iter_mut()
                .filter(|g| g.source.lane_id == lane_id && g.mine)
            {
                if let Some(f) = g.close(lost) {
                    self.out.finished(csv, layout, g, &f)?;
                }
                let before = g.experiment_emitted || g.resume.is_some_and(|r| r.experiment);
                if !before && g.experiment.count > 0 {
                    g.experiment_emitted = true;
                    self.out.emit(
                        csv,
                        layout,
                        g,
                        Kind::Experiment,
                        g.windows,
                        lost,
                        &g.experiment,
                    )?;
                }
            }
            // Forget the ended producer's groups.
            groups.retain(|g| g.lane_id != lane_id);
            *index = groups
                .iter()
                .enumerate()
                .map(|(i, g)| (g.key.clone(), i))
                .collect();
            *last = None;
        }
        self.producers.remove(&lane_id);
        self.last_producer = None;
        // Forget its schemas' addresses (the subscriber drops them with the lane).
        self.by_ptr.retain(|_, (_, lane, _)| *lane != lane_id);
        self.last_schema = None;
        Ok(())
    }

    /// Closes time windows that ended more than a second ago by the wall clock.
    fn close_stale(&mut self) -> Result<(), HookError> {
        let Window::Secs(period) = self.out.opts.window else {
            return Ok(());
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let period = period.as_nanos() as u64;
        for s in &mut self.schemas {
            let SchemaState {
                plan, groups, csv, ..
            } = s;
            let Some((_, layout)) = plan else { continue };
            for g in groups.iter_mut() {
                let stale = g.open.as_ref().is_some_and(|o| {
                    (o.key + 1)
                        .saturating_mul(period)
                        .saturating_add(1_000_000_000)
                        <= now
                });
                if stale {
                    let lost = self.producers.get(&g.source.lane_id).map_or(0, |p| p.lost);
                    if let Some(f) = g.close(lost) {
                        self.out.finished(csv, layout, g, &f)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Group {
    /// Adds a record; returns the window it closed, if any.
    #[inline]
    fn add(
        &mut self,
        window: Window,
        window_key: Option<u64>,
        meta: (u64, u64),
        values: &[f64],
        binary: &[bool],
        lost: u64,
    ) -> Option<Finished> {
        let (t_nanos, seq) = meta;
        let mut finished = None;
        if let Some(r) = self.resume {
            if r.last_seq.is_none_or(|s| seq > s) {
                // Past what the earlier run emitted: a window still open here holds only
                // records of emitted windows (`close` says so).
                finished = self.close(lost);
                if r.last_seq.is_some() {
                    self.next_index = self.next_index.max(r.last_index + 1);
                }
                self.experiment_emitted = r.experiment;
                self.resume = None;
            }
        }
        match window {
            Window::Episode => {
                let Some(ep) = window_key else {
                    self.experiment.add(t_nanos, seq, values);
                    return None;
                };
                if self.open.as_ref().is_some_and(|o| o.key != ep) {
                    finished = self.close(lost);
                }
                self.open_or(ep, ep, binary).acc.add(t_nanos, seq, values);
            }
            Window::Steps(n) => {
                let index = self.next_index;
                let open = self.open_or(0, index, binary);
                open.acc.add(t_nanos, seq, values);
                if open.acc.count >= n {
                    finished = self.close(lost);
                }
            }
            Window::Secs(period) => {
                let bucket = t_nanos / (period.as_nanos() as u64).max(1);
                if bucket < self.next_index {
                    // A late record of a window the clock already closed: it counts in the
                    // experiment, and no window is emitted twice.
                    self.experiment.add(t_nanos, seq, values);
                    return finished;
                }
                if self.open.as_ref().is_some_and(|o| o.key != bucket) {
                    finished = self.close(lost);
                }
                self.open_or(bucket, bucket, binary)
                    .acc
                    .add(t_nanos, seq, values);
            }
        }
        finished
    }

    fn open_or(&mut self, key: u64, index: u64, binary: &[bool]) -> &mut Open {
        self.open.get_or_insert_with(|| Open {
            acc: Acc::new(binary),
            key,
            index,
        })
    }

    /// Closes the open window (if any): it is merged into the experiment and returned, unless
    /// an earlier run emitted it already.
    fn close(&mut self, producer_lost: u64) -> Option<Finished> {
        let open = self.open.take()?;
        self.experiment.merge(&open.acc);
        self.windows += 1;
        self.next_index = open.index + 1;
        let lost = producer_lost - self.lost_mark;
        self.lost_mark = producer_lost;
        let emitted_before = self
            .resume
            .is_some_and(|r| r.last_seq.is_some_and(|s| open.acc.last_seq <= s));
        Some(Finished {
            acc: open.acc,
            index: open.index,
            lost,
            emitted_before,
        })
    }
}

/// Where summaries go: the sink, the CSV files, the counters.
struct Emitter<S> {
    sink: S,
    opts: AggregatorOptions,
    window_name: String,
    buf: Vec<u8>,
    stats: AggregatorStats,
}

impl<S: SummarySink> Emitter<S> {
    /// Emits a summary of group `g` (and writes its CSV row).
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        csv: &mut Option<csv::Writer<File>>,
        layout: &Layout,
        g: &Group,
        kind: Kind,
        index: u64,
        lost: u64,
        acc: &Acc,
    ) -> Result<(), HookError> {
        let closed = Closed {
            source: &g.source,
            group: &g.values,
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
    fn finished(
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
        self.emit(csv, layout, g, Kind::Window, f.index, f.lost, &f.acc)
    }
}

/// Whether two group keys are equal (short keys, compared inline: a `memcmp` call per record
/// showed in the profile).
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
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
    let existing = File::open(&path).ok().and_then(|f| {
        let mut line = String::new();
        BufReader::new(f).read_line(&mut line).ok()?;
        Some(line)
    });
    let file = std::os::unix::fs::OpenOptionsExt::mode(
        std::fs::OpenOptions::new().create(true).append(true),
        0o600,
    )
    .open(&path)
    .map_err(|e| format!("opening {}: {e}", path.display()))?;
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

impl<S: SummarySink> Consumer for Aggregator<S> {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.out.stats.records += 1;
        let lane_id = r.producer.lane_id;
        let si = self.schema_index(r.schema, lane_id);
        let producer_lost = match self.last_producer {
            Some((lane, lost)) if lane == lane_id => lost,
            _ => {
                let lost = self.producer(r.producer).lost;
                self.last_producer = Some((lane_id, lost));
                lost
            }
        };
        let state = &mut self.schemas[si];
        let SchemaState {
            plan,
            groups,
            index,
            last,
            malformed,
            csv,
            ..
        } = state;
        let Some((plan, layout)) = plan else {
            self.out.stats.skipped += 1;
            return Ok(Flow::Continue);
        };
        if plan.extract(r.payload, &mut self.scratch).is_err() {
            self.out.stats.skipped += 1;
            *malformed += 1;
            if *malformed == 1 {
                eprintln!(
                    "snapbus aggregator: a payload of {} v{} from {} (pid {}) does not match its \
                     descriptor; such records are skipped",
                    state.desc.id(),
                    state.desc.version(),
                    r.producer.name,
                    r.producer.pid
                );
            }
            return Ok(Flow::Continue);
        }
        let gi = match *last {
            Some(i)
                if groups[i].lane_id == lane_id
                    && same_key(&groups[i].key, &self.scratch.group) =>
            {
                i
            }
            _ => {
                self.key.clear();
                self.key.extend_from_slice(&lane_id.to_le_bytes());
                self.key.extend_from_slice(&self.scratch.group);
                match index.get(self.key.as_slice()) {
                    Some(i) => *i,
                    None => {
                        let n_group = self.out.opts.group_by.len();
                        let values = plan::decode_group(&self.scratch.group, n_group)
                            .ok_or("a group key that does not decode")?;
                        let mine = self.out.opts.workers <= 1 || {
                            let mut h = xxhash_rust::xxh3::Xxh3::new();
                            h.update(state.desc.id().as_bytes());
                            h.update(&self.key);
                            h.digest() % u64::from(self.out.opts.workers)
                                == u64::from(self.out.opts.worker)
                        };
                        let mut resume_key = lane_id.to_le_bytes().to_vec();
                        values.iter().for_each(|v| v.encode_into(&mut resume_key));
                        let resume = self
                            .resume
                            .groups
                            .get(&(state.desc.id().to_owned(), state.desc.version(), resume_key))
                            .copied();
                        let source = self
                            .producers
                            .get(&lane_id)
                            .map(|p| Arc::clone(&p.source))
                            .ok_or("producer state missing")?;
                        groups.push(Group {
                            lane_id,
                            key: self.scratch.group.clone(),
                            source,
                            values,
                            mine,
                            open: None,
                            experiment: Acc::new(plan.binary_leaves()),
                            windows: 0,
                            next_index: 0,
                            lost_mark: 0,
                            resume,
                            experiment_emitted: false,
                        });
                        index.insert(self.key.clone(), groups.len() - 1);
                        groups.len() - 1
                    }
                }
            }
        };
        *last = Some(gi);
        let g = &mut groups[gi];
        if !g.mine {
            self.out.stats.other_workers += 1;
            return Ok(Flow::Continue);
        }
        self.out.stats.summarized += 1;
        let window_key = if plan.has_window_field {
            self.scratch.window
        } else {
            None
        };
        if let Some(f) = g.add(
            self.out.opts.window,
            window_key,
            (r.header.t_nanos, r.header.seq),
            &self.scratch.values,
            plan.binary_leaves(),
            producer_lost,
        ) {
            self.out.finished(csv, layout, g, &f)?;
        }
        Ok(Flow::Continue)
    }

    fn on_lag(
        &mut self,
        _producer_id: u64,
        producer: Producer<'_>,
        lost: u64,
    ) -> Result<Flow, HookError> {
        self.out.stats.lost += lost;
        self.producer(producer).lost += lost;
        self.last_producer = None;
        Ok(Flow::Continue)
    }

    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        if let ProducerChange::Ended(p) = change {
            self.end_producer(p.lane_id)?;
        }
        Ok(Flow::Continue)
    }

    fn flush(&mut self) -> Result<(), HookError> {
        self.close_stale()?;
        for s in &mut self.schemas {
            if let Some(w) = s.csv.as_mut() {
                w.flush()?;
            }
        }
        Ok(())
    }
}

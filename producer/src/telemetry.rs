//! The emit API: `get_telemetry(name)` handles whose level checks are one atomic load, and a
//! process-wide publisher that exists only once a bus is found. Once it exists, every
//! snapshot that passes the level filter is written to this process's lane, whether or not a
//! broker is up (the lane does not depend on the broker); before, snapshots are counted as
//! `no_bus` and not written.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use snapbus_bus::publisher::{
    EmitError, EmitMeta, FillError, PayloadWriter, Publisher, PublisherConfig, PublisherStats,
};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_schemas::builtin::DurationSample;
use snapbus_schemas::{SchemaDescriptor, Snapshot, Value};

use crate::config::Config;
use crate::embedded;
use crate::filter::Filter;
use crate::lane_size::configured_lane;
use crate::level::{Level, LevelFilter};

/// Threshold value meaning "nothing enabled".
const OFF: u8 = u8::MAX;

struct Target {
    name: String,
    /// `Level::as_u8()` of the least severe enabled level, or [`OFF`].
    threshold: AtomicU8,
    emitter: OnceLock<u16>,
}

struct Global {
    config: Config,
    filter: RwLock<Filter>,
    /// The process's own filter (`SNAPBUS_FILTER`, or the last [`set_filter`]): in force
    /// whenever the bus has no filter of its own (`snapbus filter --reset`).
    own_filter: RwLock<Filter>,
    targets: Mutex<Vec<Arc<Target>>>,
    /// `fork::generation() + 1` of the process whose watcher thread runs (0: none yet). A
    /// forked child that has no publisher yet starts its own watcher (its parent's thread does
    /// not exist in it).
    watcher_gen: AtomicU64,
}

static CONFIG: OnceLock<Config> = OnceLock::new();
static GLOBAL: OnceLock<Global> = OnceLock::new();
static PUBLISHER: OnceLock<Publisher> = OnceLock::new();
/// Snapshots that passed the level filter before any bus was found (not written: no lane).
static NO_BUS: AtomicU64 = AtomicU64::new(0);
/// Whether the bus's filter (`snapbus filter`) is in force, overriding the process's own.
static BUS_FILTER: AtomicBool = AtomicBool::new(false);

/// Sets process-wide settings and joins the bus: starts its broker if none runs (unless
/// [`Config::start_bus`] says not to) and creates this process's lane, so that what it emits
/// from now on reaches consumers. Call it before the first [`get_telemetry`] (which does the
/// same with the default settings); returns `false` (and changes nothing) if settings were
/// already fixed.
pub fn init(config: Config) -> bool {
    let set = CONFIG.set(config).is_ok();
    if set {
        start_watcher(global());
    }
    set
}

fn global() -> &'static Global {
    GLOBAL.get_or_init(|| {
        let config = CONFIG.get_or_init(Config::default).clone();
        let filter = match Filter::from_env() {
            Ok(f) => f,
            Err(e) => {
                snapbus_bus::say!("snapbus: ignoring SNAPBUS_FILTER: {e}");
                Filter::default()
            }
        };
        Global {
            config,
            own_filter: RwLock::new(filter.clone()),
            filter: RwLock::new(filter),
            targets: Mutex::new(Vec::new()),
            watcher_gen: AtomicU64::new(0),
        }
    })
}

fn env_or(value: &Option<String>, var: &str) -> Option<String> {
    value
        .clone()
        .or_else(|| std::env::var(var).ok().filter(|v| !v.is_empty()))
}

/// Whether the first use in this process tree has settled how the bus is reached.
static SETTLED: AtomicBool = AtomicBool::new(false);

/// Joins the bus. The first time (in this process tree): if a broker runs, or one is started
/// ([`embedded::settle`]), the publisher (the lane) is created at once, so nothing emitted
/// while the broker comes up is lost. Otherwise a thread looks for the bus every 200 ms until
/// it appears, then starts the publisher (whose own thread handles later broker restarts).
fn start_watcher(g: &'static Global) {
    if PUBLISHER.get().is_some() {
        // Found already (in a forked child, the publisher makes the child's own lane).
        return;
    }
    snapbus_bus::fork::install();
    let generation = snapbus_bus::fork::generation() + 1;
    if g.watcher_gen.load(Ordering::Acquire) == generation
        || g.watcher_gen.swap(generation, Ordering::AcqRel) == generation
    {
        return;
    }
    let Some(dir) = bus_dir(g) else { return };
    if !SETTLED.swap(true, Ordering::AcqRel)
        && embedded::settle(&g.config, &dir) != embedded::Reach::Unreachable
    {
        start_publisher(g, dir);
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("snapbus-watcher".into())
        .spawn(move || {
            while !dir.socket_path().exists() {
                std::thread::sleep(snapbus_bus::publisher::RETRY);
            }
            start_publisher(g, dir);
        });
    if let Err(e) = spawned {
        snapbus_bus::say!("snapbus: telemetry stays off: {e}");
    }
}

/// The directory of the configured bus (`None`, said once: an invalid name).
fn bus_dir(g: &Global) -> Option<BusDir> {
    let Ok(name) = BusName::resolve(g.config.bus.as_deref()) else {
        snapbus_bus::say!("snapbus: invalid bus name; telemetry stays off");
        return None;
    };
    Some(match &g.config.runtime_dir {
        Some(root) => BusDir::locate_in(root, &name),
        None => BusDir::locate(&name),
    })
}

/// Creates this process's publisher (its lane) for the bus of `dir`, unless one exists.
fn start_publisher(g: &'static Global, dir: BusDir) {
    if PUBLISHER.get().is_some() {
        return;
    }
    let lane = configured_lane(&g.config);
    let name = g.config.name.clone().unwrap_or_else(program_name);
    let config = PublisherConfig {
        name,
        lane,
        session_tag: env_or(&g.config.session_tag, "SNAPBUS_SESSION_TAG"),
        perf_tag: env_or(&g.config.perf_tag, "SNAPBUS_PERF_TAG"),
        relayed: false,
    };
    match Publisher::start(dir, config) {
        Ok(p) => {
            p.on_filter(apply_directives);
            let _ = PUBLISHER.set(p);
            report_filter();
        }
        Err(e) => snapbus_bus::say!("snapbus: telemetry stays off: {e}"),
    }
}

fn program_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "producer".into())
}

fn threshold(f: LevelFilter) -> u8 {
    // The least severe level this filter lets through.
    [
        Level::TRACE,
        Level::DEBUG,
        Level::INFO,
        Level::WARN,
        Level::ERROR,
    ]
    .into_iter()
    .find(|&l| f.enabled(l))
    .map_or(OFF, Level::as_u8)
}

/// Applies filter directives from the broker (`snapbus filter`): they override the process's
/// own filter; empty directives (the bus filter was reset) bring the own filter back. Invalid
/// ones are ignored with a message (the CLI validates them before sending).
fn apply_directives(directives: &str) {
    if directives.is_empty() {
        let own = global().own_filter.read().map(|f| f.clone());
        if let Ok(own) = own {
            install(own);
        }
        BUS_FILTER.store(false, Ordering::Release);
    } else {
        match directives.parse::<Filter>() {
            Ok(f) => {
                install(f);
                BUS_FILTER.store(true, Ordering::Release);
            }
            Err(e) => snapbus_bus::say!("snapbus: ignoring filter from the bus: {e}"),
        }
    }
    report_filter();
}

/// Whether a filter set on the bus (`snapbus filter`, until `snapbus filter --reset`) is in
/// force in this process, overriding its own (`SNAPBUS_FILTER`, [`set_filter`]). One atomic
/// load. For language bindings with level controls of their own (Python's `logging` levels):
/// the bus filter comes first; while none is set, they decide, with [`Telemetry::at_unfiltered`].
#[inline]
pub fn bus_filter_in_force() -> bool {
    BUS_FILTER.load(Ordering::Acquire)
}

/// Tells the broker the filters in force (for `snapbus ls`).
fn report_filter() {
    let g = global();
    if let (Some(p), Ok(own), Ok(now)) = (PUBLISHER.get(), g.own_filter.read(), g.filter.read()) {
        p.report_filter(&own.to_string(), &now.to_string());
    }
}

/// Replaces the level filter of every handle in this process; it also becomes the process's
/// own filter, which `snapbus filter --reset` comes back to (until then, a later `snapbus
/// filter` overrides it).
pub fn set_filter(filter: Filter) {
    if let Ok(mut own) = global().own_filter.write() {
        *own = filter.clone();
    }
    install(filter);
    report_filter();
}

/// Puts `filter` in force in every handle of this process.
fn install(filter: Filter) {
    let g = global();
    if let Ok(targets) = g.targets.lock() {
        for t in targets.iter() {
            t.threshold
                .store(threshold(filter.level_for(&t.name)), Ordering::Relaxed);
        }
    }
    if let Ok(mut f) = g.filter.write() {
        *f = filter;
    }
}

/// A handle for emitting snapshots under a target name (a module path). Cheap to clone; get
/// it once and keep it.
#[derive(Clone)]
pub struct Telemetry {
    target: Arc<Target>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("target", &self.target.name)
            .finish()
    }
}

/// The handle for `target` (e.g. `module_path!()`; see [`telemetry!`](crate::telemetry!)).
pub fn get_telemetry(target: &str) -> Telemetry {
    let g = global();
    start_watcher(g);
    let mut targets = match g.targets.lock() {
        Ok(t) => t,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(t) = targets.iter().find(|t| t.name == target) {
        return Telemetry {
            target: Arc::clone(t),
        };
    }
    let level = g
        .filter
        .read()
        .map(|f| f.level_for(target))
        .unwrap_or(LevelFilter::INFO);
    let t = Arc::new(Target {
        name: target.to_owned(),
        threshold: AtomicU8::new(threshold(level)),
        emitter: OnceLock::new(),
    });
    targets.push(Arc::clone(&t));
    Telemetry { target: t }
}

impl Telemetry {
    /// The target name.
    pub fn target(&self) -> &str {
        &self.target.name
    }

    /// Whether a snapshot at `level` would be written now: the level passes this target's
    /// filter and this process has its lane (a bus runs or was started for it; the broker need
    /// not be up now).
    /// Two atomic loads. (A snapshot skipped because this is `false` is not counted; one
    /// made anyway before a bus is found is counted as `no_bus` in [`stats`].)
    #[inline]
    pub fn enabled(&self, level: Level) -> bool {
        self.level_enabled(level) && PUBLISHER.get().is_some()
    }

    /// Emits `event` at `level` if its level is enabled: encoded straight into this process's
    /// lane, whether or not a broker is up. Never blocks; a record that cannot be written (no
    /// bus found yet, too large for the lane, …) is counted (see [`stats`]), not retried.
    #[inline]
    pub fn snapshot<T: Snapshot>(&self, level: Level, event: &T) {
        if !self.level_enabled(level) {
            return;
        }
        let _ = self.try_snapshot(level, event);
    }

    /// As [`Telemetry::snapshot`], saying what happened: `Ok(Some(seq))` written with that
    /// sequence number, `Ok(None)` filtered out by the level filter, `Err` not written (and
    /// counted in [`stats`]; [`EmitError::NoLane`] before a bus was found).
    pub fn try_snapshot<T: Snapshot>(
        &self,
        level: Level,
        event: &T,
    ) -> Result<Option<u64>, EmitError> {
        let Some(at) = self.at(level) else {
            return Ok(None);
        };
        let (p, emitter) = at.publisher()?;
        p.emit(level, emitter, event).map(Some)
    }

    /// Emits a snapshot whose schema is known only at run time (language bindings, replay,
    /// transformations): `value` is checked against `schema`, measured, and encoded straight
    /// into the lane with the codec's own writer (no intermediate buffer). The schema is
    /// published to consumers before its first record, as for [`Telemetry::snapshot`], and
    /// everything else is the same too: never blocks, fork-safe, cheap when the level is
    /// off, and a record not written is counted in [`stats`] by reason. A `value` that does
    /// not match `schema` is not written at all and is counted as an encode error.
    ///
    /// ```
    /// use snapbus::Level;
    /// use snapbus::schemas::{DType, Field, SchemaDescriptor, Value};
    ///
    /// // A schema built at run time (e.g. from a Python dataclass): a struct of two fields.
    /// let fields = vec![
    ///     Field::new("step", DType::U32.into()),
    ///     Field::new("loss", DType::F64.into()),
    /// ];
    /// let schema = SchemaDescriptor::new("lab.probe", 1, fields.into())?;
    /// let value = Value::Struct(vec![
    ///     ("step".into(), Value::U32(7)),
    ///     ("loss".into(), Value::F64(0.25)),
    /// ]);
    /// # snapbus::init(snapbus::Config { bus: Some("doc-example".into()), start_bus: Some(false), ..Default::default() });
    /// let telemetry = snapbus::telemetry!();
    /// // A no-op here (no bus is running; counted as `no_bus`). With `snapbus up`, consumers
    /// // receive it and decode it with the descriptor.
    /// telemetry.snapshot_value(Level::INFO, &schema, &value);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn snapshot_value(&self, level: Level, schema: &SchemaDescriptor, value: &Value<'_>) {
        if !self.level_enabled(level) {
            return;
        }
        let _ = self.try_snapshot_value(level, schema, value);
    }

    /// As [`Telemetry::snapshot_value`], saying what happened (as [`Telemetry::try_snapshot`];
    /// [`EmitError::Encode`] for a value that does not match `schema`).
    pub fn try_snapshot_value(
        &self,
        level: Level,
        schema: &SchemaDescriptor,
        value: &Value<'_>,
    ) -> Result<Option<u64>, EmitError> {
        let Some(at) = self.at(level) else {
            return Ok(None);
        };
        let (p, emitter) = at.publisher()?;
        p.emit_value(level, emitter, schema, value).map(Some)
    }

    /// Emits a snapshot of the run-time schema `schema` that the caller encodes itself
    /// (language bindings that walk their own objects): `len` is the payload's exact length
    /// and `fill` writes it, in the codec's layout, through a [`PayloadWriter`] straight into
    /// the `len` bytes claimed in the lane (no intermediate buffer; the writer copies large
    /// parts past the caches where that pays). Everything else is as for
    /// [`Telemetry::try_snapshot_value`]: `Ok(None)` filtered out, the schema published
    /// before its first record, never blocks, fork-safe, and a record not written is counted
    /// in [`stats`] by reason (a `fill` that fails, or writes other than `len` bytes, as an
    /// encode error, its frame aborted). The payload is not checked against `schema`: that
    /// is the caller's contract. A caller that checks the level before preparing its
    /// payload uses [`Telemetry::at`] and [`AtLevel::snapshot_encoded`] instead.
    ///
    /// ```
    /// use snapbus::Level;
    /// use snapbus::schemas::{DType, Field, SchemaDescriptor};
    ///
    /// // A struct of one `u32` field.
    /// let fields = vec![Field::new("n", DType::U32.into())];
    /// let schema = SchemaDescriptor::new("lab.counter", 1, fields.into())?;
    /// # snapbus::init(snapbus::Config { bus: Some("doc-example".into()), start_bus: Some(false), ..Default::default() });
    /// let telemetry = snapbus::telemetry!();
    /// // No bus is running here: not written, counted as `no_bus`.
    /// let written = telemetry.try_snapshot_encoded(Level::INFO, &schema, 4, |w| {
    ///     w.put(&7u32.to_le_bytes())?;
    ///     Ok(())
    /// });
    /// assert!(written.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_snapshot_encoded(
        &self,
        level: Level,
        schema: &SchemaDescriptor,
        len: usize,
        fill: impl FnOnce(&mut PayloadWriter<'_>) -> Result<(), FillError>,
    ) -> Result<Option<u64>, EmitError> {
        match self.at(level) {
            Some(at) => at.snapshot_encoded(schema, len, fill).map(Some),
            None => Ok(None),
        }
    }

    /// Whether `level` passes this handle's level filter (one atomic load), whether or not
    /// this process has its lane yet (see [`Telemetry::enabled`] for both). For callers that
    /// must prepare a record before emitting it: a record prepared while this is true but
    /// [`Telemetry::enabled`] is false is counted as `no_bus` when emitted.
    #[inline]
    pub fn level_enabled(&self, level: Level) -> bool {
        level.as_u8() >= self.target.threshold.load(Ordering::Relaxed)
    }

    /// This handle at `level` if `level` passes its filter (one atomic load, as
    /// [`Telemetry::level_enabled`]), for a caller that prepares its record only then and
    /// emits it without a second check ([`AtLevel::snapshot_encoded`]).
    #[inline]
    pub fn at(&self, level: Level) -> Option<AtLevel<'_>> {
        self.level_enabled(level).then_some(AtLevel {
            telemetry: self,
            level,
        })
    }

    /// This handle at `level` whatever this process's own filter says: for a binding that
    /// decided the level itself (Python's `logging` levels) while no bus filter is in force
    /// ([`bus_filter_in_force`]). While one is, use [`Telemetry::at`]: the bus filter comes
    /// first.
    #[inline]
    pub fn at_unfiltered(&self, level: Level) -> AtLevel<'_> {
        AtLevel {
            telemetry: self,
            level,
        }
    }

    /// Runs `f` as a [`span`](Self::span) labelled `label`: its duration is emitted as a
    /// [`DurationSample`] (with its trace, span and parent ids) when `f` returns, and spans
    /// started inside `f` on this thread are its children.
    pub fn time_it<R>(&self, level: Level, label: &str, f: impl FnOnce() -> R) -> R {
        let span = self.span(level, label);
        let r = f();
        drop(span);
        r
    }

    /// A guard that emits a [`DurationSample`] labelled `label` when dropped: the span's
    /// duration, its trace and span ids, and its parent's id (the span open on this thread
    /// when it started; see [`trace`](crate::trace)). While `level` is off (or before a bus
    /// was found) it costs nothing more: no id, no allocation, no record.
    #[inline]
    pub fn span(&self, level: Level, label: &str) -> Span<'_> {
        // Off: no id, no clock read, no allocation.
        let entered = self
            .enabled(level)
            .then(|| (crate::trace::enter(), Instant::now()));
        Span {
            telemetry: self,
            level,
            label: if entered.is_some() {
                label.to_owned()
            } else {
                String::new()
            },
            entered,
        }
    }
}

/// A [`Telemetry`] handle at a level that passed its filter ([`Telemetry::at`]).
#[derive(Debug, Clone, Copy)]
pub struct AtLevel<'a> {
    telemetry: &'a Telemetry,
    level: Level,
}

impl AtLevel<'_> {
    /// The level.
    pub fn level(&self) -> Level {
        self.level
    }

    /// Whether a snapshot at this level would be written now: this process has its lane (a
    /// bus runs or was started for it), as in [`Telemetry::enabled`] once the level passed.
    #[inline]
    pub fn enabled(&self) -> bool {
        PUBLISHER.get().is_some()
    }

    /// As [`Telemetry::try_snapshot`], the level already checked: `Ok(seq)` written.
    pub fn snapshot<T: Snapshot>(self, event: &T) -> Result<u64, EmitError> {
        let (p, emitter) = self.publisher()?;
        p.emit(self.level, emitter, event)
    }

    /// As [`Telemetry::try_snapshot_encoded`], the level already checked: `Ok(seq)` written.
    pub fn snapshot_encoded(
        self,
        schema: &SchemaDescriptor,
        len: usize,
        fill: impl FnOnce(&mut PayloadWriter<'_>) -> Result<(), FillError>,
    ) -> Result<u64, EmitError> {
        let (p, emitter) = self.publisher()?;
        let meta = EmitMeta {
            schema_key: p.register_schema(schema)?,
            // Registration refuses versions above `u16::MAX`.
            schema_version: schema.version() as u16,
            level: self.level,
            emitter,
        };
        p.emit_with(meta, len, fill)
    }

    /// The publisher and the handle's emitter id, or `NoLane` (counted as `no_bus`) before a
    /// bus was found.
    #[inline]
    fn publisher(&self) -> Result<(&'static Publisher, u16), EmitError> {
        let Some(p) = PUBLISHER.get() else {
            no_bus();
            return Err(EmitError::NoLane("no bus was found yet"));
        };
        let target = &self.telemetry.target;
        let emitter = *target.emitter.get_or_init(|| p.emitter(&target.name));
        Ok((p, emitter))
    }
}

/// See [`Telemetry::span`].
#[must_use = "the duration is measured until the span is dropped"]
pub struct Span<'a> {
    telemetry: &'a Telemetry,
    level: Level,
    label: String,
    /// Its place in the trace and its start (`None`: the level was off, or no bus yet).
    entered: Option<(crate::trace::Entered, Instant)>,
}

impl Span<'_> {
    /// Its trace and span ids (`None` while its level is off or before a bus was found: the
    /// span then records nothing).
    pub fn context(&self) -> Option<crate::trace::SpanContext> {
        self.entered.map(|(e, _)| e.context)
    }
}

impl Drop for Span<'_> {
    #[inline]
    fn drop(&mut self) {
        let Some((entered, start)) = self.entered else {
            if self.telemetry.level_enabled(self.level) && PUBLISHER.get().is_none() {
                no_bus();
            }
            return;
        };
        self.end(entered, start);
    }
}

impl Span<'_> {
    /// Ends an enabled span: the context back to its parent, its record emitted.
    #[inline(never)]
    fn end(&mut self, entered: crate::trace::Entered, start: Instant) {
        crate::trace::exit(&entered);
        self.telemetry.snapshot(
            self.level,
            &DurationSample {
                label: std::mem::take(&mut self.label),
                duration_nanos: start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64,
                trace_id: entered.context.trace_id,
                span_id: entered.context.span_id,
                parent_id: entered.parent_id(),
            },
        );
    }
}

/// Counts a snapshot made before any bus was found; in a forked child that has no lane yet,
/// makes sure the child looks for the bus itself.
#[cold]
#[inline(never)]
fn no_bus() {
    NO_BUS.fetch_add(1, Ordering::Relaxed);
    start_watcher(global());
}

/// What this process's telemetry wrote, and every snapshot it did not write, by reason
/// (snapshots filtered out by their level are not counted anywhere: they were not made).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Whether this process has its lane (a bus was found; the broker need not be up now).
    pub has_lane: bool,
    /// Snapshots not written because no bus had been found yet (no lane).
    pub no_bus: u64,
    /// The lane's counters: records written, and records not written by reason (all zero
    /// while `has_lane` is false).
    pub lane: PublisherStats,
}

impl Stats {
    /// Records written to the lane.
    pub fn written(&self) -> u64 {
        self.lane.written
    }

    /// Snapshots not written, for any reason (no bus yet, oversize, lap guard, encode or
    /// catalog error, lane closed).
    pub fn not_written(&self) -> u64 {
        self.no_bus + self.lane.not_written()
    }
}

/// Counters of this process's telemetry (see [`Stats`]); available before a bus is found.
pub fn stats() -> Stats {
    let publisher = PUBLISHER.get();
    Stats {
        has_lane: publisher.is_some(),
        no_bus: NO_BUS.load(Ordering::Relaxed),
        lane: publisher.map(Publisher::stats).unwrap_or_default(),
    }
}

/// The descriptors this process's bus knows under schema `id` (every producer's, this one's
/// too), asked of its broker with a short timeout: empty if no bus was found or no broker
/// answered. A language binding checks a new layout against them before its first record
/// (`snapbus_bus::publisher::evolution_conflict`).
pub fn bus_descriptors(id: &str) -> Vec<snapbus_schemas::SchemaDescriptor> {
    PUBLISHER
        .get()
        .and_then(|p| p.bus_descriptors(id, Duration::from_millis(500)))
        .unwrap_or_default()
}

/// Whether this process is connected to a bus now.
pub fn is_connected() -> bool {
    PUBLISHER.get().is_some_and(Publisher::is_connected)
}

/// Whether large payloads are copied into this process's lane with stores that bypass the
/// caches (the lane is larger than the last-level cache; the publisher decides, for tests of
/// that path).
pub fn streams_large_payloads() -> bool {
    PUBLISHER
        .get()
        .is_some_and(Publisher::streams_large_payloads)
}

/// Why the bus's broker refused this process's lane, if it did and has not accepted it since
/// (a broker of another snapbus release: records are written to the lane, but no consumer
/// can read them). Also said once on stderr.
pub fn refusal() -> Option<String> {
    PUBLISHER.get().and_then(Publisher::refusal)
}

/// Waits up to `timeout` for a bus connection (for programs that want to emit from the very
/// first step, e.g. the demo). Returns whether connected.
pub fn wait_for_bus(timeout: Duration) -> bool {
    start_watcher(global());
    if let Some(p) = PUBLISHER.get() {
        // In a forked child, the inherited publisher is the parent's: start the child's own
        // lane and connection now (its first snapshot would), or it never connects.
        p.prepare_here();
    }
    let t0 = Instant::now();
    while !is_connected() {
        if t0.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Closes this process's lane, so consumers see the end of its stream rather than a dead
/// producer. Call it at the end of `main` (later snapshots are dropped and counted as
/// `closed`). If no broker has been handed the lane yet while one is up or being started, it
/// first waits for that, up to 5 s: a short program that ends before the broker it started
/// came up keeps its records. In a forked child it closes the child's own lane, never its
/// parent's.
pub fn shutdown() {
    if let Some(p) = PUBLISHER.get() {
        if embedded::broker_expected(p.dir()) {
            // Records written while the broker was starting go with this process unless a
            // broker was handed the lane: give it a moment (bounded, at exit only).
            p.wait_handed(embedded::HANDOVER_WAIT);
        }
        p.close();
    }
}

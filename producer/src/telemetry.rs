//! The emit API: `get_telemetry(name)` handles whose level checks are one atomic load, and a
//! process-wide publisher that exists only once a bus is found.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::{EmitError, Publisher, PublisherConfig, PublisherStats};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_schemas::Snapshot;
use snapbus_schemas::builtin::DurationSample;

use crate::filter::Filter;
use crate::level::{Level, LevelFilter};

/// Threshold value meaning "nothing enabled".
const OFF: u8 = u8::MAX;

/// Process-wide settings, fixed by [`init`] (or the environment) before the first handle.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The bus to join (default: `$SNAPBUS_BUS`, else `default`).
    pub bus: Option<String>,
    /// The name `snapbus ls` shows (default: the program's file name).
    pub name: Option<String>,
    /// Run metadata (default: `$SNAPBUS_SESSION_TAG`).
    pub session_tag: Option<String>,
    /// Run metadata (default: `$SNAPBUS_PERF_TAG`).
    pub perf_tag: Option<String>,
    /// Lane size in bytes, a power of two ≥ 64 KiB (default: 64 MiB, or
    /// `$SNAPBUS_LANE_BYTES`).
    pub lane_bytes: Option<usize>,
    /// The runtime root the bus directory is in (default: `$SNAPBUS_RUNTIME_DIR`, else the
    /// per-user runtime directory).
    pub runtime_dir: Option<std::path::PathBuf>,
}

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
    watcher_started: AtomicBool,
}

static CONFIG: OnceLock<Config> = OnceLock::new();
static GLOBAL: OnceLock<Global> = OnceLock::new();
static PUBLISHER: OnceLock<Publisher> = OnceLock::new();

/// Sets process-wide settings. Call it before the first [`get_telemetry`]; returns `false`
/// (and changes nothing) if settings were already fixed.
pub fn init(config: Config) -> bool {
    CONFIG.set(config).is_ok()
}

fn global() -> &'static Global {
    GLOBAL.get_or_init(|| {
        let config = CONFIG.get_or_init(Config::default).clone();
        let filter = match Filter::from_env() {
            Ok(f) => f,
            Err(e) => {
                eprintln!("snapbus: ignoring SNAPBUS_FILTER: {e}");
                Filter::default()
            }
        };
        Global {
            config,
            own_filter: RwLock::new(filter.clone()),
            filter: RwLock::new(filter),
            targets: Mutex::new(Vec::new()),
            watcher_started: AtomicBool::new(false),
        }
    })
}

fn env_or(value: &Option<String>, var: &str) -> Option<String> {
    value
        .clone()
        .or_else(|| std::env::var(var).ok().filter(|v| !v.is_empty()))
}

/// Looks for the bus every 200 ms until it appears, then starts the publisher (whose own
/// thread handles later broker restarts).
fn start_watcher(g: &'static Global) {
    if g.watcher_started.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("snapbus-watcher".into())
        .spawn(move || {
            let Ok(name) = BusName::resolve(g.config.bus.as_deref()) else {
                eprintln!("snapbus: invalid bus name; telemetry stays off");
                return;
            };
            let dir = match &g.config.runtime_dir {
                Some(root) => BusDir::locate_in(root, &name),
                None => BusDir::locate(&name),
            };
            while !dir.socket_path().exists() {
                std::thread::sleep(snapbus_bus::publisher::RETRY);
            }
            let lane_bytes = g.config.lane_bytes.or_else(|| {
                std::env::var("SNAPBUS_LANE_BYTES")
                    .ok()
                    .and_then(|v| v.parse().ok())
            });
            let mut lane = LaneConfig::default();
            if let Some(b) = lane_bytes {
                lane.capacity = b;
                lane.max_frame = lane.max_frame.min(b / 8);
                lane.block_size = lane.block_size.min(b / 4);
            }
            let name = g.config.name.clone().unwrap_or_else(program_name);
            let config = PublisherConfig {
                name,
                lane,
                session_tag: env_or(&g.config.session_tag, "SNAPBUS_SESSION_TAG"),
                perf_tag: env_or(&g.config.perf_tag, "SNAPBUS_PERF_TAG"),
            };
            match Publisher::start(dir, config) {
                Ok(p) => {
                    p.on_filter(apply_directives);
                    let _ = PUBLISHER.set(p);
                    report_filter();
                }
                Err(e) => eprintln!("snapbus: telemetry stays off: {e}"),
            }
        });
    if let Err(e) = spawned {
        eprintln!("snapbus: telemetry stays off: {e}");
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

/// Applies filter directives from the broker (`snapbus filter`). Invalid ones are ignored
/// with a message (the CLI validates them before sending).
/// The bus's filter directives: they override the process's own filter; empty directives
/// (the bus filter was reset) bring the own filter back.
fn apply_directives(directives: &str) {
    if directives.is_empty() {
        let own = global().own_filter.read().map(|f| f.clone());
        if let Ok(own) = own {
            install(own);
        }
    } else {
        match directives.parse::<Filter>() {
            Ok(f) => install(f),
            Err(e) => eprintln!("snapbus: ignoring filter from the bus: {e}"),
        }
    }
    report_filter();
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

    /// Whether a snapshot at `level` would be emitted now: the level passes this target's
    /// filter and a bus is connected. Two atomic loads.
    #[inline]
    pub fn enabled(&self, level: Level) -> bool {
        level.as_u8() >= self.target.threshold.load(Ordering::Relaxed)
            && PUBLISHER.get().is_some_and(Publisher::is_connected)
    }

    /// Emits `event` at `level` if enabled: encoded straight into this process's lane. Never
    /// blocks; a record that cannot be written is counted (see [`stats`]), not retried.
    #[inline]
    pub fn snapshot<T: Snapshot>(&self, level: Level, event: &T) {
        if level.as_u8() < self.target.threshold.load(Ordering::Relaxed) {
            return;
        }
        let _ = self.try_snapshot(level, event);
    }

    /// As [`Telemetry::snapshot`], saying why a record was not written (`Ok(None)`: disabled
    /// or no bus).
    pub fn try_snapshot<T: Snapshot>(
        &self,
        level: Level,
        event: &T,
    ) -> Result<Option<u64>, EmitError> {
        if level.as_u8() < self.target.threshold.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let Some(p) = PUBLISHER.get().filter(|p| p.is_connected()) else {
            return Ok(None);
        };
        let emitter = *self
            .target
            .emitter
            .get_or_init(|| p.emitter(&self.target.name));
        p.emit(level.as_u8(), emitter, event).map(Some)
    }

    /// Runs `f` and emits its duration as a [`DurationSample`] labelled `label`.
    pub fn time_it<R>(&self, level: Level, label: &str, f: impl FnOnce() -> R) -> R {
        let t0 = Instant::now();
        let r = f();
        if self.enabled(level) {
            self.snapshot(
                level,
                &DurationSample {
                    label: label.to_owned(),
                    duration_nanos: t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64,
                },
            );
        }
        r
    }

    /// A guard that emits a [`DurationSample`] labelled `label` when dropped.
    pub fn span(&self, level: Level, label: &str) -> Span<'_> {
        Span {
            telemetry: self,
            level,
            label: label.to_owned(),
            start: Instant::now(),
        }
    }
}

/// See [`Telemetry::span`].
#[must_use = "the duration is measured until the span is dropped"]
pub struct Span<'a> {
    telemetry: &'a Telemetry,
    level: Level,
    label: String,
    start: Instant,
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        if self.telemetry.enabled(self.level) {
            self.telemetry.snapshot(
                self.level,
                &DurationSample {
                    label: std::mem::take(&mut self.label),
                    duration_nanos: self.start.elapsed().as_nanos().min(u128::from(u64::MAX))
                        as u64,
                },
            );
        }
    }
}

/// Counters of this process's publisher (`None` until a bus was found).
pub fn stats() -> Option<PublisherStats> {
    PUBLISHER.get().map(Publisher::stats)
}

/// Whether this process is connected to a bus now.
pub fn is_connected() -> bool {
    PUBLISHER.get().is_some_and(Publisher::is_connected)
}

/// Waits up to `timeout` for a bus connection (for programs that want to emit from the very
/// first step, e.g. the demo). Returns whether connected.
pub fn wait_for_bus(timeout: Duration) -> bool {
    start_watcher(global());
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
/// producer. Call it at the end of `main` (later snapshots are dropped).
pub fn shutdown() {
    if let Some(p) = PUBLISHER.get() {
        p.close();
    }
}

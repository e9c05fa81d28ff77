//! snapbus benchmarks. The criterion benches live in `benches/` (`cargo bench -p
//! snapbus-benches`); see `BENCHMARKS.md` at the workspace root for results and commands.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use snapbus_bus::Level;
use snapbus_bus::lane::{LaneConfig, RecordMeta, StartAt};
use snapbus_bus::publisher::{EmitMeta, Publisher, PublisherConfig};
use snapbus_bus::runtime::BusDir;
use snapbus_bus::subscriber::SubscribeOptions;
use snapbus_schemas::Snapshot;

/// A private (0700) temporary directory for one bench process, removed on drop however the
/// bench ends.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `<tmp>/snapbus-<label>-<pid>`, emptied first if a previous run left it behind.
    pub fn new(label: &str) -> std::io::Result<TempDir> {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("snapbus-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(TempDir(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The metadata the lane benches and probes write their records with.
pub const LANE_META: RecordMeta = RecordMeta {
    schema_key: 1,
    schema_version: 1,
    level: 2,
    emitter: 0,
};

/// The options of a subscriber called `kind` to every schema of a bus, from `start`.
pub fn every_schema(kind: &str, start: StartAt) -> SubscribeOptions {
    SubscribeOptions {
        kind: kind.into(),
        globs: Vec::new(),
        start,
        cut: false,
        skip_lanes: Vec::new(),
        count_history_as_lost: false,
    }
}

/// Starts a publisher called `name` with a lane of `lane` on the bus in `dir` and waits up to
/// 30 s for the broker to welcome it.
pub fn connected_publisher(dir: BusDir, name: &str, lane: LaneConfig) -> Result<Publisher, String> {
    let publisher = Publisher::start(
        dir,
        PublisherConfig {
            name: name.into(),
            lane,
            session_tag: None,
            perf_tag: None,
            relayed: false,
        },
    )
    .map_err(|e| format!("start the publisher: {e}"))?;
    if !wait_for(Duration::from_secs(30), || publisher.is_connected()) {
        return Err("no broker welcomed the publisher within 30 s".into());
    }
    Ok(publisher)
}

/// A [`connected_publisher`] with the [`Event`] schema registered, and the `EmitMeta` of its
/// records (level INFO, emitter 0): the producer side of the probes in `examples/`.
pub fn event_publisher(
    dir: BusDir,
    name: &str,
    lane: LaneConfig,
) -> Result<(Publisher, EmitMeta), String> {
    let publisher = connected_publisher(dir, name, lane)?;
    let key = publisher
        .register_schema(Event::descriptor())
        .map_err(|e| format!("register the schema: {e}"))?;
    let meta = EmitMeta {
        schema_key: key,
        schema_version: Event::VERSION as u16,
        level: Level::INFO,
        emitter: 0,
    };
    Ok((publisher, meta))
}

/// Waits up to `timeout` for `cond`, napping 1 ms between checks (set-up only, never in a
/// measured loop); whether it came true.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while !cond() {
        if t0.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// The 64-byte event every bench that needs a small record uses (encoded size 64 bytes in the
/// snapbus / bincode-legacy / wincode layout).
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "bench.event", version = 1)]
pub struct Event {
    /// Episode index.
    pub episode: u32,
    /// Step in the episode.
    pub step: u32,
    /// A time.
    pub t: u64,
    /// Reward.
    pub reward: f64,
    /// Position.
    pub position: [f32; 3],
    /// Episode ended.
    pub done: bool,
    /// Episode cut short.
    pub truncated: bool,
    /// Environment id.
    pub env_id: u16,
    /// Action taken.
    pub action: u32,
    /// Its log-probability.
    pub log_prob: f32,
    /// Value estimate.
    pub value: f64,
    /// Seed.
    pub seed: u64,
}

impl Event {
    /// The `i`-th event of a run: deterministic values, every field set.
    pub fn sample(i: u64) -> Event {
        Event {
            episode: (i / 1000) as u32,
            step: (i % 1000) as u32,
            t: i,
            reward: i as f64 * 0.001,
            position: [1.0, 2.0, 3.0],
            done: false,
            truncated: false,
            env_id: 3,
            action: 7,
            log_prob: -0.5,
            value: 0.25,
            seed: 42,
        }
    }
}

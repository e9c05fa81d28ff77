//! snapbus benchmarks. The criterion benches live in `benches/` (`cargo bench -p
//! snapbus-benches`); see `BENCHMARKS.md` at the workspace root for results and commands.

use snapbus_schemas::Snapshot;

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

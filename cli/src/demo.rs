//! The demo experiment's schemas and its deterministic values, so anyone can check what a
//! consumer received.

use snapbus_schemas::{SchemaDescriptor, ShapeError, Snapshot, Tensor, Wire};

/// The `--help` text that documents the values.
pub(crate) const VALUES_HELP: &str = "\
Events (episode e = 0.., step s = 0..):
  demo.step v1         episode, step, mode, reward, position, observation
  demo.episode_end v1  episode, steps, mode, total_reward, mean_reward

Values, so a consumer can check what it received:
  mode         = Eval if e % 4 == 3, else Train
  reward       = ((31*e + 17*s) % 11) / 10 - 0.5          (f64)
  position     = [0.5*s, e, (s % 8) - 4]                   (f32 x 3)
  observation  = u8 image of shape [H, W], pixel (x, y) = (x + 2*y + 3*s + 5*e) % 256
  total_reward = sum of the episode's rewards in step order, mean_reward = total / steps

The demo emits at level INFO under the target `demo`, on the bus named by --bus or
$SNAPBUS_BUS (default `default`); it starts that bus if none is running and stops it at the
end. Unless --no-echo, it also attaches an aggregator (unless --no-aggregator), which emits
`demo.step.summary` snapshots back onto the bus: one per episode (count, mean, std, min, max,
last, p50, p95, p99 of step, reward, position.0..2 and the observation's mean, min and max)
and one with window = \"experiment\" at the end; and it starts `snapbus echo 'demo.*'` as a
separate process, which prints every event and summary it receives as one JSON line:
  {\"schema\": .., \"version\": .., \"level\": \"info\", \"t_nanos\": .., \"producer\": {..},
   \"target\": \"demo\", \"seq\": .., \"payload\": {..}}";

/// Train or evaluation episode.
#[derive(Wire, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A training episode.
    Train,
    /// An evaluation episode (every fourth).
    Eval,
}

/// One environment step.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "demo.step", version = 1)]
pub(crate) struct DemoStep {
    pub(crate) episode: u32,
    pub(crate) step: u32,
    pub(crate) mode: Mode,
    pub(crate) reward: f64,
    pub(crate) position: [f32; 3],
    pub(crate) observation: Tensor<u8>,
}

/// The end of an episode.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "demo.episode_end", version = 1)]
pub(crate) struct EpisodeEnd {
    pub(crate) episode: u32,
    pub(crate) steps: u32,
    pub(crate) mode: Mode,
    pub(crate) total_reward: f64,
    pub(crate) mean_reward: f64,
}

/// The demo's descriptors.
pub(crate) fn descriptors() -> [&'static SchemaDescriptor; 2] {
    [DemoStep::descriptor(), EpisodeEnd::descriptor()]
}

pub(crate) fn mode(episode: u32) -> Mode {
    if episode % 4 == 3 {
        Mode::Eval
    } else {
        Mode::Train
    }
}

pub(crate) fn reward(episode: u32, step: u32) -> f64 {
    ((31 * u64::from(episode) + 17 * u64::from(step)) % 11) as f64 / 10.0 - 0.5
}

pub(crate) fn step_event(
    episode: u32,
    step: u32,
    width: u32,
    height: u32,
) -> Result<DemoStep, ShapeError> {
    let (e, s) = (u64::from(episode), u64::from(step));
    let pixels = (0..u64::from(height))
        .flat_map(|y| (0..u64::from(width)).map(move |x| ((x + 2 * y + 3 * s + 5 * e) % 256) as u8))
        .collect();
    Ok(DemoStep {
        episode,
        step,
        mode: mode(episode),
        reward: reward(episode, step),
        position: [step as f32 * 0.5, episode as f32, (step % 8) as f32 - 4.0],
        observation: Tensor::new(vec![u64::from(height), u64::from(width)], pixels)?,
    })
}

pub(crate) fn episode_end(episode: u32, steps: u32) -> EpisodeEnd {
    let total_reward: f64 = (0..steps).map(|s| reward(episode, s)).sum();
    EpisodeEnd {
        episode,
        steps,
        mode: mode(episode),
        total_reward,
        mean_reward: if steps == 0 {
            0.0
        } else {
            total_reward / f64::from(steps)
        },
    }
}

//! Restarts: what an earlier run of a worker emitted, read back from the rings.

use std::collections::HashMap;

use snapbus_bus::lane::StartAt;
use snapbus_bus::runtime::BusDir;
use snapbus_bus::subscriber::Glob;
use snapbus_schemas::SchemaDescriptor;

use super::options::{AggregatorOptions, Window};
use super::summary::{self, EXPERIMENT, Emitted, SUMMARY_SUFFIX};
use crate::fields::KeyValue;
use crate::{Consumer, Flow, HookError, Record, RunError, RunOptions};

/// What an earlier run of a worker emitted, per group (see [`previous_summaries`]).
#[derive(Debug, Clone, Default)]
pub struct Resume {
    pub(super) groups: HashMap<(String, u32, Vec<u8>), EmittedBefore>,
    /// Summaries found.
    pub summaries: u64,
}

/// What an earlier run emitted for one group: its last window's `last_seq` and `index`, and
/// whether the experiment summary was out (and the most records one covered: a combined
/// experiment summary is emitted again only if it covers more).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct EmittedBefore {
    pub(super) last_seq: Option<u64>,
    pub(super) last_index: u64,
    pub(super) experiment: bool,
    pub(super) experiment_count: u64,
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
        let key = key(e.lane_id, &e.group);
        let entry = self.groups.entry((e.schema, version, key)).or_default();
        if e.window == EXPERIMENT {
            entry.experiment = true;
            entry.experiment_count = entry.experiment_count.max(e.count);
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

    /// What an earlier run emitted for the group with `values` of producer `lane` (a run id
    /// for combined producers) of schema `desc`.
    pub(super) fn of(
        &self,
        desc: &SchemaDescriptor,
        lane: u64,
        values: &[KeyValue],
    ) -> Option<EmittedBefore> {
        let key = (desc.id().to_owned(), desc.version(), key(lane, values));
        self.groups.get(&key).copied()
    }
}

/// A group's key in [`Resume`]: the lane, then the group-by values.
fn key(lane: u64, values: &[KeyValue]) -> Vec<u8> {
    let mut key = lane.to_le_bytes().to_vec();
    values.iter().for_each(|v| v.encode_into(&mut key));
    key
}

/// Reads the summaries still in the rings that producers named `name` emitted (an earlier run
/// of this worker), for [`Aggregator::resume_from`](super::Aggregator::resume_from).
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
    run_opts.subscribe.globs = vec![
        Glob::new(&format!("*{SUMMARY_SUFFIX}"))
            .map_err(|e| RunError::Hook(e.to_string().into()))?,
    ];
    run_opts.subscribe.start = StartAt::Oldest;
    run_opts.subscribe.cut = true;
    run_opts.until_end = true;
    run_opts.handle_signals = false;
    crate::run(dir, &run_opts, &mut c, None)?;
    Ok(c.resume)
}

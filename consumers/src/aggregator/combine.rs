//! Producers combined into one experiment (`combine_producers`): the workers of a parallel
//! run — producers with the same name and session tag — give one experiment summary per
//! group, emitted once all of them have ended and none has joined for the grace period.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::group::Group;
use super::summary::{Acc, Source};
use crate::Producer;
use crate::fields::KeyValue;

/// The runs met so far, by id ([`run_id`]).
#[derive(Default)]
pub(super) struct Runs {
    pub(super) by_id: HashMap<u64, Run>,
}

/// The producers of one run and their experiment so far, per (schema, group).
pub(super) struct Run {
    /// Who the combined summaries are about: the producers' name, pid 0, and the run id as
    /// `producer_lane` (no lane has it; a restarted aggregator finds its summaries by it).
    pub(super) source: Arc<Source>,
    pub(super) session_tag: Option<String>,
    live: HashSet<u64>,
    /// Every lane that joined.
    pub(super) producers: HashSet<u64>,
    /// When its last live producer ended.
    idle_since: Option<Instant>,
    pub(super) groups: Vec<Combined>,
    index: HashMap<(usize, Vec<u8>), usize>,
}

/// One group's experiment over every producer of a run.
pub(super) struct Combined {
    /// The index of its schema's state (schema states are never removed).
    pub(super) schema: usize,
    pub(super) values: Vec<KeyValue>,
    pub(super) acc: Acc,
    /// Windows closed, over every producer.
    pub(super) windows: u64,
    /// Records lost, over every producer.
    pub(super) lost: u64,
    /// Records covered by the last experiment summary emitted (by this run of the aggregator
    /// or, read back after a restart, an earlier one): it is emitted again only with more.
    pub(super) emitted: u64,
}

/// The run a producer belongs to: a hash of its name and session tag.
pub(super) fn run_id(name: &str, session_tag: Option<&str>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(b"snapbus combined producers\0");
    h.update(name.as_bytes());
    if let Some(tag) = session_tag {
        h.update(b"\0");
        h.update(tag.as_bytes());
    }
    h.digest()
}

impl Runs {
    /// Takes note of a producer that joined; returns its run's id.
    pub(super) fn joined(&mut self, p: Producer<'_>) -> u64 {
        let id = run_id(p.name, p.session_tag);
        let run = self.by_id.entry(id).or_insert_with(|| Run {
            source: Arc::new(Source {
                name: p.name.to_owned(),
                pid: 0,
                lane_id: id,
            }),
            session_tag: p.session_tag.map(str::to_owned),
            live: HashSet::new(),
            producers: HashSet::new(),
            idle_since: None,
            groups: Vec::new(),
            index: HashMap::new(),
        });
        run.live.insert(p.lane_id);
        run.producers.insert(p.lane_id);
        run.idle_since = None;
        id
    }

    /// Takes note of a producer that ended.
    pub(super) fn ended(&mut self, run: u64, lane_id: u64) {
        if let Some(r) = self.by_id.get_mut(&run) {
            r.live.remove(&lane_id);
            if r.live.is_empty() {
                r.idle_since = Some(Instant::now());
            }
        }
    }
}

impl Run {
    /// Folds an ended producer's group `g` (schema state `schema`) into the run's experiment;
    /// `emitted_before` gives the records an earlier run of the aggregator covered (made
    /// only when the group is new here).
    pub(super) fn add(
        &mut self,
        schema: usize,
        g: &Group,
        lost: u64,
        emitted_before: impl FnOnce() -> u64,
    ) {
        if let Some(i) = self.index.get(&(schema, g.key.clone())) {
            let c = &mut self.groups[*i];
            c.acc.merge_producer(&g.experiment);
            c.windows += g.windows;
            c.lost += lost;
            return;
        }
        let mut acc = g.experiment.clone();
        (acc.first_seq, acc.last_seq) = (0, 0);
        self.groups.push(Combined {
            schema,
            values: g.values.clone(),
            acc,
            windows: g.windows,
            lost,
            emitted: emitted_before(),
        });
        self.index
            .insert((schema, g.key.clone()), self.groups.len() - 1);
    }

    /// Whether its experiment summaries are due: every producer has ended, `grace` ago (any
    /// time ago with `now`), and some group has records no summary covered yet.
    pub(super) fn due(&self, grace: Duration, now: bool) -> bool {
        self.live.is_empty()
            && self.idle_since.is_some_and(|t| now || t.elapsed() >= grace)
            && self.groups.iter().any(|c| c.acc.count > c.emitted)
    }

    /// `name` or `name` (session tag `tag`), for log lines.
    pub(super) fn describe(&self) -> String {
        match &self.session_tag {
            Some(t) => format!("{:?} (session tag {t:?})", self.source.name),
            None => format!("{:?}", self.source.name),
        }
    }
}

//! The aggregator's state: schemas with their plans and groups, producers, and what happens
//! when a schema is first met, a producer ends or a time window goes stale.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use snapbus_bus::catalog::MAX_DESCRIPTOR_BYTES;
use snapbus_schemas::SchemaDescriptor;

use super::combine::Runs;
use super::emit::{AggregatorStats, Emitter, Kind, Who};
use super::group::Group;
use super::matches::{OptionMatches, glob_matches};
use super::options::{AggregatorOptions, Window};
use super::resume::Resume;
#[cfg(doc)]
use super::resume::previous_summaries;
use super::sink::SummarySink;
use super::summary::{Layout, SUMMARY_SUFFIX, Source};
use crate::fields::{Extracted, Plan, PlanError};
use crate::{HookError, Producer};

/// The aggregator consumer. Feed it with [`crate::run`]; it emits into `S`.
pub struct Aggregator<S: SummarySink> {
    pub(super) out: Emitter<S>,
    pub(super) schemas: Vec<SchemaState>,
    /// A schema `Arc`'s address → (its state's index, its lane, the `Arc` itself, kept so that
    /// the address is not reused while it is a key here).
    pub(super) by_ptr: HashMap<usize, (usize, u64, Arc<SchemaDescriptor>)>,
    pub(super) last_schema: Option<(usize, usize)>,
    pub(super) producers: HashMap<u64, ProducerState>,
    /// The lane of the last record and its producer's loss count (saves a lookup per record).
    pub(super) last_producer: Option<(u64, u64)>,
    pub(super) resume: Resume,
    pub(super) scratch: Extracted,
    pub(super) key: Vec<u8>,
    /// What the options named that the schemas summarized so far lack (see
    /// [`Aggregator::unmatched_options`]).
    pub(super) matches: OptionMatches,
    /// With `combine_producers`: the runs, whose producers' experiments are combined.
    pub(super) runs: Runs,
}

pub(super) struct ProducerState {
    pub(super) source: Arc<Source>,
    pub(super) lost: u64,
    /// With `combine_producers`: the id of its run.
    pub(super) run: Option<u64>,
}

pub(super) struct SchemaState {
    pub(super) desc: Arc<SchemaDescriptor>,
    /// `None`: not summarized (the reason was printed once).
    pub(super) plan: Option<(Plan, Layout)>,
    pub(super) groups: Vec<Group>,
    pub(super) index: HashMap<Vec<u8>, usize>,
    pub(super) last: Option<usize>,
    pub(super) malformed: u64,
    pub(super) csv: Option<csv::Writer<File>>,
}

impl<S: SummarySink> Aggregator<S> {
    /// A new aggregator emitting into `sink`.
    pub fn new(opts: AggregatorOptions, sink: S) -> Aggregator<S> {
        Aggregator {
            out: Emitter {
                window_name: opts.window.to_string(),
                opts,
                sink,
                buf: Vec::new(),
                stats: AggregatorStats::default(),
            },
            schemas: Vec::new(),
            by_ptr: HashMap::new(),
            last_schema: None,
            producers: HashMap::new(),
            last_producer: None,
            resume: Resume::default(),
            scratch: Extracted::default(),
            key: Vec::new(),
            matches: OptionMatches::default(),
            runs: Runs::default(),
        }
    }

    /// The options naming fields that no schema summarized so far has: each `--field` glob
    /// that matched no field of any of them, and `--episode-field` (with `--window episode`) if
    /// none has it. Empty while no schema was summarized. The aggregator warns about each
    /// schema as it meets it; `--until-end` turns what is left at the end into an error.
    pub fn unmatched_options(&self) -> Vec<String> {
        self.matches.unmatched(&self.out.opts)
    }

    /// Don't emit again what an earlier run emitted (see [`previous_summaries`]).
    pub fn resume_from(&mut self, resume: Resume) {
        self.resume = resume;
    }

    /// At the end of a run (after [`crate::run`] returned): emits the combined experiment
    /// summaries (`combine_producers`) of the runs whose producers have all ended, without
    /// waiting for the grace period. Windows still open are not emitted (incomplete).
    pub fn finish(&mut self) -> Result<(), HookError> {
        self.emit_combined(true)?;
        for s in &mut self.schemas {
            if let Some(w) = s.csv.as_mut() {
                w.flush()?;
            }
        }
        Ok(())
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

    /// The index of `schema`'s state if it has one (no state is made).
    pub(super) fn known_schema_index(&self, schema: &Arc<SchemaDescriptor>) -> Option<usize> {
        let ptr = Arc::as_ptr(schema) as usize;
        match self.last_schema {
            Some((p, i)) if p == ptr => Some(i),
            _ => self.by_ptr.get(&ptr).map(|(i, _, _)| *i),
        }
    }

    pub(super) fn schema_index(&mut self, schema: &Arc<SchemaDescriptor>, lane_id: u64) -> usize {
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
        if schema.id().ends_with(SUMMARY_SUFFIX) && !self.out.opts.summaries_wanted() {
            return state;
        }
        let window_field = self.out.opts.window_field();
        let plan = match Plan::compile(
            schema.root(),
            &self.out.opts.group_by,
            window_field,
            &self.out.opts.fields,
        ) {
            Ok(p) => p,
            Err(e @ PlanError::GroupField(_)) => {
                snapbus_bus::say!(
                    "snapbus aggregator: not summarizing {} v{}: it has {e}",
                    schema.id(),
                    schema.version()
                );
                return state;
            }
        };
        let group = &plan.keys()[..self.out.opts.group_by.len()];
        let layout = Layout::new(schema, group, plan.leaves(), plan.has_dynamic())
            .map_err(|e| e.to_string())
            .and_then(fits_a_catalog);
        let layout = match layout {
            Ok(l) => l,
            Err(e) => {
                snapbus_bus::say!(
                    "snapbus aggregator: not summarizing {} v{}: {e}",
                    schema.id(),
                    schema.version()
                );
                return state;
            }
        };
        self.note_summarized(schema, &plan, &layout);
        state.plan = Some((plan, layout));
        state
    }

    /// Warns about what the options name that `schema` lacks, takes note of what matched and
    /// says how the schema is summarized.
    fn note_summarized(&mut self, schema: &SchemaDescriptor, plan: &Plan, layout: &Layout) {
        let how = match (self.out.opts.window, plan.has_window_field()) {
            (Window::Episode, false) => {
                snapbus_bus::say!(
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
            if glob_matches(&self.out.opts, schema, g) {
                *hit = true;
            } else {
                snapbus_bus::say!(
                    "snapbus aggregator: warning: --field '{}' matches no numeric field of {} v{}",
                    g.as_str(),
                    schema.id(),
                    schema.version()
                );
            }
        }
        m.episode_field |= plan.has_window_field();
        m.summarized
            .push(format!("{} v{}", schema.id(), schema.version()));
        snapbus_bus::say!(
            "snapbus aggregator: summarizing {} v{} {how} as {}: {} field(s){}",
            schema.id(),
            schema.version(),
            layout.desc.id(),
            plan.leaves().len(),
            listed(plan.leaves())
        );
    }

    pub(super) fn producer(&mut self, info: Producer<'_>) -> &mut ProducerState {
        let runs = self.out.opts.combine_producers.then_some(&mut self.runs);
        self.producers
            .entry(info.lane_id)
            .or_insert_with(|| ProducerState {
                source: Arc::new(Source {
                    name: info.name.to_owned(),
                    pid: info.pid,
                    lane_id: info.lane_id,
                }),
                lost: 0,
                run: runs.map(|r| r.joined(info)),
            })
    }

    /// Closes every window of the producer with lane `lane_id` and emits its experiment
    /// summaries (with `combine_producers`, folds them into its run's).
    pub(super) fn end_producer(&mut self, lane_id: u64) -> Result<(), HookError> {
        let (lost, run) = self
            .producers
            .get(&lane_id)
            .map_or((0, None), |p| (p.lost, p.run));
        for (si, s) in self.schemas.iter_mut().enumerate() {
            let SchemaState {
                desc,
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
                if let Some(r) = run.and_then(|id| self.runs.by_id.get_mut(&id)) {
                    let resume = &self.resume;
                    let lane = r.source.lane_id;
                    r.add(si, g, lost, || {
                        resume
                            .of(desc, lane, &g.values)
                            .map_or(0, |e| e.experiment_count)
                    });
                    continue;
                }
                let before = g.experiment_emitted || g.resume.is_some_and(|r| r.experiment);
                if !before && g.experiment.count > 0 {
                    g.experiment_emitted = true;
                    self.out.emit(
                        csv,
                        layout,
                        g.who(),
                        Kind::Experiment,
                        g.windows,
                        lost,
                        &g.experiment,
                    )?;
                }
            }
            // Forget the ended producer's groups (the index is keyed as `NewGroup` keys it).
            groups.retain(|g| g.lane_id != lane_id);
            *index = groups
                .iter()
                .enumerate()
                .map(|(i, g)| (index_key(g.lane_id, &g.key), i))
                .collect();
            *last = None;
        }
        if let Some(run) = run {
            self.runs.ended(run, lane_id);
        }
        self.producers.remove(&lane_id);
        self.last_producer = None;
        // Forget its schemas' addresses (the subscriber drops them with the lane).
        self.by_ptr.retain(|_, (_, lane, _)| *lane != lane_id);
        self.last_schema = None;
        Ok(())
    }

    /// Emits the experiment summaries of the runs whose producers have all ended, the grace
    /// period ago (`now`: whenever), that cover records no earlier summary covered.
    pub(super) fn emit_combined(&mut self, now: bool) -> Result<(), HookError> {
        let grace = self.out.opts.combine_grace;
        for run in self.runs.by_id.values_mut() {
            if !run.due(grace, now) {
                continue;
            }
            let mut records = 0;
            for c in &mut run.groups {
                let s = &mut self.schemas[c.schema];
                let Some((_, layout)) = &s.plan else { continue };
                if c.acc.count <= c.emitted {
                    continue;
                }
                let who = Who {
                    source: &run.source,
                    group: &c.values,
                };
                let acc = &c.acc;
                self.out.emit(
                    &mut s.csv,
                    layout,
                    who,
                    Kind::Experiment,
                    c.windows,
                    c.lost,
                    acc,
                )?;
                c.emitted = acc.count;
                records += acc.count;
            }
            snapbus_bus::say!(
                "snapbus aggregator: the {} producer(s) named {} have ended: their experiment \
                 summaries, combined, cover {records} record(s)",
                run.producers.len(),
                run.describe()
            );
        }
        Ok(())
    }

    /// Closes time windows that ended more than a second ago by the wall clock.
    pub(super) fn close_stale(&mut self) -> Result<(), HookError> {
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

/// A group's key in its schema's index: the lane, then the group-by values as extracted.
pub(super) fn index_key(lane_id: u64, group: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + group.len());
    fill_index_key(&mut key, lane_id, group);
    key
}

/// [`index_key`] into `key` (reused: no allocation per new record).
pub(super) fn fill_index_key(key: &mut Vec<u8>, lane_id: u64, group: &[u8]) {
    key.clear();
    key.extend_from_slice(&lane_id.to_le_bytes());
    key.extend_from_slice(group);
}

/// Leaves named in one log line at most (a wide schema has tens of thousands).
const LISTED_LEAVES: usize = 16;

/// ` (a, b, …)`: the first [`LISTED_LEAVES`] of `leaves`, and how many more there are.
fn listed(leaves: &[String]) -> String {
    match leaves.len() {
        0 => String::new(),
        n if n <= LISTED_LEAVES => format!(" ({})", leaves.join(", ")),
        n => format!(
            " ({}, and {} more)",
            leaves[..LISTED_LEAVES].join(", "),
            n - LISTED_LEAVES
        ),
    }
}

/// `layout`, if the producer's catalog can hold its summary schema (the summary of a schema
/// of tens of thousands of leaves cannot: it is not summarized, rather than failing the
/// aggregator when it emits, over and over).
fn fits_a_catalog(layout: Layout) -> Result<Layout, String> {
    let bytes = layout.desc.to_canonical_bytes().len();
    if bytes > MAX_DESCRIPTOR_BYTES {
        return Err(format!(
            "its summary schema {} would have a descriptor of {bytes} bytes, more than a \
             producer's catalog holds ({MAX_DESCRIPTOR_BYTES}); summarize fewer fields (--field GLOB)",
            layout.desc.id()
        ));
    }
    Ok(layout)
}

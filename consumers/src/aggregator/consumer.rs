//! The aggregator as a [`Consumer`]: each record extracted, grouped and added to its window.

use std::collections::HashMap;
use std::sync::Arc;

use snapbus_schemas::SchemaDescriptor;

use super::group::{Group, same_key};
use super::options::AggregatorOptions;
use super::resume::Resume;
use super::sink::SummarySink;
use super::state::{Aggregator, ProducerState, SchemaState, fill_index_key};
use super::summary::{Acc, Values};
use crate::fields::{Plan, decode_group};
use crate::{Consumer, Extract, Flow, HookError, Lag, ProducerChange, Record};

impl<S: SummarySink> Consumer for Aggregator<S> {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.record(r)
    }

    /// Records of [`IN_PLACE_MIN_BYTES`](crate::fields::IN_PLACE_MIN_BYTES) or more are read in place: the plan's numbers and
    /// keys are extracted from the ring, one pass over the payload, no copy of it.
    fn extract(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<Extract> {
        let si = self.known_schema_index(schema)?;
        let (plan, _) = self.schemas[si].plan.as_ref()?;
        Some(Extract::new(Arc::new(plan.clone())))
    }

    fn on_lag(&mut self, lag: Lag<'_>) -> Result<Flow, HookError> {
        // Damaged records are missing from the windows as overwritten ones are.
        let missing = lag.lost + lag.damaged;
        self.out.stats.lost += missing;
        self.producer(lag.producer).lost += missing;
        self.last_producer = None;
        Ok(Flow::Continue)
    }

    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        match change {
            ProducerChange::Joined(p) => {
                self.producer(p);
            }
            ProducerChange::Ended(p) => self.end_producer(p.lane_id)?,
            ProducerChange::Died(_) => {}
        }
        Ok(Flow::Continue)
    }

    fn flush(&mut self) -> Result<(), HookError> {
        self.close_stale()?;
        self.emit_combined(false)?;
        for s in &mut self.schemas {
            if let Some(w) = s.csv.as_mut() {
                w.flush()?;
            }
        }
        Ok(())
    }
}

impl<S: SummarySink> Aggregator<S> {
    /// Summarizes a record: its numbers are extracted from its payload, or were already
    /// (`r.extracted`: read in place).
    fn record(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
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
        let SchemaState {
            desc,
            plan,
            groups,
            index,
            last,
            malformed,
            csv,
        } = &mut self.schemas[si];
        let Some((plan, layout)) = plan else {
            self.out.stats.skipped += 1;
            return Ok(Flow::Continue);
        };
        let extracted = match r.extracted {
            Some(x) => Ok(x),
            None => plan
                .extract(r.payload, &mut self.scratch)
                .map(|()| &self.scratch),
        };
        let Ok(x) = extracted else {
            self.out.stats.skipped += 1;
            *malformed += 1;
            if *malformed == 1 {
                warn_malformed(desc, r);
            }
            return Ok(Flow::Continue);
        };
        let gi = match *last {
            Some(i) if groups[i].lane_id == lane_id && same_key(&groups[i].key, &x.group) => i,
            _ => NewGroup {
                opts: &self.out.opts,
                resume: &self.resume,
                producers: &self.producers,
                desc,
                plan,
                lane_id,
            }
            .find_or_add(&mut self.key, &x.group, groups, index)?,
        };
        *last = Some(gi);
        let g = &mut groups[gi];
        if !g.mine {
            self.out.stats.other_workers += 1;
            return Ok(Flow::Continue);
        }
        self.out.stats.summarized += 1;
        let window_key = if plan.has_window_field() {
            x.window
        } else {
            None
        };
        if let Some(f) = g.add(
            self.out.opts.window,
            window_key,
            (r.header.t_nanos, r.header.seq),
            Values {
                leaves: &x.values,
                dynamic: &x.dynamic,
            },
            plan.binary_leaves(),
            producer_lost,
        ) {
            self.out.finished(csv, layout, g, &f)?;
        }
        Ok(Flow::Continue)
    }
}

/// Says (once per schema: the caller counts) that a payload does not match its descriptor.
fn warn_malformed(desc: &SchemaDescriptor, r: &Record<'_>) {
    snapbus_bus::say!(
        "snapbus aggregator: a payload of {} v{} from {} (pid {}) does not match its \
         descriptor; such records are skipped",
        desc.id(),
        desc.version(),
        r.producer.name,
        r.producer.pid
    );
}

/// What a record's group is made from when it is not the last record's group.
struct NewGroup<'a> {
    opts: &'a AggregatorOptions,
    resume: &'a Resume,
    producers: &'a HashMap<u64, ProducerState>,
    desc: &'a SchemaDescriptor,
    plan: &'a Plan,
    lane_id: u64,
}

impl NewGroup<'_> {
    /// The index in `groups` of the group with values `group` ([`Extracted::group`]), made if
    /// new. `key` is scratch space (the group's key in `index`: lane, then `group`).
    ///
    /// [`Extracted::group`]: crate::fields::Extracted::group
    fn find_or_add(
        &self,
        key: &mut Vec<u8>,
        group: &[u8],
        groups: &mut Vec<Group>,
        index: &mut HashMap<Vec<u8>, usize>,
    ) -> Result<usize, HookError> {
        let (opts, desc, lane_id) = (self.opts, self.desc, self.lane_id);
        fill_index_key(key, lane_id, group);
        if let Some(i) = index.get(key.as_slice()) {
            return Ok(*i);
        }
        let values =
            decode_group(group, opts.group_by.len()).ok_or("a group key that does not decode")?;
        let producer = self
            .producers
            .get(&lane_id)
            .ok_or("producer state missing")?;
        let mine = opts.workers <= 1 || {
            // Combined producers' groups go to one worker: the run's, not the lane's.
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            h.update(desc.id().as_bytes());
            h.update(&producer.run.unwrap_or(lane_id).to_le_bytes());
            h.update(group);
            h.digest() % u64::from(opts.workers) == u64::from(opts.worker)
        };
        let resume = self.resume.of(desc, lane_id, &values);
        let source = Arc::clone(&producer.source);
        groups.push(Group {
            lane_id,
            key: group.to_vec(),
            source,
            values,
            mine,
            open: None,
            experiment: Acc::new(self.plan.binary_leaves()),
            windows: 0,
            next_index: 0,
            lost_mark: 0,
            resume,
            experiment_emitted: false,
        });
        index.insert(key.clone(), groups.len() - 1);
        Ok(groups.len() - 1)
    }
}

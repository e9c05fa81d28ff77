//! Groups: one per (producer, group-by values) of a schema, with its open window and its
//! experiment so far.

use std::sync::Arc;

use super::options::Window;
use super::resume::EmittedBefore;
use super::summary::{Acc, Source, Values};
#[cfg(doc)]
use crate::fields::Extracted;
use crate::fields::KeyValue;

pub(super) struct Open {
    pub(super) acc: Acc,
    /// The episode number or the time bucket.
    pub(super) key: u64,
    pub(super) index: u64,
}

pub(super) struct Group {
    pub(super) lane_id: u64,
    /// The group-by values as extracted ([`Extracted::group`]).
    pub(super) key: Vec<u8>,
    pub(super) source: Arc<Source>,
    pub(super) values: Vec<KeyValue>,
    pub(super) mine: bool,
    pub(super) open: Option<Open>,
    pub(super) experiment: Acc,
    pub(super) windows: u64,
    pub(super) next_index: u64,
    pub(super) lost_mark: u64,
    pub(super) resume: Option<EmittedBefore>,
    pub(super) experiment_emitted: bool,
}

/// A window that closed, to be emitted.
pub(super) struct Finished {
    pub(super) acc: Acc,
    pub(super) index: u64,
    pub(super) lost: u64,
    /// An earlier run of this worker emitted it already.
    pub(super) emitted_before: bool,
}

impl Group {
    /// Adds a record; returns the window it closed, if any.
    #[inline]
    pub(super) fn add(
        &mut self,
        window: Window,
        window_key: Option<u64>,
        meta: (u64, u64),
        values: Values<'_>,
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
    pub(super) fn close(&mut self, producer_lost: u64) -> Option<Finished> {
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

/// Whether two group keys are equal (short keys, compared inline: a `memcmp` call per record
/// showed in the profile).
#[inline]
pub(super) fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

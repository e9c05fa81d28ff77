//! Reading several lanes at once (one per producer a consumer subscribes to).

use super::reader::{LaneReader, Poll};
use crate::mem::LaneMem;

/// A consumer's readers of several lanes, polled round-robin so one busy or stalled lane never
/// starves the others. Filtering by schema key is per reader ([`LaneReader::set_filter`]).
pub struct ReaderSet<M: LaneMem> {
    readers: Vec<LaneReader<M>>,
    next: usize,
}

impl<M: LaneMem> Default for ReaderSet<M> {
    fn default() -> Self {
        ReaderSet {
            readers: Vec::new(),
            next: 0,
        }
    }
}

impl<M: LaneMem> ReaderSet<M> {
    /// An empty set.
    pub fn new() -> ReaderSet<M> {
        ReaderSet::default()
    }

    /// Adds a reader; returns its index.
    pub fn push(&mut self, reader: LaneReader<M>) -> usize {
        self.readers.push(reader);
        self.readers.len() - 1
    }

    /// Removes reader `i` (later indices shift down by one).
    pub fn remove(&mut self, i: usize) -> Option<LaneReader<M>> {
        (i < self.readers.len()).then(|| self.readers.remove(i))
    }

    /// The readers.
    pub fn readers(&self) -> &[LaneReader<M>] {
        &self.readers
    }

    /// The readers, mutably (to set filters or mark a writer gone).
    pub fn readers_mut(&mut self) -> &mut [LaneReader<M>] {
        &mut self.readers
    }

    /// Whether any lane has bytes ahead of its cursor (the check before sleeping).
    pub fn has_pending_bytes(&self) -> bool {
        self.readers.iter().any(LaneReader::has_pending_bytes)
    }

    /// Polls the next lane (round-robin) that has bytes ahead of its cursor; `(index, poll)`,
    /// or `None` when no lane has anything.
    pub fn poll(&mut self) -> Option<(usize, Poll<'_>)> {
        let n = self.readers.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if self.readers[i].has_pending_bytes() {
                self.next = (i + 1) % n;
                return Some((i, self.readers[i].poll()));
            }
        }
        None
    }
}

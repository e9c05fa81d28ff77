//! The outbox between the reader thread and the sender thread: pending metric points (state:
//! a newer point of a series replaces the older one) and a byte-capped queue of encoded log
//! and span batches that drops the oldest batch when full. The reader only ever takes the
//! lock for a moment; the sender never holds it while it talks to the network.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::metrics::Point;
use super::stats::{DropReason, ExporterStats, Signal};

/// An encoded request of log records or spans.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) signal: Signal,
    pub(crate) body: Vec<u8>,
    pub(crate) items: u64,
    pub(crate) first_t: u64,
    pub(crate) last_t: u64,
}

/// Data that never reached the receiver, reported once it is reachable again.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Gap {
    /// Items per (reason, signal).
    pub(crate) counts: BTreeMap<(&'static str, &'static str), u64>,
    /// Producer time of the first and last item lost (0: unknown).
    pub(crate) from_t: u64,
    pub(crate) to_t: u64,
}

impl Gap {
    fn add(&mut self, reason: DropReason, signal: Signal, n: u64, from_t: u64, to_t: u64) {
        if n == 0 {
            return;
        }
        *self
            .counts
            .entry((reason.name(), signal.name()))
            .or_default() += n;
        if from_t != 0 && (self.from_t == 0 || from_t < self.from_t) {
            self.from_t = from_t;
        }
        self.to_t = self.to_t.max(to_t);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// What the sender does next.
pub(crate) enum Work {
    /// Send these metric points (by series id).
    Metrics(BTreeMap<u64, Point>),
    /// Send this batch (its id in the queue).
    Batch(u64, Arc<Batch>),
    /// Nothing left to do: the outbox is closed.
    Stop,
}

struct Inner {
    metrics: BTreeMap<u64, Point>,
    queue: VecDeque<(u64, Arc<Batch>)>,
    queued_bytes: usize,
    inflight: Option<u64>,
    /// Whether metric points are being sent.
    metrics_inflight: bool,
    next_id: u64,
    gap: Gap,
    /// Set by [`Outbox::close`]: the shutdown deadline.
    closing: Option<Instant>,
    /// Whether the next work should prefer the queue over metrics (fairness).
    queue_turn: bool,
}

/// See the module docs.
pub(crate) struct Outbox {
    inner: Mutex<Inner>,
    cv: Condvar,
    cap_bytes: usize,
    stats: Arc<ExporterStats>,
}

impl Outbox {
    pub(crate) fn new(cap_bytes: usize, stats: Arc<ExporterStats>) -> Outbox {
        Outbox {
            inner: Mutex::new(Inner {
                metrics: BTreeMap::new(),
                queue: VecDeque::new(),
                queued_bytes: 0,
                inflight: None,
                metrics_inflight: false,
                next_id: 0,
                gap: Gap::default(),
                closing: None,
                queue_turn: false,
            }),
            cv: Condvar::new(),
            cap_bytes,
            stats,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds metric points; a point of a series already pending replaces it.
    pub(crate) fn put_metrics(&self, points: Vec<(u64, Point)>) {
        if points.is_empty() {
            return;
        }
        let mut g = self.lock();
        g.metrics.extend(points);
        drop(g);
        self.cv.notify_all();
    }

    /// Gives back metric points that could not be sent: each stays unless a newer point of its
    /// series arrived meanwhile.
    pub(crate) fn return_metrics(&self, points: BTreeMap<u64, Point>) {
        let mut g = self.lock();
        for (id, p) in points {
            g.metrics.entry(id).or_insert(p);
        }
        g.metrics_inflight = false;
        drop(g);
        self.cv.notify_all();
    }

    /// The metric points being sent were sent (or refused).
    pub(crate) fn metrics_done(&self) {
        self.lock().metrics_inflight = false;
        self.cv.notify_all();
    }

    /// Waits until everything handed to the outbox was sent or dropped; false if `deadline`
    /// came first.
    pub(crate) fn wait_sent(&self, deadline: Instant) -> bool {
        let mut g = self.lock();
        loop {
            if g.metrics.is_empty() && !g.metrics_inflight && g.queue.is_empty() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = self
                .cv
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Queues a batch; while the queue would exceed its byte cap, the oldest batch not being
    /// sent is dropped (counted `queue_full`), and if only the one being sent is left, this
    /// batch is. A batch larger than the whole cap is dropped by itself, evicting nothing.
    pub(crate) fn push(&self, batch: Batch) {
        let mut g = self.lock();
        let len = batch.body.len();
        if len > self.cap_bytes {
            self.drop_batch(&mut g, &batch, DropReason::QueueFull);
            self.stats.set_queue_bytes(g.queued_bytes as u64);
            return;
        }
        while g.queued_bytes + len > self.cap_bytes {
            let inflight = g.inflight;
            let Some(pos) = g.queue.iter().position(|(id, _)| Some(*id) != inflight) else {
                break;
            };
            let Some((_, old)) = g.queue.remove(pos) else {
                break;
            };
            g.queued_bytes -= old.body.len();
            self.drop_batch(&mut g, &old, DropReason::QueueFull);
        }
        if g.queued_bytes + len > self.cap_bytes {
            self.drop_batch(&mut g, &batch, DropReason::QueueFull);
        } else {
            let id = g.next_id;
            g.next_id += 1;
            g.queued_bytes += len;
            g.queue.push_back((id, Arc::new(batch)));
        }
        self.stats.set_queue_bytes(g.queued_bytes as u64);
        drop(g);
        self.cv.notify_all();
    }

    fn drop_batch(&self, g: &mut Inner, b: &Batch, reason: DropReason) {
        self.stats.add_dropped(b.signal, reason, b.items);
        g.gap.add(reason, b.signal, b.items, b.first_t, b.last_t);
    }

    /// Notes items dropped outside the queue (rejected, or refused metric points).
    pub(crate) fn note_dropped(
        &self,
        signal: Signal,
        reason: DropReason,
        n: u64,
        from_t: u64,
        to_t: u64,
    ) {
        self.stats.add_dropped(signal, reason, n);
        self.lock().gap.add(reason, signal, n, from_t, to_t);
    }

    /// Removes the batch `id` (sent, or rejected: counted by the caller).
    pub(crate) fn finish(&self, id: u64) {
        let mut g = self.lock();
        if g.inflight == Some(id) {
            g.inflight = None;
        }
        if let Some(pos) = g.queue.iter().position(|(i, _)| *i == id) {
            if let Some((_, b)) = g.queue.remove(pos) {
                g.queued_bytes -= b.body.len();
            }
        }
        self.stats.set_queue_bytes(g.queued_bytes as u64);
        drop(g);
        self.cv.notify_all();
    }

    /// Leaves batch `id` queued for another attempt.
    pub(crate) fn release(&self, id: u64) {
        let mut g = self.lock();
        if g.inflight == Some(id) {
            g.inflight = None;
        }
        drop(g);
        self.cv.notify_all();
    }

    /// Takes the gap to report, if any (the caller gives it back if it could not be sent).
    pub(crate) fn take_gap(&self) -> Option<Gap> {
        let mut g = self.lock();
        (!g.gap.is_empty()).then(|| std::mem::take(&mut g.gap))
    }

    /// Gives back a gap that could not be reported (merged with what was lost since).
    pub(crate) fn return_gap(&self, gap: Gap) {
        let mut g = self.lock();
        for ((r, s), n) in gap.counts {
            *g.gap.counts.entry((r, s)).or_default() += n;
        }
        if gap.from_t != 0 && (g.gap.from_t == 0 || gap.from_t < g.gap.from_t) {
            g.gap.from_t = gap.from_t;
        }
        g.gap.to_t = g.gap.to_t.max(gap.to_t);
    }

    /// Closes the outbox: the sender sends what is left until `deadline`.
    pub(crate) fn close(&self, deadline: Instant) {
        self.lock().closing = Some(deadline);
        self.cv.notify_all();
    }

    /// The shutdown deadline, once closed.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.lock().closing
    }

    /// Waits for work (not before `not_before`, a backoff); [`Work::Stop`] once closed and
    /// empty, or at the deadline (what is left is then counted `shutdown`).
    pub(crate) fn next(&self, not_before: Option<Instant>) -> Work {
        let mut g = self.lock();
        loop {
            let now = Instant::now();
            if let Some(deadline) = g.closing {
                let empty = g.metrics.is_empty() && g.queue.is_empty();
                if empty || now >= deadline || not_before.is_some_and(|t| t >= deadline) {
                    self.drop_rest(&mut g);
                    return Work::Stop;
                }
            }
            let wait_until = not_before.filter(|t| *t > now);
            let has_work = !g.metrics.is_empty() || !g.queue.is_empty();
            if has_work && wait_until.is_none() {
                g.queue_turn = !g.queue_turn;
                let from_queue = !g.queue.is_empty() && (g.queue_turn || g.metrics.is_empty());
                if from_queue {
                    let (id, b) = match g.queue.front() {
                        Some((id, b)) => (*id, Arc::clone(b)),
                        None => continue,
                    };
                    g.inflight = Some(id);
                    return Work::Batch(id, b);
                }
                g.metrics_inflight = true;
                return Work::Metrics(std::mem::take(&mut g.metrics));
            }
            let until = match (wait_until, g.closing) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            g = match until {
                Some(t) => {
                    self.cv
                        .wait_timeout(g, t.saturating_duration_since(now))
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.cv.wait(g).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }

    /// Counts everything still pending as dropped at shutdown.
    fn drop_rest(&self, g: &mut Inner) {
        let points = std::mem::take(&mut g.metrics);
        self.stats
            .add_dropped(Signal::Metrics, DropReason::Shutdown, points.len() as u64);
        for (_, b) in std::mem::take(&mut g.queue) {
            self.stats
                .add_dropped(b.signal, DropReason::Shutdown, b.items);
        }
        g.queued_bytes = 0;
        g.inflight = None;
        g.metrics_inflight = false;
        self.stats.set_queue_bytes(0);
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(bytes: usize) -> Batch {
        Batch {
            signal: Signal::Logs,
            body: vec![0; bytes],
            items: 1,
            first_t: 1,
            last_t: 2,
        }
    }

    #[test]
    fn a_batch_larger_than_the_cap_is_dropped_alone() {
        let stats = Arc::new(ExporterStats::default());
        let outbox = Outbox::new(100, Arc::clone(&stats));
        outbox.push(batch(40));
        outbox.push(batch(40));
        outbox.push(batch(101));
        let s = stats.snapshot();
        assert_eq!(s.queue_bytes, 80, "the queued batches are kept");
        assert_eq!(
            s.dropped[0][1], 1,
            "only the oversized one is dropped: {:?}",
            s.dropped
        );
        // A batch that fits evicts the oldest to make room.
        outbox.push(batch(60));
        let s = stats.snapshot();
        assert_eq!(s.queue_bytes, 100);
        assert_eq!(s.dropped[0][1], 2);
    }
}

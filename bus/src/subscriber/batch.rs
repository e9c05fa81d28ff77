//! Reading in batches ([`BatchReads`]), and the cut that ends a subscription where the
//! producers are now ([`Subscriber::cut_now`]).

use std::time::{Duration, Instant};

use super::Subscriber;
use super::lanes::SubLane;

/// Reading in batches ([`Subscriber::read_in_batches`]): a lane is read only once it holds
/// `min_bytes` not yet read, or once its oldest unread byte has waited `max_wait`; then
/// everything it holds is read.
///
/// A consumer that reads right behind its producer keeps taking the cache line the producer
/// is writing (both CPUs trade it, for every record). One that stays a batch behind reads
/// lines the producer is done with, and goes back to sleep for a whole batch at a time. The
/// price is latency (up to `max_wait`): for consumers that do not need microseconds (a
/// recorder, an aggregator, an exporter), not for a live view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchReads {
    /// Bytes a lane must hold unread before it is read (64 KiB by default).
    pub min_bytes: u64,
    /// The longest a byte waits to be read (5 ms by default).
    pub max_wait: Duration,
}

impl Default for BatchReads {
    fn default() -> BatchReads {
        BatchReads {
            min_bytes: 64 << 10,
            max_wait: Duration::from_millis(5),
        }
    }
}

impl Subscriber {
    /// Reading in batches with bytes there but not a batch yet: naps for a slice of the
    /// batch's longest wait (the doorbell would ring at once). Whether it napped.
    pub(super) fn nap_for_batch(&self, nap: Duration) -> bool {
        match self.batch {
            Some(b) if self.any_pending() => {
                std::thread::sleep(nap.min(b.max_wait / 4).max(Duration::from_micros(50)));
                true
            }
            _ => false,
        }
    }

    /// Stops where the producers are now: each lane is read up to what its producer has
    /// claimed at this moment, then no further; lanes that appear later are not read (what
    /// [`SubscribeOptions::cut`](super::SubscribeOptions::cut) does at subscription time).
    /// For a consumer told to stop (a recorder on Ctrl-C) that first takes in what was emitted
    /// before it was told. A lane that reaches its cut ends without an
    /// [`Event::Ended`](super::Event::Ended) (its producer has not ended; one that does end
    /// before the cut is reported as usual); [`Subscriber::all_ended`] is true once every lane
    /// is at its cut or ended.
    pub fn cut_now(&mut self) {
        // Lanes the broker has announced but this subscriber has not taken yet are cut too.
        self.pump_control();
        self.opts.cut = true;
        for l in &mut self.lanes {
            if l.cut_at.is_none() && !l.ended {
                l.cut_at = Some(l.reader.lane().stats().claim_tail);
                l.cut_silently = true;
            }
        }
    }

    /// Bytes of frames (records with their headers and padding) claimed in the lanes not read
    /// to their end (up to their cut, if any) and not read yet: what a consumer that stops now
    /// leaves behind.
    pub fn unread_bytes(&self) -> u64 {
        self.lanes
            .iter()
            .filter(|l| !l.ended)
            .map(|l| {
                let pending = l.reader.pending_bytes();
                match l.cut_at {
                    Some(cut) => pending.min(cut.saturating_sub(l.reader.position())),
                    None => pending,
                }
            })
            .sum()
    }

    /// Reads in batches from now on ([`BatchReads`]): each lane once it holds
    /// `batch.min_bytes` not yet read or its oldest unread byte has waited `batch.max_wait`,
    /// then to its end. `None`: record by record, as soon as each is there (the default).
    pub fn read_in_batches(&mut self, batch: Option<BatchReads>) {
        self.batch = batch;
        if batch.is_none() {
            for l in &mut self.lanes {
                l.in_batch = false;
                l.pending_since = None;
            }
        }
    }
}

impl SubLane {
    /// Whether reading in batches `b` holds this lane back now: not before a batch is there,
    /// or its first byte has waited long enough (a lane with nothing pending is read as usual:
    /// its end, or its producer's death). A batch is at most a quarter of the ring, so a small
    /// ring is read before it wraps. A lane being cut is never held back.
    #[inline]
    pub(super) fn holds_back_for_batch(&mut self, b: &BatchReads) -> bool {
        if self.in_batch || self.cut_at.is_some() {
            return false;
        }
        let pending = self.reader.pending_bytes();
        if pending > 0 {
            let since = *self.pending_since.get_or_insert_with(Instant::now);
            let min = b.min_bytes.min(self.reader.lane().geometry().capacity / 4);
            if pending < min && since.elapsed() < b.max_wait {
                return true;
            }
            self.in_batch = true;
        }
        false
    }
}

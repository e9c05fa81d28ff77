//! The station's books per remote lane: which records are new, which were seen already (a
//! history answer overlapping the live stream), and how many never arrived.
//!
//! Within one pass (a live bridge, or one history answer) the node numbers the records it
//! sends (`n`) and counts what its own reader lost (`ring_lost`): a jump in `n` is loss on the
//! wire (congestion, a dead link), a rise of `ring_lost` loss on the node. Across passes (the
//! node's bridge restarted, or a history answer ends and the live stream goes on) the lane's
//! own sequence numbers decide: records at or before the last one re-emitted are duplicates,
//! and the gap after it is lost — counted over every record of the lane, as the bus counts a
//! ring's overwrites.

use super::wire::{Header, KIND_RECORD};

/// What to do with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Re-emit the record, after marking `lost` records as lost.
    Emit {
        /// Records lost just before it.
        lost: u64,
    },
    /// Seen already: drop it.
    Duplicate,
    /// A loss report or a lane's end: mark `lost` records as lost.
    Loss {
        /// Records lost.
        lost: u64,
    },
}

/// The books of one remote lane.
#[derive(Debug, Default, Clone)]
pub struct Books {
    last_seq: Option<u64>,
    pass: u64,
    next_n: u64,
    ring_lost: u64,
    pass_seq: u64,
}

impl Books {
    /// Takes message `h` into the books.
    pub fn take(&mut self, h: &Header<'_>) -> Verdict {
        let same = self.last_seq.is_some() && h.pass == self.pass;
        if h.kind != KIND_RECORD {
            if !same {
                // The next record's sequence gap counts it.
                return Verdict::Loss { lost: 0 };
            }
            let lost = h.ring_lost.saturating_sub(self.ring_lost);
            self.ring_lost = self.ring_lost.max(h.ring_lost);
            return Verdict::Loss { lost };
        }
        let Some(last) = self.last_seq else {
            // A lane first seen: nothing before it is owed (as a consumer joining late).
            self.enter(h);
            self.last_seq = Some(h.seq);
            return Verdict::Emit { lost: 0 };
        };
        if !same {
            self.enter(h);
            if h.seq <= last {
                return Verdict::Duplicate;
            }
            self.last_seq = Some(h.seq);
            return Verdict::Emit {
                lost: h.seq - last - 1,
            };
        }
        if h.n < self.next_n {
            return Verdict::Duplicate;
        }
        let wire = h.n - self.next_n;
        let ring = h.ring_lost.saturating_sub(self.ring_lost);
        let caught_up = self.pass_seq >= last;
        self.enter(h);
        if h.seq <= last {
            return Verdict::Duplicate;
        }
        let mut lost = wire + ring;
        if !caught_up {
            // Part of the gap in `n` was records re-emitted before from another pass.
            lost = lost.min(h.seq - last - 1);
        }
        self.last_seq = Some(h.seq);
        Verdict::Emit { lost }
    }

    fn enter(&mut self, h: &Header<'_>) {
        if h.pass != self.pass {
            self.ring_lost = 0;
        }
        self.pass = h.pass;
        self.next_n = h.n + 1;
        self.ring_lost = self.ring_lost.max(h.ring_lost);
        self.pass_seq = h.seq;
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::KIND_LOSS;
    use super::*;

    fn rec(pass: u64, n: u64, seq: u64, ring_lost: u64) -> Header<'static> {
        Header {
            kind: KIND_RECORD,
            pass,
            n,
            seq,
            ring_lost,
            t_nanos: 0,
            pid: 1,
            level: 2,
            schema_version: 1,
            fingerprint: 1,
            producer: "p",
            emitter: "",
            descriptor: &[],
        }
    }

    #[test]
    fn wire_ring_restart_and_history() {
        let mut b = Books::default();
        assert_eq!(b.take(&rec(1, 0, 10, 0)), Verdict::Emit { lost: 0 });
        assert_eq!(b.take(&rec(1, 1, 11, 0)), Verdict::Emit { lost: 0 });
        // Two samples lost on the wire.
        assert_eq!(b.take(&rec(1, 4, 14, 0)), Verdict::Emit { lost: 2 });
        // Three records lost in the node's ring.
        assert_eq!(b.take(&rec(1, 5, 18, 3)), Verdict::Emit { lost: 3 });
        // A history answer overlapping: duplicates, then nothing new.
        for (n, seq) in (12..=18).enumerate() {
            assert_eq!(b.take(&rec(2, n as u64, seq, 0)), Verdict::Duplicate);
        }
        // The node's bridge restarted from the latest record: the gap is lost.
        assert_eq!(b.take(&rec(3, 0, 30, 0)), Verdict::Emit { lost: 11 });
        assert_eq!(b.take(&rec(3, 1, 31, 0)), Verdict::Emit { lost: 0 });
        // A loss report of the live pass.
        let mut l = rec(3, 2, 31, 4);
        l.kind = KIND_LOSS;
        assert_eq!(b.take(&l), Verdict::Loss { lost: 4 });
        assert_eq!(b.take(&rec(3, 2, 36, 4)), Verdict::Emit { lost: 0 });
    }
}

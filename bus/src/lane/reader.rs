//! Reading a lane: a private cursor that validates every frame after reading it
//! (ARCHITECTURE.md, "Lanes").
//!
//! For a frame at `pos`: load the commit word (Acquire); if it is `tag(pos)`, read the header
//! words, bounds-check them, copy (or view) the payload with atomic loads, then `fence(Acquire)`
//! and load `write_limit` (which the writer raises before writing past it, so it is at least
//! `claim_tail`) and, only if that has passed `pos + capacity`, `claim_tail`: if it has too, a
//! writer may have overwritten what was read, so the copy is discarded (torn) and the cursor
//! resyncs. A frame is delivered only if it was committed and not overwritten while it was
//! read.
//!
//! The whole segment is untrusted: every length and offset is checked before use, garbage is
//! skipped and counted, and nothing here can panic or read out of bounds. The validating loop
//! is the cursor's (`cursor.rs`); this module is the reader's API around it.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use super::Lane;
use super::cursor::{Cursor, FrameMeta, ReaderStats, RunEnd, StartAt, Step, Visit, tail_of};
use super::layout::LaneState;
use super::view::PayloadView;
use crate::mem::LaneMem;

/// A delivered record.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Its header.
    pub meta: FrameMeta,
    /// Its payload (a private copy, validated).
    pub payload: &'a [u8],
}

/// The result of one [`LaneReader::poll`].
#[derive(Debug, PartialEq, Eq)]
pub enum Poll<'a> {
    /// The next record.
    Frame(Frame<'a>),
    /// Exactly this many records of the lane were overwritten (or lost with a dead writer, or
    /// lost in damaged memory: see [`ReaderStats::damaged`]) before this reader could read
    /// them. Reported just before the next delivered record.
    Lagged(u64),
    /// Nothing new.
    Empty,
    /// The next frame is claimed but not yet committed; poll again.
    Pending,
    /// The writer closed the lane and every record was read.
    Closed,
}

/// Why [`LaneReader::read_in_place`] delivered no record: every [`Poll`] but a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoFrame {
    /// As [`Poll::Lagged`].
    Lagged(u64),
    /// As [`Poll::Empty`].
    Empty,
    /// As [`Poll::Pending`].
    Pending,
    /// As [`Poll::Closed`].
    Closed,
}

impl From<NoFrame> for Poll<'_> {
    fn from(n: NoFrame) -> Self {
        match n {
            NoFrame::Lagged(lost) => Poll::Lagged(lost),
            NoFrame::Empty => Poll::Empty,
            NoFrame::Pending => Poll::Pending,
            NoFrame::Closed => Poll::Closed,
        }
    }
}

/// The producer-side counters of a lane (see [`Lane::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneStats {
    /// Absolute end of the newest claim.
    pub claim_tail: u64,
    /// The state word, if valid.
    pub state: Option<LaneState>,
    /// DATA frames committed.
    pub frames_committed: u64,
    /// Claims dropped by the lap guard.
    pub dropped_wrap: u64,
    /// Records refused as oversize.
    pub dropped_oversize: u64,
    /// Claims aborted.
    pub aborted: u64,
    /// The producer's pid.
    pub producer_pid: u32,
}

/// A cursor over one lane. Private to its consumer: attaching, detaching, stalling or dying
/// costs the producer nothing.
pub struct LaneReader<M: LaneMem> {
    lane: Arc<Lane<M>>,
    cur: Cursor,
}

impl<M: LaneMem> LaneReader<M> {
    pub(crate) fn new(lane: Arc<Lane<M>>, start: StartAt) -> LaneReader<M> {
        let cur = Cursor::new(&lane, start);
        LaneReader { lane, cur }
    }

    /// Count the records overwritten before this reader's first record as lost too (the
    /// lane's first record is number 0), as if it had started at the lane's beginning. For
    /// consumers that account for a producer's whole run (the aggregator). No effect once a
    /// record was read.
    pub fn count_loss_from_lane_start(&mut self) {
        if self.cur.next_seq.is_none() {
            self.cur.next_seq = Some((0, 0));
        }
    }

    /// Only deliver records whose schema key is in `keys` (others are skipped without copying
    /// their payload). Loss counts still cover every record of the lane. For tests and the
    /// fuzz target: the subscriber filters by glob, not through this.
    #[doc(hidden)]
    pub fn set_filter(&mut self, keys: impl IntoIterator<Item = u16>) {
        let mut bits = vec![0u64; 1024].into_boxed_slice();
        for k in keys {
            bits[usize::from(k) / 64] |= 1 << (k % 64);
        }
        self.cur.filter = Some(bits);
    }

    /// Deliver every record.
    pub fn clear_filter(&mut self) {
        self.cur.filter = None;
    }

    /// Tell the reader the writer is gone (its process died: socket EOF or pidfd). Frames it
    /// left claimed but uncommitted are then skipped at once and counted as holes.
    pub fn set_writer_gone(&mut self, gone: bool) {
        self.cur.writer_gone = gone;
    }

    /// How long a live writer may leave a frame uncommitted before it is skipped.
    pub fn set_stall_timeout(&mut self, timeout: Duration) {
        self.cur.stall_timeout = timeout;
    }

    /// The reader's counters.
    pub fn stats(&self) -> ReaderStats {
        self.cur.stats
    }

    /// The lane.
    pub fn lane(&self) -> &Arc<Lane<M>> {
        &self.lane
    }

    /// The absolute position of the next frame to read.
    pub fn position(&self) -> u64 {
        self.cur.pos
    }

    /// The sequence number the next record should have, once known (a record was read, or
    /// the reader started at the lane's beginning): records of the lane before it were read
    /// or counted as lost.
    pub fn expected_seq(&self) -> Option<u64> {
        self.cur.next_seq.map(|(seq, _)| seq)
    }

    /// Whether the lane has claimed bytes ahead of the cursor (a cheap check before sleeping).
    pub fn has_pending_bytes(&self) -> bool {
        self.tail() > self.cur.pos
    }

    /// How many bytes the lane has claimed ahead of the cursor (records not read yet, and
    /// the frames' headers and padding; more than the ring holds once the reader is lapped).
    pub fn pending_bytes(&self) -> u64 {
        self.tail().saturating_sub(self.cur.pos)
    }

    fn tail(&self) -> u64 {
        tail_of(&self.lane)
    }

    /// Reads the next record into the reader's buffer.
    pub fn poll(&mut self) -> Poll<'_> {
        let mut scratch = std::mem::take(&mut self.cur.scratch);
        let step = self.cur.step(&self.lane, |meta, view| {
            scratch.resize(meta.payload_len, 0);
            view.copy_to(&mut scratch)
        });
        self.cur.scratch = scratch;
        match step {
            Step::Deliver(meta, true) => {
                self.cur.stats.delivered += 1;
                Poll::Frame(Frame {
                    meta,
                    payload: self.cur.scratch.get(..meta.payload_len).unwrap_or(&[]),
                })
            }
            // A failed copy is out of bounds, which validation already excludes; treat it as
            // garbage rather than deliver it.
            Step::Deliver(_, false) => {
                self.cur.stats.garbage += 1;
                Poll::Pending
            }
            Step::Lagged(n) => Poll::Lagged(n),
            Step::Empty => Poll::Empty,
            Step::Pending => Poll::Pending,
            Step::Closed => Poll::Closed,
        }
    }

    /// Reads the next record in place, without copying its payload: `f` sees the header and a
    /// view of the payload in the ring, and `Ok((meta, r))` is returned only if the frame was
    /// not overwritten while `f` ran and turned out to be a record to deliver. Otherwise `r` is
    /// dropped and the reader goes on to the next frame in the same call, calling `f` again:
    /// `f` may run more than once per call and must not have side effects that matter if its
    /// result is discarded.
    ///
    /// Always inlined, so that `f`'s value reaches the caller in registers rather than through
    /// the stack ([`Subscriber::drain_in_place`](crate::subscriber::Subscriber::drain_in_place),
    /// "Speed").
    #[inline(always)]
    pub fn read_in_place<R>(
        &mut self,
        f: impl FnMut(&FrameMeta, &PayloadView<'_, M>) -> R,
    ) -> Result<(FrameMeta, R), NoFrame> {
        match self.cur.step(&self.lane, f) {
            Step::Deliver(meta, r) => {
                self.cur.stats.delivered += 1;
                Ok((meta, r))
            }
            Step::Lagged(n) => Err(NoFrame::Lagged(n)),
            Step::Empty => Err(NoFrame::Empty),
            Step::Pending => Err(NoFrame::Pending),
            Step::Closed => Err(NoFrame::Closed),
        }
    }

    /// Reads up to `max` records in place while each is the plain case (the next record,
    /// committed, nothing lost before it), as [`read_in_place`](Self::read_in_place) would
    /// one at a time: `visit` looks at each where it lies, and what it took is handed to
    /// `deliver` once the frame is validated. Stops before anything else (the lane's end, a
    /// lap, loss, padding, garbage, a frame `visit` says to [`Visit::Stop`] at), which the
    /// next `read_in_place` deals with; so a reader alternates the two. For a loop over many
    /// small records (the subscriber's drain): `read_in_place`'s per-call work is as much as
    /// such a record's own. `visit`, like `read_in_place`'s closure, may look at a frame that
    /// is then not delivered, and must not have side effects that matter if so. A reader with
    /// a filter or a start time, or one that has not placed a record yet (no
    /// [`expected_seq`](Self::expected_seq)), reads no run: `read_in_place` reads for it.
    #[inline(always)]
    pub fn read_run_in_place<R>(
        &mut self,
        max: usize,
        visit: impl FnMut(&FrameMeta, &PayloadView<'_, M>) -> Visit<R>,
        deliver: impl FnMut(FrameMeta, R) -> ControlFlow<()>,
    ) -> RunEnd {
        self.cur.run(&self.lane, max, visit, deliver)
    }
}

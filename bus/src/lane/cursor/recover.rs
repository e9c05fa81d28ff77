//! A cursor's recovery: from laps (resync to the oldest safe frame boundary), from holes left
//! by dead or stalled writers, and from garbage (skipped to the next anchored boundary).

use std::time::Instant;

use super::super::Lane;
use super::super::layout::{
    BUSY, FRAME_ALIGN, FRAME_HEADER_LEN, FrameKind, LaneState, align_frame, fw, word,
};
use super::super::now_realtime_nanos;
use super::{Cursor, LANE_CLOCK_MIN_STALL, STALL_POLLS, Stall};
use crate::mem::LaneMem;
use crate::sync::Ordering;

impl Cursor {
    /// After a lap: jump to the oldest frame boundary that is safe to read.
    pub(super) fn resync<M: LaneMem>(&mut self, lane: &Lane<M>, tail: u64) {
        self.stats.lapped += 1;
        // The gap up to the next frame is overwrite (damage skipped before it, if any, cannot
        // be told apart from it any more).
        self.damage_pending = false;
        self.known_tail = tail;
        self.pos = self.oldest_boundary(lane, tail);
    }

    /// The oldest frame boundary still worth reading, with some slack so the reader is not
    /// overrun again at once.
    pub(super) fn oldest_boundary<M: LaneMem>(&self, lane: &Lane<M>, tail: u64) -> u64 {
        let g = &lane.geo;
        if tail <= g.capacity {
            return 0;
        }
        let target = tail - g.capacity + g.resync_slack();
        self.boundary_at_or_after(lane, target, tail)
    }

    /// First frame boundary at or after `target`, found through the block anchors; `tail` if
    /// none is valid.
    fn boundary_at_or_after<M: LaneMem>(&self, lane: &Lane<M>, target: u64, tail: u64) -> u64 {
        let g = &lane.geo;
        let first = target.div_ceil(g.block_size());
        for b in first..first.saturating_add(g.n_blocks) {
            // A garbage tail near `u64::MAX` must not wrap the block positions around.
            let Some(block_start) = b.checked_mul(g.block_size()) else {
                break;
            };
            if block_start >= tail {
                break;
            }
            let a = lane.word(g.anchor_word(b)).load(Ordering::Acquire);
            let limit = block_start.saturating_add(g.max_frame + g.block_size());
            if a >= block_start && a < limit && a <= tail && a % FRAME_ALIGN as u64 == 0 {
                return a;
            }
        }
        tail
    }

    /// The frame at `pos` is claimed but not committed (`busy`: its commit word says so; else
    /// the word is neither committed nor BUSY: a claim whose header is not written yet, or
    /// garbage). If its writer is gone, or it has been stuck longer than the stall timeout,
    /// skip it and return `true`: counted as a hole if it is BUSY or its writer is gone,
    /// otherwise as garbage (its record, if it was one, then counts as damaged).
    ///
    /// How long it has been stuck is known at once from the lane's own timestamps when a
    /// frame begun after it is in the ring (see [`claimed_before`]), so garbage in old history
    /// is skipped without waiting; otherwise the reader's clock measures the stall. Garbage
    /// that cannot be a claim at all ([`Cursor::surely_garbage`]) is skipped at once.
    pub(super) fn maybe_skip_hole<M: LaneMem>(
        &mut self,
        lane: &Lane<M>,
        busy: bool,
        tail: u64,
    ) -> bool {
        let state = lane.word(word!(state)).load(Ordering::Acquire);
        if !self.writer_gone && state == LaneState::Dead as u64 {
            self.writer_gone = true;
        }
        let surely_garbage = !busy && self.surely_garbage(lane, state);
        if !self.writer_gone && !surely_garbage {
            let timeout = self.stall_timeout;
            match &mut self.stalled_since {
                Some(Stall { pos, polls, since }) if *pos == self.pos => {
                    // A reader right behind the writer meets frames being written all the
                    // time; the clock is only read once one stays unfinished for a while.
                    *polls += 1;
                    if *polls < STALL_POLLS && !timeout.is_zero() {
                        return false;
                    }
                    // The reader's own clock always sees a stall of at least
                    // LANE_CLOCK_MIN_STALL; past it, the lane's timestamps may prove the frame
                    // older than the timeout (garbage in old history: skipped in milliseconds).
                    let now = Instant::now();
                    let waited = match since {
                        None => {
                            *since = Some(now);
                            return false;
                        }
                        Some(s) => now.duration_since(*s),
                    };
                    if waited < timeout {
                        if waited < LANE_CLOCK_MIN_STALL.min(timeout) {
                            return false;
                        }
                        let stalled_by_lane_clock = claimed_before(lane, self.pos, busy, tail)
                            .is_some_and(|t| {
                                let age = now_realtime_nanos().saturating_sub(t);
                                u128::from(age) >= timeout.as_nanos()
                            });
                        if !stalled_by_lane_clock {
                            return false;
                        }
                    }
                }
                _ => {
                    self.stalled_since = Some(Stall {
                        pos: self.pos,
                        polls: 0,
                        since: None,
                    });
                    return false;
                }
            }
        }
        self.stalled_since = None;
        if busy || (self.writer_gone && !surely_garbage) {
            self.stats.holes += 1;
        } else {
            self.stats.garbage += 1;
            self.damage_pending = true;
        }
        let g = lane.geo;
        if busy {
            // The length was written before BUSY: skip exactly this frame if it is sane.
            let len_meta = lane
                .word(g.frame_word(self.pos, fw::LEN_META))
                .load(Ordering::Relaxed);
            let aligned = align_frame(u64::from(len_meta as u32));
            let phys = self.pos & (g.capacity - 1);
            if aligned >= FRAME_HEADER_LEN as u64
                && aligned <= g.max_frame
                && phys + aligned <= g.capacity
            {
                self.pos = self.pos.saturating_add(aligned);
                return true;
            }
        }
        self.skip_garbage(lane, tail);
        true
    }

    /// Whether the frame at the cursor, found neither committed nor begun, is garbage rather
    /// than a claim whose header is not written yet, skipped at once (near the live tail the
    /// records' timestamps are young: waiting for a stall would hold the reader for the stall
    /// timeout per spot): if its commit word, loaded again after the lane's `state` (the
    /// first load may have been older than the state it is judged by), is neither committed,
    /// nor begun (BUSY), nor zero, and either the lane is closed (its writer claims nothing
    /// more) or the ring has not wrapped here yet: nothing was written at the cursor before
    /// its claim, so a claim not begun still shows the zero the lane was made with.
    fn surely_garbage<M: LaneMem>(&self, lane: &Lane<M>, state: u64) -> bool {
        let g = lane.geo;
        (state == LaneState::Closed as u64 || self.pos < g.capacity) && {
            let c = lane
                .word(g.frame_word(self.pos, fw::COMMIT))
                .load(Ordering::Acquire);
            c != 0 && c != g.tag(self.pos) && c != g.tag(self.pos) ^ BUSY
        }
    }

    /// Moves past an unreadable position: the next committed or busy frame tag within
    /// `max_frame`, else the next valid anchor, else the tail.
    pub(super) fn skip_garbage<M: LaneMem>(&mut self, lane: &Lane<M>, tail: u64) {
        let g = lane.geo;
        let limit = self.pos.saturating_add(g.max_frame).min(tail);
        let mut q = self.pos.saturating_add(FRAME_ALIGN as u64);
        while q < limit {
            let phys = q & (g.capacity - 1);
            if phys == 0 || phys + FRAME_HEADER_LEN as u64 > g.capacity {
                break;
            }
            let c = lane
                .word(g.frame_word(q, fw::COMMIT))
                .load(Ordering::Acquire);
            if c == g.tag(q) || c == g.tag(q) ^ BUSY {
                self.pos = q;
                return;
            }
            q += FRAME_ALIGN as u64;
        }
        let next = self.boundary_at_or_after(lane, self.pos.saturating_add(1), tail);
        self.pos = next.max(self.pos.saturating_add(FRAME_ALIGN as u64));
    }
}

/// The claim time of the frame at `pos` (claimed, not committed), or a time it was claimed at
/// or before, from the lane's own header words: a BUSY frame's own `t_nanos` (written before
/// BUSY), else that of the first frame begun after it within `max_frame` (a frame is no
/// longer, so a real claim at `pos` ends before it): claims are made in position order with
/// non-decreasing times, so a claim at `pos` is no younger. Padding (no time) and anything
/// insane is passed over; `None` when nothing proves a time.
fn claimed_before<M: LaneMem>(lane: &Lane<M>, pos: u64, busy: bool, tail: u64) -> Option<u64> {
    let g = lane.geo;
    let header_fits = |q: u64| (q & (g.capacity - 1)) + FRAME_HEADER_LEN as u64 <= g.capacity;
    // A frame's time, if it is a begun (BUSY) or committed DATA, ABORTED or end-of-stream
    // frame at `q`.
    let time_at = |q: u64| -> Option<u64> {
        if !header_fits(q) {
            return None;
        }
        let c = lane
            .word(g.frame_word(q, fw::COMMIT))
            .load(Ordering::Acquire);
        if c != g.tag(q) && c != g.tag(q) ^ BUSY {
            return None;
        }
        let len_meta = lane
            .word(g.frame_word(q, fw::LEN_META))
            .load(Ordering::Relaxed);
        match FrameKind::from_u8((len_meta >> 32) as u8) {
            Some(FrameKind::Data | FrameKind::Aborted | FrameKind::EndOfStream) => Some(
                lane.word(g.frame_word(q, fw::T_NANOS))
                    .load(Ordering::Relaxed),
            ),
            Some(FrameKind::Pad) | None => None,
        }
    };
    if busy {
        return time_at(pos);
    }
    let limit = pos.saturating_add(g.max_frame).min(tail);
    let mut q = pos.saturating_add(FRAME_ALIGN as u64);
    while q < limit {
        if let Some(t) = time_at(q) {
            return Some(t);
        }
        q += FRAME_ALIGN as u64;
    }
    None
}

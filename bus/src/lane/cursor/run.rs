//! A cursor's fast path for reading many records at once ([`Cursor::run`]): the frames at the
//! cursor that need none of the general loop's care, each validated as
//! [`Cursor::step`] validates it, with nothing else done per frame.

use std::ops::ControlFlow;

use super::super::Lane;
use super::super::layout::{FRAME_HEADER_LEN, FrameKind, align_frame, fw, word};
use super::super::view::PayloadView;
use super::{Cursor, FrameMeta, payload_view};
use crate::mem::LaneMem;
use crate::sync::{Ordering, fence};

/// What the visit of a run ([`LaneReader::read_run_in_place`](super::super::LaneReader::read_run_in_place)) made of a frame.
pub enum Visit<R> {
    /// A record to deliver once it is validated, with this value.
    Take(R),
    /// A record passed over without delivery (its reader does not want it).
    Pass,
    /// Stop before this frame: the general loop is to read it.
    Stop,
}

/// How a run ([`LaneReader::read_run_in_place`](super::super::LaneReader::read_run_in_place)) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnd {
    /// Records read: delivered, or passed over ([`Visit::Pass`]).
    pub read: usize,
    /// `deliver` returned [`ControlFlow::Break`].
    pub broke: bool,
}

impl Cursor {
    /// Reads up to `max` frames at the cursor while each is the plain case: a committed DATA
    /// frame with a sane header and the sequence number expected next (so no loss to report),
    /// in a cursor with no filter, no start time, and nothing pending from garbage or a stall.
    /// Each frame is visited in place, then validated against the write limit exactly as
    /// [`Cursor::step`] does, and only then handed to `deliver` (if `visit` took it). Anything
    /// else stops the run before that frame, without a load beyond it: the general loop
    /// (`step`) is the one to read it, and does everything this skips (the lane's end, laps,
    /// holes, padding, garbage, the loss count).
    ///
    /// One loop with the few values it needs, and no [`Step`](super::Step) per frame: for a
    /// consumer of many small records, the general loop's per-call work was as much as the
    /// record's own.
    #[inline(always)]
    pub(crate) fn run<M: LaneMem, R>(
        &mut self,
        lane: &Lane<M>,
        max: usize,
        mut visit: impl FnMut(&FrameMeta, &PayloadView<'_, M>) -> Visit<R>,
        mut deliver: impl FnMut(FrameMeta, R) -> ControlFlow<()>,
    ) -> RunEnd {
        let mut end = RunEnd {
            read: 0,
            broke: false,
        };
        let Some((mut next, _)) = self.next_seq else {
            return end;
        };
        if self.filter.is_some()
            || self.not_before_nanos.is_some()
            || self.damage_pending
            || self.stalled_since.is_some()
        {
            return end;
        }
        let g = &lane.geo;
        let cap = g.capacity;
        while end.read < max {
            let pos = self.pos;
            let phys = pos & (cap - 1);
            if phys + FRAME_HEADER_LEN as u64 > cap {
                break;
            }
            let h = lane.frame_header(pos);
            if h[fw::COMMIT].load(Ordering::Acquire) != g.tag(pos) {
                break;
            }
            let (meta, len_meta) = FrameMeta::load(pos, h);
            let frame_len = u64::from(len_meta as u32);
            let aligned = align_frame(frame_len);
            if meta.seq != next
                || (len_meta >> 32) as u8 != FrameKind::Data as u8
                || frame_len < FRAME_HEADER_LEN as u64
                || aligned > g.max_frame
                || phys + aligned > cap
            {
                break;
            }
            let visited = visit(&meta, &payload_view(lane, &meta));
            if let Visit::Stop = visited {
                break;
            }
            // `Cursor::overwritten`'s proof, without its recovery: a frame that may have been
            // overwritten is left to `step`, which reads it again and resyncs.
            fence(Ordering::Acquire);
            let lap = pos.saturating_add(cap);
            if lane.word(word!(write_limit)).load(Ordering::Relaxed) > lap
                && lane.word(word!(claim_tail)).load(Ordering::Relaxed) > lap
            {
                break;
            }
            self.pos = pos.saturating_add(aligned);
            next = meta.seq + 1;
            self.next_seq = Some((next, pos));
            end.read += 1;
            if let Visit::Take(r) = visited {
                self.stats.delivered += 1;
                if deliver(meta, r).is_break() {
                    end.broke = true;
                    break;
                }
            }
        }
        end
    }
}

//! Runs of records written in one claim ([`write_run`]): one pass through the claim gate for
//! up to [`RUN_RECORDS`] records, then each record framed and committed on its own.

use super::super::layout::{FRAME_HEADER_LEN, FrameKind, Geometry, align_frame, fw};
use super::super::{Lane, RecordMeta, now_realtime_nanos};
use super::{ClaimError, ClaimGate, lapped, oversize, place, release_inflight};
use crate::mem::LaneMem;
use crate::sync::Ordering;
use crate::testpoint;

/// Most records one run ([`SharedLaneWriter::write_run`](crate::lane::SharedLaneWriter::write_run))
/// claims in one pass through the claim gate.
pub const RUN_RECORDS: usize = 64;

/// How a run of records ended: how many were written (from the first), and why the run
/// stopped before the next one, if it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunWritten {
    /// Sequence number of the first record written (meaningless when `written` is 0).
    pub first_seq: u64,
    /// Records written and committed, from the first of the slice.
    pub written: usize,
    /// Why the record after them was not written (counted by the lane as for a single
    /// claim; that record is consumed: a caller goes on with the one after it). `None`: the
    /// run ended at [`RUN_RECORDS`], at the end of the slice, or at the run's span limit.
    pub refused: Option<ClaimError>,
}

/// Claims, fills and commits a run of records with the same metadata, `payloads` from the
/// first, with **one** pass through the gate: one clock read (the records share a
/// timestamp), one tail intent, one lock for a shared writer; then per record the same steps
/// 2–4 as a single claim (pad, header, BUSY, payload, anchors, commit), in order. A run takes
/// at most [`RUN_RECORDS`] records and spans at most `max_frame` bytes (a run is never more
/// of a jump for readers' lap checks than one largest frame); it always takes at least one
/// record unless that record is refused. `fill(lane, start, payload)` writes a frame's payload
/// at position `start`.
///
/// The gate is passed once for the whole run: every record is checked against the lap limit
/// read once ([`ClaimGate::lap_limit`]; the records' ends only grow, and claims retired
/// meanwhile only raise the limit) and the local state takes the run's end and sequence
/// numbers at once, so the protocol a reader sees is unchanged: a run is records claimed back
/// to back, none of which another claim can interleave. Placements are not kept: the writing
/// pass places each record again (its pad, start and end: a few instructions), where keeping
/// them in an array cost six stores and loads a record, and the header of each frame is looked
/// up once: at this rate of records, every store per record shows.
///
/// Only the run's first record takes an in-flight slot, retired after the last record is
/// committed: the lap guard of any other claim stops at it, so no claim can lap a record of
/// the run while the run is being written (the run's records all start after the first,
/// within `max_frame`), and a run pays one slot store and one retire, not one per record. A
/// shared writer counts the run's records as committed once, under the lock. A writer that
/// dies mid-run leaves its committed records readable, a BUSY frame (a hole) and the rest of
/// its claimed range unwritten (skipped like a claim that died before its header,
/// `after_intent`).
///
/// `payloads` are the records' bytes, resolved before the gate was taken (at most
/// [`RUN_RECORDS`]: the rest is ignored). Nothing after the gate is dropped can panic (the
/// copies are of the lengths reserved), so every record admitted is committed and retired.
#[inline(always)]
pub(in crate::lane) fn write_run<'w, M, G>(
    lane: &'w Lane<M>,
    mut gate: G,
    meta: RecordMeta,
    payloads: &[&[u8]],
    fill: impl FnMut(&'w Lane<M>, u64, &[u8]),
) -> RunWritten
where
    M: LaneMem,
    G: ClaimGate<'w, M>,
{
    let payloads = &payloads[..payloads.len().min(RUN_RECORDS)];
    if gate.local().closed {
        return RunWritten {
            first_seq: 0,
            written: 0,
            refused: Some(ClaimError::Closed),
        };
    }
    let now = now_realtime_nanos();
    let limit = gate.lap_limit(lane).unwrap_or(u64::MAX);
    let local = gate.local();
    let first_seq = local.seq;
    let from = local.tail;
    // The records share the run's time, raised to the last one handed out.
    let t_nanos = now.max(local.last_t);
    let plan = plan_run(lane, from, limit, payloads);
    let n = plan.records;
    if n == 0 {
        return RunWritten {
            first_seq,
            written: 0,
            refused: plan.refused,
        };
    }
    local.tail = plan.end;
    local.seq += n as u64;
    local.last_t = t_nanos;
    let inflight = gate.register(first_seq, plan.first_start);
    gate.count_admitted(lane, n);
    lane.publish_intent(plan.end);
    drop(gate);
    let first = Stamp {
        meta,
        seq: first_seq,
        t_nanos,
    };
    write_frames(lane, from, first, &payloads[..n], fill);
    if inflight.is_none() {
        // The single writer: counted once the run is committed (a load and a store; during a
        // run the counter lags by the run's records, and a writer killed mid-run leaves them
        // uncounted, as a single claim killed before its count).
        lane.count_committed(n as u64);
    }
    release_inflight(inflight, first_seq);
    RunWritten {
        first_seq,
        written: n,
        refused: plan.refused,
    }
}

/// Where a run goes: how many records it takes, where the first starts and the last ends,
/// and why it stopped before the next record if that one was refused.
struct RunPlan {
    records: usize,
    first_start: u64,
    end: u64,
    refused: Option<ClaimError>,
}

/// How many of `payloads` a run from `from` takes: each record placed as a single claim
/// would be (a pad before one that would cross the physical end), checked against the largest
/// frame, the run's span and the lap guard `limit`. Nothing is stored per record: the writing
/// pass places them again (a few instructions each), where keeping the placements in an
/// array cost a store and a load of six words per record.
#[inline(always)]
fn plan_run<M: LaneMem>(lane: &Lane<M>, from: u64, limit: u64, payloads: &[&[u8]]) -> RunPlan {
    let geo: Geometry = lane.geo;
    let mut plan = RunPlan {
        records: 0,
        first_start: from,
        end: from,
        refused: None,
    };
    for p in payloads {
        let aligned = align_frame(FRAME_HEADER_LEN as u64 + p.len() as u64);
        if aligned > geo.max_frame {
            // The refused record is consumed (its caller goes on after it).
            plan.refused = Some(oversize(lane, p.len()));
            break;
        }
        let (_, start) = place(&geo, plan.end, aligned);
        let e = start + aligned;
        if plan.records > 0 && e - from > geo.max_frame {
            break;
        }
        if e > limit {
            plan.refused = Some(lapped(lane));
            break;
        }
        if plan.records == 0 {
            plan.first_start = start;
        }
        plan.end = e;
        plan.records += 1;
    }
    plan
}

/// What the records of a run share, and the first one's sequence number.
#[derive(Clone, Copy)]
struct Stamp {
    meta: RecordMeta,
    seq: u64,
    t_nanos: u64,
}

/// The writing pass of a run admitted from `pos`: per record, steps 2–4 of a single claim
/// (pad, header and BUSY, payload, anchors, commit), with the run's crash points.
#[inline(always)]
fn write_frames<'w, M: LaneMem>(
    lane: &'w Lane<M>,
    mut pos: u64,
    first: Stamp,
    payloads: &[&[u8]],
    mut fill: impl FnMut(&'w Lane<M>, u64, &[u8]),
) {
    let geo = lane.geo;
    let n = payloads.len();
    for (i, &payload) in payloads.iter().enumerate() {
        let frame_len = FRAME_HEADER_LEN as u64 + payload.len() as u64;
        let aligned = align_frame(frame_len);
        let (pad_len, start) = place(&geo, pos, aligned);
        if pad_len > 0 {
            lane.write_pad(pos, pad_len);
        }
        if i == 0 {
            testpoint::hit("after_intent");
        }
        let h = lane.begin_frame(
            start,
            frame_len,
            FrameKind::Data,
            first.meta,
            first.seq + i as u64,
            first.t_nanos,
        );
        if i == 1 {
            testpoint::hit("run_after_busy");
        }
        fill(lane, start, payload);
        // `finish_frame`, with the header already at hand.
        lane.store_anchors(start, start + aligned);
        h[fw::COMMIT].store(geo.tag(start), Ordering::Release);
        if i == 0 && n > 1 {
            testpoint::hit("run_after_first_commit");
        }
        pos = start + aligned;
    }
}

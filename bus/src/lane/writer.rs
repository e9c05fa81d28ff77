//! The two writers of a lane, over one claim sequence ([`claim_frame`], in `claim.rs`): the
//! single [`LaneWriter`] (its state by `&mut`) and the [`SharedLaneWriter`] many threads share
//! (its state under a claim lock, with the lap guard).

use std::sync::Arc;

#[cfg(not(loom))]
use snapbus_schemas::Wire;

use super::claim::{
    Claim, ClaimError, ClaimGate, INFLIGHT_SLOTS, Inflight, Local, RETIRED, RUN_RECORDS,
    Reservation, RunWritten, SharedLocal, WriteError, claim_frame, write_run,
};
use super::layout::{FRAME_HEADER_LEN, word};
use super::{Lane, RecordMeta};
use crate::doorbell::DoorbellPage;
use crate::mem::LaneMem;
use crate::sync::{AtomicU64, ClaimLock, Ordering};
use crate::testpoint;

/// The single writer of a lane: no locks, no atomic read-modify-writes on the hot path.
/// Not `Sync`; for several threads use [`SharedLaneWriter`] (or one lane per thread).
pub struct LaneWriter<M: LaneMem> {
    lane: Arc<Lane<M>>,
    local: Local,
    wake: Option<(Arc<DoorbellPage>, u64)>,
}

impl<M: LaneMem> LaneWriter<M> {
    pub(crate) fn new(lane: Arc<Lane<M>>) -> LaneWriter<M> {
        LaneWriter {
            lane,
            local: Local::default(),
            wake: None,
        }
    }

    /// The doorbells to ring after each `write` (bit `i` of `mask`: doorbell `i` of `page`),
    /// i.e. the consumers subscribed to this lane. `None` (the default): ring nobody.
    pub fn set_doorbells(&mut self, wake: Option<(Arc<DoorbellPage>, u64)>) {
        self.wake = wake.filter(|(_, mask)| *mask != 0);
    }

    /// Rings the subscribed doorbells whose consumer sleeps (a `fence(SeqCst)` and one load per
    /// subscriber; a syscall only for a sleeping one). `write` and `write_bytes` call it;
    /// call it after [`Claim::commit`] when using claims directly.
    #[inline]
    pub fn ring(&self) {
        if let Some((page, mask)) = &self.wake {
            page.ring_mask(*mask);
        }
    }

    /// The lane.
    pub fn lane(&self) -> &Arc<Lane<M>> {
        &self.lane
    }

    /// Claims room for a `payload_len`-byte record. Never waits.
    #[inline]
    pub fn claim(
        &mut self,
        payload_len: usize,
        meta: RecordMeta,
    ) -> Result<Claim<'_, M>, ClaimError> {
        claim_frame(&self.lane, &mut self.local, payload_len, meta)
    }

    /// Writes a run of records with the same metadata, `payloads` from the first, in one
    /// claim ([`RunWritten`] says how many: at most [`RUN_RECORDS`]; see
    /// [`SharedLaneWriter::write_run`]), then rings the doorbells once.
    pub fn write_run<P: AsRef<[u8]>>(&mut self, meta: RecordMeta, payloads: &[P]) -> RunWritten {
        let mut bufs = [&[][..]; RUN_RECORDS];
        let n = resolve(payloads, &mut bufs);
        let run = write_run(&self.lane, &mut self.local, meta, &bufs[..n], copy_payload);
        if run.written > 0 {
            self.ring();
        }
        run
    }

    /// Closes the lane: an end-of-stream frame, `final_tail`, state CLOSED. Later claims fail.
    pub fn close(&mut self) {
        self.local.close(&self.lane);
    }
}

#[cfg(not(loom))]
impl LaneWriter<crate::mem::ShmMem> {
    /// Encodes `value` straight into the ring and commits it; returns its sequence number.
    #[inline]
    pub fn write<T: Wire>(&mut self, meta: RecordMeta, value: &T) -> Result<u64, WriteError> {
        let mut claim = self.claim(value.encoded_len(), meta)?;
        value.encode_into(claim.payload_mut())?;
        let seq = claim.seq();
        claim.commit();
        self.ring();
        Ok(seq)
    }

    /// Copies `payload` into the ring and commits it; returns its sequence number.
    #[inline]
    pub fn write_bytes(&mut self, meta: RecordMeta, payload: &[u8]) -> Result<u64, ClaimError> {
        let mut claim = self.claim(payload.len(), meta)?;
        let half = payload.len() / 2;
        let dst = claim.payload_mut();
        dst[..half].copy_from_slice(&payload[..half]);
        testpoint::hit("mid_payload");
        dst[half..].copy_from_slice(&payload[half..]);
        let seq = claim.seq();
        claim.commit();
        self.ring();
        Ok(seq)
    }
}

/// A writer many threads of one process share. Claims take a process-local lock for the claim
/// arithmetic only (never during the copy); the lock is never in shared memory, so a crash
/// cannot leave it held for anyone. The lane's `frames_committed` counts a claim when it is
/// made (under the lock) and takes it back if it is aborted: claims in flight count.
///
/// Lap guard: a claim that would overwrite bytes of a claim another thread is still writing
/// is dropped ([`ClaimError::Lapped`], counted in `dropped_wrap`), never waited for.
pub struct SharedLaneWriter<M: LaneMem> {
    lane: Arc<Lane<M>>,
    state: ClaimLock<SharedLocal>,
    /// In-flight claims, process-local: `slots[seq % INFLIGHT_SLOTS]` holds the start
    /// position of claim `seq` while it is in flight (stored under the lock, Relaxed), and
    /// [`RETIRED`] once it is committed or aborted (stored by the claim's thread **without**
    /// the lock, with Release after its last byte; loaded with Acquire under the lock before
    /// the bytes it covered may be reused).
    slots: Box<[AtomicU64]>,
}

impl<M: LaneMem> SharedLaneWriter<M> {
    pub(crate) fn new(lane: Arc<Lane<M>>) -> SharedLaneWriter<M> {
        SharedLaneWriter {
            lane,
            state: ClaimLock::new(SharedLocal::default()),
            slots: (0..INFLIGHT_SLOTS)
                .map(|_| AtomicU64::new(RETIRED))
                .collect(),
        }
    }

    fn slot(&self, seq: u64) -> &AtomicU64 {
        &self.slots[(seq % INFLIGHT_SLOTS) as usize]
    }

    /// The lane.
    pub fn lane(&self) -> &Arc<Lane<M>> {
        &self.lane
    }

    /// Claims room for a `payload_len`-byte record. Never waits for readers; waits for other
    /// claimers only for the claim arithmetic.
    ///
    /// `#[inline]` matters: out of line, the returned `Claim` goes through the stack, and those
    /// stores queue behind the record's stores into lines a reader on the other CPU is
    /// polling; inlined, it stays in registers. Measured (`lane_crossprocess`, 64 B, reader
    /// right behind): 7.0 → 16.1 M records/s; through `Publisher` + `Subscriber` (`compare`):
    /// 9.4 → 15.5 M/s.
    #[inline]
    pub fn claim(&self, payload_len: usize, meta: RecordMeta) -> Result<Claim<'_, M>, ClaimError> {
        let gate = Held {
            st: self.state.lock(),
            writer: self,
        };
        claim_frame(&self.lane, gate, payload_len, meta)
    }

    /// Writes a run of records with the same metadata, `payloads` from the first, with one
    /// pass through the claim lock, one clock read (the records share a timestamp) and one
    /// tail intent: the way to write many small records at once. A run takes at most
    /// [`RUN_RECORDS`] records and spans at most the lane's largest frame; it stops before a
    /// record that is refused ([`RunWritten::refused`], counted as for a single claim).
    /// Readers see records claimed back to back. Doorbells are not rung (see
    /// [`LaneWriter::ring`]).
    pub fn write_run<P: AsRef<[u8]>>(&self, meta: RecordMeta, payloads: &[P]) -> RunWritten {
        self.write_run_with(meta, payloads, copy_payload)
    }

    /// [`write_run`](Self::write_run) with `fill(lane, start, payload)` writing each frame's
    /// payload at position `start`.
    #[inline]
    pub(crate) fn write_run_with<'w, P: AsRef<[u8]>>(
        &'w self,
        meta: RecordMeta,
        payloads: &[P],
        fill: impl FnMut(&'w Lane<M>, u64, &[u8]),
    ) -> RunWritten {
        // The caller's `as_ref` runs here, once per record, before the lock.
        let mut bufs = [&[][..]; RUN_RECORDS];
        let n = resolve(payloads, &mut bufs);
        let gate = Held {
            st: self.state.lock(),
            writer: self,
        };
        write_run(&self.lane, gate, meta, &bufs[..n], fill)
    }

    /// Closes the lane (see [`LaneWriter::close`]).
    pub fn close(&self) {
        self.state.lock().local.close(&self.lane);
    }
}

/// A shared writer's gate: its state under the claim lock (`st`, the guard), with the lap
/// guard and the in-flight slots.
struct Held<'w, M: LaneMem, G> {
    st: G,
    writer: &'w SharedLaneWriter<M>,
}

impl<'w, M, G> ClaimGate<'w, M> for Held<'w, M, G>
where
    M: LaneMem,
    G: std::ops::DerefMut<Target = SharedLocal>,
{
    #[inline(always)]
    fn local(&mut self) -> &mut Local {
        &mut self.st.local
    }

    #[inline(always)]
    fn admit(
        &mut self,
        lane: &Lane<M>,
        r: &Reservation,
    ) -> Result<Option<Inflight<'w>>, ClaimError> {
        let w = self.writer;
        let st = &mut *self.st;
        // Claims are handed out in position order, so the first unretired one has the
        // smallest start of all in flight. (One load per slot: a second load could see it
        // retired meanwhile.)
        let mut oldest_start = None;
        while st.oldest < st.local.seq {
            let seq = st.oldest;
            let mut start = w.slot(seq).load(Ordering::Acquire);
            if !st.overflow.is_empty() {
                // An overflow claim's slot belongs to another claim: its list entry says.
                // (Once retired, its slot holds RETIRED: the slot's owner, the claim
                // `INFLIGHT_SLOTS` earlier, was passed before the slot could be reused.)
                if let Some(&(_, s)) = st.overflow.iter().find(|&&(s, _)| s == seq) {
                    start = s;
                }
            }
            if start != RETIRED {
                oldest_start = Some(start);
                break;
            }
            st.oldest += 1;
        }
        if oldest_start.is_some_and(|o| r.end > o.saturating_add(lane.geo.capacity)) {
            lane.word(word!(dropped_wrap))
                .fetch_add(1, Ordering::Relaxed);
            return Err(ClaimError::Lapped);
        }
        st.local.accept(r);
        // Counted now, under the lock: a load and a store (see the writer's docs).
        let committed = lane.word(word!(frames_committed));
        committed.store(committed.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        // The slot is free once the scan has passed its previous owner.
        let inflight = if r.seq < st.oldest + INFLIGHT_SLOTS {
            let slot = w.slot(r.seq);
            slot.store(r.start, Ordering::Relaxed);
            Inflight::Slot(slot, &w.state)
        } else {
            st.overflow.push((r.seq, r.start));
            Inflight::Overflow(&w.state)
        };
        Ok(Some(inflight))
    }
}

#[cfg(not(loom))]
impl SharedLaneWriter<crate::mem::ShmMem> {
    /// Encodes `value` straight into the ring and commits it; returns its sequence number.
    pub fn write<T: Wire>(&self, meta: RecordMeta, value: &T) -> Result<u64, WriteError> {
        let mut claim = self.claim(value.encoded_len(), meta)?;
        value.encode_into(claim.payload_mut())?;
        let seq = claim.seq();
        claim.commit();
        Ok(seq)
    }
}

/// Writes a frame's payload ([`LaneMem::copy_into_claim`]: one `memcpy` on shared memory,
/// atomic word stores on the heap).
fn copy_payload<M: LaneMem>(lane: &Lane<M>, start: u64, payload: &[u8]) {
    let off = lane.geo.byte_off(start) + FRAME_HEADER_LEN;
    // SAFETY: `write_run` calls this once per frame it claimed at `start`, with the payload
    // whose length it reserved, before committing the frame: the run holds the claim until
    // then, no one else writes these bytes or holds a reference to them, and readers only
    // load them atomically (the `mem` module docs).
    let written = unsafe { lane.mem.copy_into_claim(off, payload) };
    debug_assert!(written, "a run's payload lies in its claimed frame");
}

/// The bytes of a run's records, `as_ref` called once each (user code: a second call could
/// answer differently), before any claim; how many (at most [`RUN_RECORDS`]).
fn resolve<'p, P: AsRef<[u8]>>(payloads: &'p [P], bufs: &mut [&'p [u8]; RUN_RECORDS]) -> usize {
    let n = payloads.len().min(RUN_RECORDS);
    for (b, p) in bufs.iter_mut().zip(&payloads[..n]) {
        *b = p.as_ref();
    }
    n
}

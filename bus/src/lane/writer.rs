//! The two writers of a lane, over one claim sequence ([`claim_frame`], in `claim.rs`): the
//! single [`LaneWriter`] (its state by `&mut`) and the [`SharedLaneWriter`] many threads share
//! (its state under a claim lock, with the lap guard).

use std::mem::MaybeUninit;
use std::sync::Arc;

#[cfg(not(loom))]
use snapbus_schemas::Wire;

#[cfg(not(loom))]
use super::claim::WriteError;
#[cfg(not(loom))]
use crate::testpoint;

use super::claim::{
    Claim, ClaimError, ClaimGate, INFLIGHT_SLOTS, Inflight, Local, Overflowed, RETIRED,
    RUN_RECORDS, RunWritten, SharedLocal, claim_frame, write_run,
};
use super::layout::FRAME_HEADER_LEN;
use super::{Lane, RecordMeta};
use crate::doorbell::DoorbellPage;
use crate::mem::LaneMem;
use crate::sync::{AtomicU64, ClaimLock, Ordering};

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
        let mut bufs = [const { MaybeUninit::uninit() }; RUN_RECORDS];
        let bufs = resolve(payloads, &mut bufs);
        let run = write_run(&self.lane, &mut self.local, meta, bufs, copy_payload);
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
    /// the bytes it covered may be reused). A run's records other than its first take no
    /// slot: theirs still holds [`RETIRED`] from its previous owner (the scan passed it before
    /// the slot could be reused), and the scan cannot reach them before the run's first
    /// record, whose slot is retired only after the run's last commit.
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
    /// polling; inlined, it stays in registers (what matters most for small records with a
    /// reader right behind).
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
        let mut bufs = [const { MaybeUninit::uninit() }; RUN_RECORDS];
        let bufs = resolve(payloads, &mut bufs);
        let gate = Held {
            st: self.state.lock(),
            writer: self,
        };
        write_run(&self.lane, gate, meta, bufs, fill)
    }

    /// Closes the lane (see [`LaneWriter::close`]).
    pub fn close(&self) {
        self.state.lock().local.close(&self.lane);
    }

    /// Makes every reader count `lost` records of this lane as lost, exactly as records
    /// overwritten before they were read: for a writer that re-emits records from elsewhere
    /// (a bridge) and knows that some never reached it. Each step is an aborted frame with
    /// room for the gap that follows it (readers take a sequence gap wider than the bytes
    /// before a frame can hold for garbage), then a jump of the sequence numbers. Meant for a
    /// lane written by one thread: another thread's claim in flight meanwhile only makes the
    /// lap guard stricter.
    pub fn mark_lost(&self, lost: u64, meta: RecordMeta) -> Result<(), ClaimError> {
        let header = FRAME_HEADER_LEN as u64;
        let per_frame = (self.lane.geo.max_frame / header).saturating_sub(2).max(1);
        let mut left = lost;
        while left > 0 {
            let chunk = left.min(per_frame);
            // Dropped uncommitted: an aborted frame of `chunk` headers' worth of payload.
            drop(self.claim((chunk * header) as usize, meta)?);
            self.state.lock().local.seq += chunk;
            left -= chunk;
        }
        Ok(())
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
    fn lap_limit(&mut self, lane: &Lane<M>) -> Option<u64> {
        let w = self.writer;
        let st = &mut *self.st;
        // Claims are handed out in position order, so the first unretired one has the
        // smallest start of all in flight. (One load per slot: a second load could see it
        // retired meanwhile.)
        while st.oldest < st.local.seq {
            let seq = st.oldest;
            let mut start = w.slot(seq).load(Ordering::Acquire);
            if !st.overflow.is_empty() {
                // An overflow claim's slot belongs to another claim: its list entry says.
                // (Once retired, its slot holds RETIRED: the slot's owner, the claim
                // `INFLIGHT_SLOTS` earlier, was passed before the slot could be reused.)
                if let Some(o) = st.overflow.iter().find(|o| o.seq == seq) {
                    start = o.start;
                }
            }
            if start != RETIRED {
                return Some(start.saturating_add(lane.geo.capacity));
            }
            st.oldest += 1;
        }
        None
    }

    #[inline(always)]
    fn register(&mut self, seq: u64, start: u64) -> Option<Inflight<'w>> {
        let w = self.writer;
        let st = &mut *self.st;
        // The slot is free once the scan (`lap_limit`, made before) has passed its previous
        // owner.
        Some(if seq < st.oldest + INFLIGHT_SLOTS {
            let slot = w.slot(seq);
            slot.store(start, Ordering::Relaxed);
            Inflight::Slot(slot, &w.state)
        } else {
            st.overflow.push(Overflowed { seq, start });
            Inflight::Overflow(&w.state)
        })
    }

    #[inline(always)]
    fn count_admitted(&mut self, lane: &Lane<M>, n: usize) {
        // Under the lock (see the writer's docs).
        lane.count_committed(n as u64);
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

/// Writes a frame's payload ([`LaneMem::copy_into_claim`]: one copy on shared memory,
/// atomic word stores on the heap).
#[inline(always)]
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
/// answer differently), before any claim: the first [`RUN_RECORDS`] at most, in `bufs`. Not
/// initialised first (a kibibyte of stores a run, two a record, which the records' own
/// stores then queued behind).
#[inline(always)]
fn resolve<'b, 'p, P: AsRef<[u8]>>(
    payloads: &'p [P],
    bufs: &'b mut [MaybeUninit<&'p [u8]>; RUN_RECORDS],
) -> &'b [&'p [u8]] {
    let n = payloads.len().min(RUN_RECORDS);
    for (b, p) in bufs.iter_mut().zip(&payloads[..n]) {
        b.write(p.as_ref());
    }
    // SAFETY: `bufs[..n]` were each written above (`n` is at most both lengths, so the zip
    // visits every one of them); `MaybeUninit<&[u8]>` has the layout of `&[u8]`.
    unsafe { std::slice::from_raw_parts(bufs.as_ptr().cast(), n) }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lane::layout::word;
    use crate::lane::{LaneConfig, LaneReader, Poll, StartAt};
    use crate::mem::HeapMem;

    const CONFIG: LaneConfig = LaneConfig {
        capacity: 64 << 10,
        max_frame: 4 << 10,
        block_size: 4 << 10,
    };
    /// A 16-byte payload: a 64-byte frame with the 48-byte header.
    const LEN: usize = 16;
    /// Frames in a lap.
    const LAP: u64 = CONFIG.capacity as u64 / 64;

    fn meta(i: u16) -> RecordMeta {
        RecordMeta {
            schema_key: i,
            schema_version: 1,
            level: 1,
            emitter: 0,
        }
    }

    fn payload(seq: u64) -> Vec<u8> {
        (0..LEN as u64).map(|k| (seq * 31 + k) as u8).collect()
    }

    fn claim_and_commit(w: &SharedLaneWriter<HeapMem>) -> Result<u64, ClaimError> {
        let mut c = w.claim(LEN, meta(2))?;
        let seq = c.seq();
        c.write_payload(&payload(seq));
        c.commit();
        Ok(seq)
    }

    /// `frames_committed` is a word of shared memory, so it can hold anything (a corrupt or
    /// hostile peer): both writers count past `u64::MAX` by wrapping, as `fetch_add` does, and
    /// take back an aborted claim no lower than zero, never panicking (overflow checks are on
    /// in tests and in the fuzz build, where the lane reader target found it).
    #[test]
    fn the_committed_count_wraps_whatever_shared_memory_held() {
        let lane = Lane::heap(&CONFIG, 9).expect("lane");
        let count = lane.word(word!(frames_committed));
        let pair = [payload(0), payload(1)];

        count.store(u64::MAX, Ordering::Relaxed);
        let mut single = lane.writer().expect("writer");
        let c = single.claim(LEN, meta(1)).expect("claim");
        c.commit();
        assert_eq!(count.load(Ordering::Relaxed), 0);
        count.store(u64::MAX - 1, Ordering::Relaxed);
        assert_eq!(single.write_run(meta(1), &pair).written, 2);
        assert_eq!(count.load(Ordering::Relaxed), 0);
        drop(single);

        count.store(u64::MAX, Ordering::Relaxed);
        let shared = lane.shared_writer().expect("writer");
        assert!(claim_and_commit(&shared).is_ok());
        assert_eq!(count.load(Ordering::Relaxed), 0);
        count.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(shared.write_run(meta(1), &pair).written, 2);
        assert_eq!(count.load(Ordering::Relaxed), 1);
        // A shared claim counts when it is admitted and takes it back when dropped unwritten;
        // from a zeroed word that stops at zero.
        let c = shared.claim(LEN, meta(1)).expect("claim");
        count.store(0, Ordering::Relaxed);
        drop(c);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }

    /// A run holds one in-flight slot, its first record's: while the run's last record is
    /// being written, a claim that would overwrite the run is refused (`Lapped`), and once the
    /// run is committed the lap guard passes the run's records (the first retired, the others
    /// never registered) and claims go on; over many laps and slot reuses (runs beside single
    /// claims), nothing is refused that laps no record in flight, and every record arrives
    /// whole.
    #[test]
    fn a_run_in_flight_holds_back_claims_that_would_lap_any_of_its_records() {
        let lane = Lane::heap(&CONFIG, 7).expect("lane");
        let w = lane.shared_writer().expect("writer");
        let run: Vec<Vec<u8>> = (0..2).map(payload).collect();
        let mut during = Vec::new();
        // The run is records 0 and 1, at [0, 64) and [64, 128). While the fill of record 1
        // runs (the gate is not held then), single claims fill the rest of the lap (records
        // 2..LAP); the next would overwrite record 0 (and, were it admitted, the one after it
        // record 1).
        let written = w.write_run_with(meta(1), &run, |lane: &Lane<HeapMem>, start, bytes| {
            copy_payload(lane, start, bytes);
            if start == 64 {
                for _ in 0..LAP {
                    during.push(claim_and_commit(&w));
                }
            }
        });
        assert_eq!((written.first_seq, written.written), (0, 2));
        let fit = (LAP - 2) as usize;
        assert_eq!(during[..fit], (2..LAP).map(Ok).collect::<Vec<_>>()[..]);
        assert_eq!(
            during[fit..],
            [Err(ClaimError::Lapped), Err(ClaimError::Lapped)]
        );
        assert_eq!(lane.stats().dropped_wrap, 2);
        // The run is committed and retired: the same claim is admitted now, and the next (over
        // record 1, which never had a slot of its own).
        assert_eq!(claim_and_commit(&w), Ok(LAP));
        assert_eq!(claim_and_commit(&w), Ok(LAP + 1));

        // Many laps and slot reuses (`INFLIGHT_SLOTS` records and more): runs of 2 beside
        // single claims, each read back whole; nothing refused.
        let mut reader = lane.reader(StartAt::Latest);
        let mut next = LAP + 2;
        let drain = |reader: &mut LaneReader<HeapMem>, next: &mut u64| {
            while let Poll::Frame(f) = reader.poll() {
                assert_eq!(f.meta.seq, *next, "records in order, none lost");
                assert_eq!(f.payload, &payload(f.meta.seq)[..], "record {}", f.meta.seq);
                *next += 1;
            }
        };
        let mut seq = LAP + 2;
        while seq < 3 * INFLIGHT_SLOTS {
            let pair = [payload(seq), payload(seq + 1)];
            let r = w.write_run(meta(1), &pair);
            assert_eq!((r.first_seq, r.written, r.refused), (seq, 2, None));
            seq += 2;
            assert_eq!(claim_and_commit(&w), Ok(seq));
            seq += 1;
            drain(&mut reader, &mut next);
        }
        assert_eq!(next, seq);
        assert_eq!(lane.stats().dropped_wrap, 2, "nothing else refused");
    }

    /// `Claim::payload_mut` on the heap: the writer's plain stores into its claim, the path
    /// shared memory takes, here where unit tests and Miri run it. What is written in place is
    /// what is read; a claim dropped unwritten is skipped, not delivered.
    #[test]
    fn heap_claims_are_written_in_place() {
        let lane = Lane::heap(&CONFIG, 7).expect("lane");
        let mut reader = lane.reader(StartAt::Oldest);
        let mut single = lane.writer().expect("writer");
        for seq in 0..3 {
            let mut c = single.claim(LEN, meta(1)).expect("claim");
            assert_eq!(c.seq(), seq);
            c.payload_mut().copy_from_slice(&payload(seq));
            c.commit();
        }
        drop(single.claim(LEN, meta(1)).expect("claim"));
        let mut c = single.claim(LEN, meta(1)).expect("claim");
        c.payload_mut().copy_from_slice(&payload(4));
        c.commit();
        for seq in [0, 1, 2, 4] {
            match reader.poll() {
                Poll::Frame(f) => {
                    assert_eq!(f.meta.seq, seq);
                    assert_eq!(f.payload, &payload(seq)[..], "record {seq}");
                }
                other => panic!("record {seq}: {other:?}"),
            }
        }
        assert_eq!(reader.poll(), Poll::Empty);
        // A shared writer's claims (another lane: one writer per lane).
        let lane = Lane::heap(&CONFIG, 8).expect("lane");
        let mut reader = lane.reader(StartAt::Oldest);
        let shared = lane.shared_writer().expect("shared writer");
        let mut c = shared.claim(LEN, meta(2)).expect("claim");
        assert_eq!(c.payload_mut().len(), LEN);
        c.payload_mut().copy_from_slice(&payload(5));
        c.commit();
        match reader.poll() {
            Poll::Frame(f) => assert_eq!(f.payload, &payload(5)[..]),
            other => panic!("the shared writer's record: {other:?}"),
        }
    }

    /// The seqlock caveat of the `mem` module, exercised: a writer laps a reader many times
    /// with plain stores into its claims while the reader loads the same words; every record
    /// delivered is whole, and every record is delivered or counted lost. (In theory a data
    /// race, which is why Miri does not run it.)
    #[test]
    #[cfg_attr(miri, ignore = "the seqlock's plain stores race readers' atomic loads")]
    fn heap_plain_stores_racing_readers_deliver_only_whole_records() {
        const TOTAL: u64 = 20 * LAP;
        let lane = Lane::heap(&CONFIG, 9).expect("lane");
        let mut reader = lane.reader(StartAt::Oldest);
        let mut w = lane.writer().expect("writer");
        let writer = std::thread::spawn(move || {
            for seq in 0..TOTAL {
                let mut c = w.claim(LEN, meta(1)).expect("claim");
                c.payload_mut().copy_from_slice(&payload(seq));
                c.commit();
            }
            w.close();
        });
        let (mut delivered, mut lost) = (0u64, 0u64);
        loop {
            match reader.poll() {
                Poll::Frame(f) => {
                    assert_eq!(f.payload, &payload(f.meta.seq)[..], "record {}", f.meta.seq);
                    delivered += 1;
                }
                Poll::Lagged(n) => lost += n,
                Poll::Closed => break,
                Poll::Empty | Poll::Pending => std::hint::spin_loop(),
            }
        }
        writer.join().expect("writer thread");
        assert_eq!(
            delivered + lost,
            TOTAL,
            "every record delivered or counted lost"
        );
    }
}

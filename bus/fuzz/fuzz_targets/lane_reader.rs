//! Fuzzes lane readers over untrusted lane memory.
//!
//! The first input byte picks a mode (`byte % 3`):
//!
//! - **raw** (`0`): the input is a whole lane image (header, anchors, data), zero-extended to a
//!   length the input chooses (up to ~1.1 MiB), given to `Lane::attach`. Most images are refused;
//!   whatever attaches is read.
//! - **header** (`1`): a VALID header built by `Lane::heap` (its words copied out), with
//!   fuzzer-chosen geometry (capacity 64 or 128 KiB, `max_frame`, block size, salt), then
//!   fuzzer-controlled `claim_tail`, `state`, `final_tail`, anchors, and data-area bytes placed at
//!   a fuzzer-chosen offset of the ring. `Lane::attach` must accept it.
//! - **written** (`2`): a real `LaneWriter` on a heap lane runs fuzzer-chosen operations
//!   (records of any size, bursts that wrap the ring, aborted claims, claims abandoned BUSY as
//!   by a crashed writer, close, mark dead, raw word corruption of any word, header included),
//!   while a reader created first is polled in between.
//!
//! Then readers start from every `StartAt` (`Oldest`, `Latest`, `Time(t)`), with and without
//! `set_writer_gone(true)` (and with a zero stall timeout in some runs), alternating `poll()`
//! and `read_in_place` as the input says, for a bounded number of polls. Checked:
//!
//! - no panic (overflow checks are on in this crate's profile), every poll returns;
//! - **liveness**: a reader told the writer is gone (or with a zero stall timeout) reaches
//!   `Empty` or `Closed` within `4 × capacity / 8 + 64` polls (every step advances by at least 8
//!   bytes and a cursor never passes the tail);
//! - `Lagged(n)` has `n >= 1`; delivered payloads have the length in their header; the filter
//!   is honoured;
//! - in **written** mode without corruption, the exact protocol guarantees: every delivered
//!   record is one the writer committed, with its length, key and bytes (nothing torn), with
//!   strictly increasing sequence numbers (nothing twice); no garbage and no torn copies are
//!   counted; and the reader that saw the lane from its first byte accounts for every sequence
//!   number it was handed: `delivered + lost <=` the number of sequence numbers the writer
//!   assigned, and `>= last + 1 - aborted - abandoned` (`last`: the last delivered) if it was
//!   never lapped.

#![no_main]

use std::sync::Arc;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use snapbus_bus::lane::layout::{FRAME_HEADER_LEN, HEADER_LEN, LaneHeader};
use snapbus_bus::lane::{Lane, LaneConfig, LaneReader, Poll, RecordMeta, StartAt};
use snapbus_bus::mem::{HeapMem, LaneMem};

/// A forgiving cursor over the input: reads past the end give zeros.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        head
    }
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let b = self.bytes(N);
        a[..b.len()].copy_from_slice(b);
        a
    }
    fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }
    fn rest(&mut self) -> &'a [u8] {
        self.bytes(usize::MAX)
    }
}

macro_rules! hw {
    ($field:ident) => {
        std::mem::offset_of!(LaneHeader, $field) / 8
    };
}

/// Fuzzer-chosen lane sizes (always valid).
fn config(inp: &mut Input<'_>) -> (LaneConfig, u64) {
    let b = inp.u8();
    let capacity = if b & 1 == 0 { 64 << 10 } else { 128 << 10 };
    let max_frame = [64, 80, 112, 256, 4096, capacity / 8, capacity / 5 / 16 * 16, capacity / 4]
        [usize::from(b >> 1) & 7];
    let block_size = (4 << 10) << ((b >> 4) % 3);
    let salt = match inp.u64() {
        0 => 0x9e37_79b9_7f4a_7c15,
        s => s,
    };
    let cfg = LaneConfig {
        capacity,
        max_frame,
        block_size,
    };
    (cfg, salt)
}

/// A fuzzer-chosen absolute position: small, a few laps in, or near `u64::MAX`.
fn position(inp: &mut Input<'_>, capacity: u64) -> u64 {
    match inp.u8() % 5 {
        0 => inp.u64(),
        1 => u64::from(inp.u16()) * 8,
        2 => u64::from(inp.u8()) * capacity + u64::from(inp.u16()) * 8,
        3 => u64::MAX - u64::from(inp.u16()),
        _ => u64::from(inp.u32()),
    }
}

fn meta_for(seq: u64) -> RecordMeta {
    RecordMeta {
        schema_key: (seq % 4) as u16,
        schema_version: 1,
        level: (seq % 5) as u8,
        emitter: (seq % 3) as u16,
    }
}

fn pattern(seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(31) as u8).wrapping_add(i as u8)
}

/// What the writer committed, for the exactness checks of the written mode.
#[derive(Default)]
struct Oracle {
    /// Per sequence number: `Some((payload_len, schema_key))` if committed.
    records: Vec<Option<(usize, u16)>>,
    aborted: u64,
    abandoned: u64,
    corrupted: bool,
}

impl Oracle {
    fn exact(&self) -> bool {
        !self.corrupted
    }
}

/// A reader under test, with the checks that hold for every delivery.
struct Checked<M: LaneMem> {
    reader: LaneReader<M>,
    filter: Option<Vec<u16>>,
    last_seq: Option<u64>,
    buf: Vec<u8>,
}

#[derive(PartialEq, Eq, Debug)]
enum Outcome {
    Progress,
    Quiet,
    Pending,
}

impl<M: LaneMem> Checked<M> {
    fn new(lane: &Arc<Lane<M>>, start: StartAt, inp: &mut Input<'_>) -> Checked<M> {
        let mut reader = lane.reader(start);
        let flags = inp.u8();
        let filter = (flags & 1 != 0).then(|| {
            let keys = vec![u16::from(flags >> 1 & 3), inp.u16() % 8];
            reader.set_filter(keys.iter().copied());
            keys
        });
        Checked {
            reader,
            filter,
            last_seq: None,
            buf: Vec::new(),
        }
    }

    fn check_delivery(
        &mut self,
        seq: u64,
        key: u16,
        bytes: Option<&[u8]>,
        len: usize,
        o: Option<&Oracle>,
    ) {
        if let Some(keys) = &self.filter {
            assert!(keys.contains(&key), "filtered key {key} delivered");
        }
        if let Some(o) = o.filter(|o| o.exact()) {
            if let Some(last) = self.last_seq {
                assert!(seq > last, "seq {seq} delivered after {last}");
            }
            let rec = o.records.get(seq as usize).copied().flatten();
            assert_eq!(
                rec,
                Some((len, key)),
                "delivered seq {seq} was not committed as such"
            );
            if let Some(b) = bytes {
                for (i, &x) in b.iter().enumerate() {
                    assert_eq!(x, pattern(seq, i), "seq {seq}: payload byte {i} torn");
                }
            }
        }
        self.last_seq = Some(seq);
    }

    /// One poll (`in_place` picks `read_in_place`); returns what happened.
    fn step(&mut self, in_place: bool, full_copy: bool, o: Option<&Oracle>) -> Outcome {
        if in_place {
            let buf = &mut self.buf;
            let r = self.reader.read_in_place(|m, v| {
                assert_eq!(v.len(), m.payload_len);
                assert_eq!(v.byte(v.len()), None);
                let last = v.len().checked_sub(1).and_then(|i| v.byte(i));
                let copied = full_copy && {
                    buf.resize(v.len(), 0);
                    v.copy_to(buf)
                };
                (last, copied)
            });
            match r {
                Ok((meta, (last, copied))) => {
                    let buf = std::mem::take(&mut self.buf);
                    let bytes = copied.then_some(&buf[..]);
                    if let (Some(o), Some(last)) = (o.filter(|o| o.exact()), last) {
                        if o.records
                            .get(meta.seq as usize)
                            .copied()
                            .flatten()
                            .map(|r| r.0)
                            == Some(meta.payload_len)
                        {
                            assert_eq!(last, pattern(meta.seq, meta.payload_len - 1));
                        }
                    }
                    self.check_delivery(meta.seq, meta.schema_key, bytes, meta.payload_len, o);
                    self.buf = buf;
                    Outcome::Progress
                }
                Err(p) => Self::other(p.into()),
            }
        } else {
            match self.reader.poll() {
                Poll::Frame(f) => {
                    assert_eq!(f.payload.len(), f.meta.payload_len);
                    let (seq, key, len) = (f.meta.seq, f.meta.schema_key, f.meta.payload_len);
                    let copy = f.payload.to_vec();
                    self.check_delivery(seq, key, Some(&copy), len, o);
                    Outcome::Progress
                }
                p => Self::other(p),
            }
        }
    }

    fn other(p: Poll<'_>) -> Outcome {
        match p {
            Poll::Frame(_) => unreachable!(),
            Poll::Lagged(n) => {
                assert!(n >= 1, "Lagged(0)");
                Outcome::Progress
            }
            Poll::Empty | Poll::Closed => Outcome::Quiet,
            Poll::Pending => Outcome::Pending,
        }
    }
}

/// Runs readers from every start, with and without `writer_gone`, for a bounded number of
/// polls each.
fn read_all<M: LaneMem>(lane: &Arc<Lane<M>>, inp: &mut Input<'_>, o: Option<&Oracle>) {
    let cap = lane.geometry().capacity;
    let bound = 4 * (cap / 8) as usize + 64;
    let t = position(inp, cap);
    let _ = lane.stats();
    for start in [StartAt::Oldest, StartAt::Latest, StartAt::Time(t)] {
        for gone in [false, true] {
            let mut c = Checked::new(lane, start, inp);
            let seed = inp.u8();
            let zero_timeout = !gone && seed & 0x80 != 0;
            c.reader.set_writer_gone(gone);
            if zero_timeout {
                c.reader.set_stall_timeout(Duration::ZERO);
            }
            let live = gone || zero_timeout;
            let limit = if live { 2 * bound } else { bound };
            let mut quiet = false;
            for i in 0..limit {
                let in_place = seed >> (i % 7) & 1 != 0;
                let _ = c.reader.has_pending_bytes();
                match c.step(in_place, i % 3 == 0, o) {
                    Outcome::Quiet => {
                        quiet = true;
                        break;
                    }
                    Outcome::Pending if !live => break,
                    // With the writer gone, holes are skipped at once: `Pending` only comes
                    // from `step` exhausting its per-call budget, i.e. a reader going round
                    // in circles.
                    Outcome::Pending if gone => panic!(
                        "Pending from a reader whose writer is gone, from {start:?} at position \
                         {} (stats {:?})",
                        c.reader.position(),
                        c.reader.stats()
                    ),
                    _ => {}
                }
            }
            if live {
                assert!(
                    quiet,
                    "reader from {start:?} (writer gone: {gone}) still busy after {limit} polls \
                     at position {} (stats {:?})",
                    c.reader.position(),
                    c.reader.stats()
                );
            }
            if let (Some(o), true) = (o, quiet) {
                if o.exact() {
                    let s = c.reader.stats();
                    assert_eq!(s.garbage, 0, "garbage counted on an intact lane: {s:?}");
                    assert_eq!(s.torn, 0, "torn copy without a concurrent writer: {s:?}");
                }
            }
        }
    }
}

fn raw(inp: &mut Input<'_>) {
    let len = (inp.u32() as usize % ((1 << 20) + (128 << 10))) & !7;
    let bytes = inp.rest();
    let mut image = bytes.to_vec();
    if image.len() < len {
        image.resize(len, 0);
    }
    if let Ok(lane) = Lane::attach(HeapMem::from_bytes(&image)) {
        let lane = Arc::new(lane);
        // Readers take their parameters from a fixed tail (the image is all the input).
        let mut none = Input { data: &[] };
        read_all(&lane, &mut none, None);
    }
}

fn header(inp: &mut Input<'_>) {
    let (cfg, salt) = config(inp);
    let proto = Lane::heap(&cfg, salt).expect("valid config");
    let geo = *proto.geometry();
    let cap = geo.capacity;
    let mut words: Vec<u64> = vec![0; (geo.segment_len() / 8) as usize];
    for (i, w) in words
        .iter_mut()
        .enumerate()
        .take((geo.data_off / 8) as usize)
    {
        *w = proto
            .mem()
            .get(i)
            .map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed));
    }
    words[hw!(claim_tail)] = position(inp, cap);
    words[hw!(state)] = match inp.u8() % 6 {
        4 => inp.u64(),
        5 => 0,
        s => u64::from(s),
    };
    words[hw!(final_tail)] = position(inp, cap);
    let anchors = inp.u8();
    for k in 0..geo.n_blocks as usize {
        if anchors >> (k % 8) & 1 != 0 {
            words[HEADER_LEN / 8 + k] = match inp.u8() % 3 {
                0 => position(inp, cap),
                1 => words[hw!(claim_tail)].wrapping_sub(u64::from(inp.u16()) * 8),
                _ => (k as u64) * geo.block_size() + u64::from(inp.u16() % 512) * 8,
            };
        }
    }
    let at = u64::from(inp.u16()) * 8;
    let params = inp.bytes(24);
    let data = inp.rest();
    let mut image: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    for (j, &b) in data.iter().enumerate() {
        let phys = (at + j as u64) & (cap - 1);
        image[(geo.data_off + phys) as usize] = b;
    }
    let lane =
        Arc::new(Lane::attach(HeapMem::from_bytes(&image)).expect("a valid header attaches"));
    let mut p = Input { data: params };
    read_all(&lane, &mut p, None);
}

fn written(inp: &mut Input<'_>) {
    let (cfg, salt) = config(inp);
    let lane = Lane::heap(&cfg, salt).expect("valid config");
    let geo = *lane.geometry();
    let max_payload = geo.max_frame as usize - FRAME_HEADER_LEN;
    let mut w = lane.writer().expect("heap lanes are writable");
    let mut o = Oracle::default();
    let mut early = Checked::new(&lane, StartAt::Oldest, &mut Input { data: &[] });
    let mut ops = 0;
    let mut payload = Vec::new();
    let mut write = |w: &mut snapbus_bus::lane::LaneWriter<HeapMem>, o: &mut Oracle, len: usize| {
        let seq = o.records.len() as u64;
        let meta = meta_for(seq);
        if let Ok(mut claim) = w.claim(len, meta) {
            assert_eq!(claim.seq(), seq);
            payload.clear();
            payload.extend((0..len).map(|i| pattern(seq, i)));
            claim.write_payload(&payload);
            claim.commit();
            o.records.push(Some((len, meta.schema_key)));
        }
    };
    while !inp.is_empty() && ops < 512 {
        ops += 1;
        let op = inp.u8();
        match op % 10 {
            0..=2 => {
                let len = usize::from(inp.u16()) % (max_payload + 16);
                write(&mut w, &mut o, len);
            }
            3 => {
                // A burst: wraps the ring quickly without spending input.
                let n = usize::from(inp.u8()) * 16;
                let len = usize::from(inp.u8()) % (max_payload + 1);
                for _ in 0..n {
                    write(&mut w, &mut o, len);
                }
            }
            4 => {
                let len = usize::from(inp.u16()) % (max_payload + 1);
                if let Ok(claim) = w.claim(len, meta_for(o.records.len() as u64)) {
                    drop(claim);
                    o.records.push(None);
                    o.aborted += 1;
                }
            }
            5 => {
                // Abandoned BUSY, as by a writer killed mid-record.
                let len = usize::from(inp.u16()) % (max_payload + 1);
                if let Ok(claim) = w.claim(len, meta_for(o.records.len() as u64)) {
                    std::mem::forget(claim);
                    o.records.push(None);
                    o.abandoned += 1;
                }
            }
            6 => {
                let i = inp.u32() as usize % lane.mem().len_words();
                let v = inp.u64();
                if let Some(a) = lane.mem().get(i) {
                    a.fetch_xor(v, std::sync::atomic::Ordering::Relaxed);
                }
                o.corrupted |= v != 0;
            }
            7 => {
                for _ in 0..=(op >> 4) {
                    early.step(op & 0x80 != 0, true, Some(&o));
                }
            }
            8 => {
                if op & 0x10 != 0 {
                    w.close();
                } else {
                    assert!(lane.mark_dead());
                }
            }
            _ => {
                // Drain the early reader as far as it goes now.
                for i in 0..64 {
                    if early.step(i % 2 == 0, false, Some(&o)) != Outcome::Progress {
                        break;
                    }
                }
            }
        }
    }
    // The early reader saw the lane from position 0: it can account for every sequence number.
    early.reader.set_writer_gone(true);
    let bound = 8 * (geo.capacity / 8) as usize + 64;
    let mut quiet = false;
    for i in 0..bound {
        match early.step(i % 2 == 1, i % 5 == 0, Some(&o)) {
            Outcome::Quiet => {
                quiet = true;
                break;
            }
            Outcome::Pending => panic!(
                "Pending from the early reader with the writer gone, at position {} (stats \
                 {:?})",
                early.reader.position(),
                early.reader.stats()
            ),
            Outcome::Progress => {}
        }
    }
    assert!(
        quiet,
        "early reader still busy after {bound} polls: {:?}",
        early.reader.stats()
    );
    if o.exact() {
        let s = early.reader.stats();
        if let Some(last) = early.last_seq {
            // Upper bound always; the lower bound only if it never lapped (loss before the
            // first record a reader meets is not counted: it has no sequence number to start
            // from).
            // The upper bound is every sequence number the writer handed out, not `last + 1`:
            // an aborted frame after an abandoned one reports the hole as lost without a
            // delivery after it.
            let seen = s.delivered + s.lost;
            let skipped = o.aborted + o.abandoned;
            assert!(
                seen <= o.records.len() as u64 && (s.lapped > 0 || seen + skipped >= last + 1),
                "accounting: delivered {} + lost {} vs last seq {last} ({skipped} aborted or \
                 abandoned): {s:?}",
                s.delivered,
                s.lost
            );
        }
        assert_eq!(s.garbage, 0, "garbage counted on an intact lane: {s:?}");
        assert_eq!(s.torn, 0, "torn copy without a concurrent writer: {s:?}");
    }
    read_all(&lane, inp, Some(&o));
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input { data };
    match inp.u8() % 3 {
        0 => raw(&mut inp),
        1 => header(&mut inp),
        _ => written(&mut inp),
    }
});

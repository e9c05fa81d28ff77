//! What a producer's copy of one record into its lane costs, by the way it is copied: `memcpy`
//! (`copy_from_slice`) against `snapbus_bus::stream::copy_to_lane` as the publisher calls it
//! (non-temporal stores for records of 16 KiB and more in a lane larger than the last-level
//! cache, `memcpy` otherwise), for sources that sit the way a lane's payloads do against
//! them: aligned alike to 16 bytes (a 16-aligned buffer copied after the lane's 48-byte frame
//! header), or 8 bytes apart (a tensor after a field of 8 bytes, say).
//!
//! ```sh
//! cargo run --release -p snapbus-benches --example lane_copy
//! ```
//!
//! For each ring (8 MiB: the cache-sized lane of `compare`; 64 MiB: the default lane) and
//! record size, the records go one after the other round the ring (a frame header before
//! each, frames rounded to 16 bytes), 4,000 MiB of them a round, the two ways alternated over
//! 7 rounds (the first not counted); it prints each way's median GB/s and their ratio. A probe
//! for the benchmark runs, not a comparison with peers.

#![allow(missing_docs)]

use std::time::Instant;

use snapbus_bus::lane::layout::{FRAME_ALIGN, FRAME_HEADER_LEN};
use snapbus_bus::stream::{copy_to_lane, worth_streaming};

/// A frame header's worth before each record, as in a lane.
const HEADER_BYTES: usize = FRAME_HEADER_LEN;
/// Bytes copied per round and way.
const ROUND_BYTES: usize = 4000 << 20;
const ROUNDS: usize = 7;

/// A way to copy a record into the ring (the flag: whether the ring outgrows the caches).
type Copy = fn(&mut [u8], &[u8], bool);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// GB/s of copying `record` bytes from `src` round a `ring`-byte buffer, each record
/// `HEADER_BYTES` past a frame boundary, with `copy`.
fn round(ring: &mut [u8], src: &[u8], copy: Copy) -> f64 {
    let record = src.len();
    let stride = (HEADER_BYTES + record).next_multiple_of(FRAME_ALIGN);
    let streaming = worth_streaming(ring.len());
    let slots = ring.len() / stride;
    let n = (ROUND_BYTES / record).max(1);
    let t = Instant::now();
    for k in 0..n {
        let at = (k % slots) * stride + HEADER_BYTES;
        copy(&mut ring[at..at + record], src, streaming);
    }
    (n * record) as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let ways: [(&str, Copy); 2] = [
        ("memcpy", |d, s, _| d.copy_from_slice(s)),
        ("copy_to_lane", copy_to_lane),
    ];
    println!(
        "| ring | streams | record | source against destination | memcpy GB/s | copy_to_lane GB/s | ratio |"
    );
    println!("|---|---|---:|---|---:|---:|---:|");
    for ring_mib in [8usize, 64] {
        // Data in every byte (lines of zeros reach memory faster than data on some machines);
        // the ring 64-aligned (a lane is page-aligned).
        let mut ring = vec![1u8; (ring_mib << 20) + 64];
        let skip = ring.as_ptr().align_offset(64);
        let ring = &mut ring[skip..skip + (ring_mib << 20)];
        for record in [4usize << 10, 64 << 10, 1 << 20] {
            let data: Vec<u8> = (0..record + 64)
                .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect();
            let base = data.as_ptr().align_offset(16);
            // Records start on a 16-byte boundary: so does a source aligned alike.
            for (how, off) in [("aligned alike", base), ("8 bytes apart", base + 8)] {
                let src = &data[off..off + record];
                let mut gbs = [Vec::new(), Vec::new()];
                for r in 0..ROUNDS {
                    for (w, (_, copy)) in ways.iter().enumerate() {
                        let v = round(ring, src, *copy);
                        if r > 0 {
                            gbs[w].push(v);
                        }
                    }
                }
                let [a, b] = gbs.map(median);
                let streams = worth_streaming(ring.len()) && record >= 16 << 10;
                println!(
                    "| {ring_mib} MiB | {} | {} KiB | {how} | {a:.1} | {b:.1} | {:.2}× |",
                    if streams { "yes" } else { "no" },
                    record >> 10,
                    b / a
                );
            }
        }
    }
}

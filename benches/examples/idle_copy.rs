//! What one large copy into a rotating buffer costs when the writer was idle before it: the
//! copy a producer makes of a large record into its lane, at a low rate. Plain stores
//! (`copy_from_slice`) against the lane's non-temporal ones (`snapbus_bus::stream::copy`),
//! alternated in blocks, each copy timed on its own:
//!
//! ```sh
//! cargo run --release -p snapbus-benches --example idle_copy -- [RING_BYTES] [RECORD_BYTES] [GAP_MICROS] [sleep|spin]
//! ```
//!
//! Defaults: an 8 MiB buffer (the cache-sized lane of `compare`), 1 MiB records, 5,000 µs
//! between two copies (`compare`'s 1 MiB latency runs send one every 5 ms), the gap slept
//! (`spin`: busy-waited). It prints the median and the 10th and 90th percentiles of each. A
//! probe for BENCHMARKS.md ("Why the cache-sized ring only draws level with iceoryx2"), not a
//! comparison with peers.

#![allow(missing_docs)]

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

const COPIES: usize = 400;
const BLOCK: usize = 25;
/// A frame header's worth before each record, as in a lane (records are not line-aligned).
const OFFSET_BYTES: usize = 40;

fn arg(args: &[String], i: usize, default: u64) -> Result<u64> {
    match args.get(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .with_context(|| format!("argument {}: {s:?}", i + 1)),
    }
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ring = usize::try_from(arg(&args, 0, 8 << 20)?)?;
    let record = usize::try_from(arg(&args, 1, 1 << 20)?)?;
    let gap = Duration::from_micros(arg(&args, 2, 5_000)?);
    let spin = match args.get(3).map(String::as_str) {
        None | Some("sleep") => false,
        Some("spin") => true,
        Some(other) => bail!("argument 4: sleep or spin, not {other:?}"),
    };
    let step = (record + OFFSET_BYTES).next_multiple_of(8);
    if step > ring {
        bail!("a record of {record} bytes does not fit a ring of {ring}");
    }
    // Data in every byte (lines of zeros reach memory faster than data on some machines).
    let pattern = |i: usize| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 | 1;
    let mut dst: Vec<u8> = (0..ring).map(|i| pattern(i + 7)).collect();
    let src: Vec<u8> = (0..record).map(pattern).collect();
    let (mut pos, mut times) = (0usize, [Vec::new(), Vec::new()]);
    for i in 0..COPIES {
        let streaming = (i / BLOCK) % 2 == 1;
        let until = Instant::now() + gap;
        if spin {
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        } else {
            std::thread::sleep(gap);
        }
        if pos + step > ring {
            pos = 0;
        }
        let d = &mut dst[pos + OFFSET_BYTES..pos + OFFSET_BYTES + record];
        let t0 = Instant::now();
        if streaming {
            snapbus_bus::stream::copy(d, &src);
        } else {
            d.copy_from_slice(&src);
        }
        let took = t0.elapsed();
        std::hint::black_box(&dst[pos + OFFSET_BYTES]);
        // The first block of each kind warms up.
        if i >= 2 * BLOCK {
            times[usize::from(streaming)].push(took);
        }
        pos += step;
    }
    let how = if spin { "spun" } else { "slept" };
    println!(
        "{} MiB ring, {record} B records, {} µs {how} between copies",
        ring >> 20,
        gap.as_micros()
    );
    for (name, t) in ["plain stores", "non-temporal (snapbus_bus::stream::copy)"]
        .iter()
        .zip(&mut times)
    {
        t.sort();
        println!(
            "  {name}: p50 {:.1} µs (p10 {:.1}, p90 {:.1}), {} copies",
            quantile(t, 0.5),
            quantile(t, 0.1),
            quantile(t, 0.9),
            t.len()
        );
    }
    Ok(())
}

//! Copies of payloads into a lane: large ones bypass the caches, small ones are inlined.
//!
//! A lane larger than the last-level cache does not stay cached, so a plain copy of a large
//! payload into it first reads every destination line it is about to overwrite (a
//! read-for-ownership), then evicts it again: twice the memory traffic the payload needs.
//! Non-temporal stores write whole lines without reading them. They only pay where the
//! destination would not stay cached anyway ([`worth_streaming`]: a lane larger than the
//! last-level cache) and for payloads of at least [`STREAM_MIN_BYTES`] (below that the fences
//! cost more than they save). The publisher applies this policy
//! ([`PayloadWriter`](crate::publisher::PayloadWriter)); this module is its copies.
//!
//! # Guarantees
//!
//! - **The same bytes as `copy_from_slice`.** Only the way the stores reach memory differs.
//! - **Ordered like plain stores.** Non-temporal stores are weakly ordered on x86-64, so a
//!   streaming copy starts with a store fence (every earlier store, such as the claim that
//!   marks the old frame overwritten, is visible before any payload byte) and ends with one
//!   (the payload is visible before the commit that follows). A reader validating a frame
//!   sees what it would see with plain stores.
//! - **No reference to memory the caller does not own.** [`copy_cells`] reads its source one
//!   element at a time through the caller's `get` (for memory other code may change, like a
//!   Python buffer seen through `pyo3`'s `ReadOnlyCell`), and only ever writes `dst`.
//! - **Plain copies elsewhere:** below [`STREAM_MIN_BYTES`], and off x86-64. A writer's copy
//!   of a payload ([`copy_to_lane`]) makes one of up to [`INLINE_MAX_BYTES`] with a few
//!   inline moves, where a call into `memcpy` cost as much as the rest of a small record, and
//!   any other that does not stream with the platform's `memcpy`. A payload starts on a
//!   16-byte boundary of the lane (its 48-byte frame header), where `memcpy` is fast for a
//!   16-aligned source on every machine measured, so no copy here is tuned to one machine:
//!   whether to stream is decided at run time from this machine's cache size.
//!
//! # Example
//!
//! ```
//! use std::cell::Cell;
//!
//! let src: Vec<f32> = (0..16_384).map(|i| i as f32).collect();
//! let mut dst = vec![0u8; src.len() * 4];
//! snapbus_bus::stream::copy(&mut dst, bytemuck::cast_slice(&src));
//! assert_eq!(bytemuck::cast_slice::<u8, f32>(&dst), &src[..]);
//!
//! let cells: Vec<Cell<f32>> = src.iter().copied().map(Cell::new).collect();
//! let mut dst2 = vec![0u8; dst.len()];
//! snapbus_bus::stream::copy_cells(&mut dst2, &cells, Cell::get);
//! assert_eq!(dst, dst2);
//! // A lane outgrows the caches when it is larger than the largest of them.
//! let cache = snapbus_bus::stream::last_level_cache_bytes();
//! assert!(!snapbus_bus::stream::worth_streaming(cache));
//! assert!(snapbus_bus::stream::worth_streaming(cache + 1));
//! ```

use std::sync::OnceLock;

use bytemuck::Pod;

/// Payloads from this size on are copied with non-temporal stores.
pub const STREAM_MIN_BYTES: usize = 16 << 10;

/// The last-level cache assumed where the system does not say (`/sys/devices/system/cpu`).
pub const ASSUMED_CACHE_BYTES: usize = 32 << 20;

/// The size of this machine's largest CPU cache, in bytes (read once from
/// `/sys/devices/system/cpu/cpu0/cache`; [`ASSUMED_CACHE_BYTES`] where it is not there).
pub fn last_level_cache_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| read_cache_bytes().unwrap_or(ASSUMED_CACHE_BYTES))
}

fn read_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let p = e.ok()?.path();
        let level: u32 = std::fs::read_to_string(p.join("level"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let size = std::fs::read_to_string(p.join("size")).ok()?;
        Some((level, parse_size(size.trim())?))
    })
    .max()
    .map(|(_, bytes)| bytes)
}

/// `32768K`, `1M`, `512` (bytes) as sysfs writes cache sizes.
fn parse_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    n.checked_mul(match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    })
}

/// Whether large copies into a region of `region_bytes` (a lane) should stream: it is larger
/// than the last-level cache, so what is written there is evicted before it is read again.
pub fn worth_streaming(region_bytes: usize) -> bool {
    region_bytes > last_level_cache_bytes()
}

/// Copies `src` into `dst`. Panics if the lengths differ (as `copy_from_slice` does).
#[inline]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "stream::copy of unequal lengths");
    if src.len() < STREAM_MIN_BYTES {
        dst.copy_from_slice(src);
    } else {
        copy_cells(dst, src, |b| *b);
    }
}

/// Payloads up to this size are copied into a lane with inline moves ([`copy_to_lane`]).
pub const INLINE_MAX_BYTES: usize = 256;

/// Copies a payload into a writer's claim: up to [`INLINE_MAX_BYTES`] with a few inline moves,
/// from [`STREAM_MIN_BYTES`] on with non-temporal stores if `streaming` (the lane outgrows the
/// caches: [`worth_streaming`]), and otherwise with `copy_from_slice` (the platform's
/// `memcpy`). Panics if the lengths differ (as `copy_from_slice` does).
///
/// Small payloads are most records, and for them the call into `memcpy` and its dispatch on
/// the size can cost as much as the rest of a write (`lane_write/64B/run`).
#[inline(always)]
pub fn copy_to_lane(dst: &mut [u8], src: &[u8], streaming: bool) {
    assert_eq!(
        dst.len(),
        src.len(),
        "stream::copy_to_lane of unequal lengths"
    );
    if src.len() <= INLINE_MAX_BYTES {
        copy_inline(dst, src);
    } else if streaming && src.len() >= STREAM_MIN_BYTES {
        copy_cells(dst, src, |b| *b);
    } else {
        dst.copy_from_slice(src);
    }
}

/// Copies `src` (at most [`INLINE_MAX_BYTES`]) into `dst`, of the same length, as two
/// fixed-size copies that overlap in the middle (the way `memcpy` itself copies small sizes),
/// each a few moves. No loop: the compiler would turn one back into a `memcpy` call.
#[inline(always)]
fn copy_inline(dst: &mut [u8], src: &[u8]) {
    /// `N` bytes from the start and `N` bytes to the end (`N <= len`).
    #[inline(always)]
    fn two<const N: usize>(dst: &mut [u8], src: &[u8]) {
        let len = src.len();
        dst[..N].copy_from_slice(&src[..N]);
        dst[len - N..].copy_from_slice(&src[len - N..]);
    }
    debug_assert!(src.len() <= INLINE_MAX_BYTES && dst.len() == src.len());
    match src.len() {
        0 => {}
        1 => dst[0] = src[0],
        2..4 => two::<2>(dst, src),
        4..8 => two::<4>(dst, src),
        8..16 => two::<8>(dst, src),
        16..32 => two::<16>(dst, src),
        32..64 => two::<32>(dst, src),
        64..128 => two::<64>(dst, src),
        _ => two::<128>(dst, src),
    }
}

/// Copies the elements of `src`, read with `get`, into `dst` as their native-endian bytes.
/// Panics if `dst` is not exactly `src.len()` elements long.
#[inline]
pub fn copy_cells<T: Pod, C>(dst: &mut [u8], src: &[C], get: impl Fn(&C) -> T) {
    let size = std::mem::size_of::<T>();
    assert_eq!(
        dst.len(),
        src.len() * size,
        "stream::copy_cells: destination and source lengths differ"
    );
    if dst.len() < STREAM_MIN_BYTES {
        plain(dst, src, get);
    } else {
        stream(dst, src, get);
    }
}

/// The streaming copy: a store fence, the elements up to the first 16-byte boundary of `dst`,
/// then a 64-byte line at a time (read into a local line, written with non-temporal stores),
/// then the tail, then a store fence.
#[cfg(target_arch = "x86_64")]
fn stream<T: Pod, C>(dst: &mut [u8], src: &[C], get: impl Fn(&C) -> T) {
    match std::mem::size_of::<T>() {
        1 => lines::<T, C, 64>(dst, src, get),
        2 => lines::<T, C, 32>(dst, src, get),
        4 => lines::<T, C, 16>(dst, src, get),
        8 => lines::<T, C, 8>(dst, src, get),
        _ => plain(dst, src, get),
    }
}

/// A store fence, the elements up to the first 16-byte boundary of `dst`, then a 64-byte line
/// at a time (elements of `64 / N` bytes read into a local line, written with four
/// non-temporal 16-byte stores), then the tail, then a store fence.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lines<T: Pod, C, const N: usize>(dst: &mut [u8], src: &[C], get: impl Fn(&C) -> T) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let size = std::mem::size_of::<T>();
    debug_assert_eq!(size * N, 64);
    // SAFETY: a fence has no preconditions; it makes every earlier store (the claim of this
    // frame) visible before the streaming stores below, which could otherwise pass it.
    unsafe { _mm_sfence() };
    // Elements before the first 16-byte boundary (a whole number of them when `dst` is
    // aligned for `T`; otherwise everything goes the plain way).
    let to_boundary = dst.as_ptr().align_offset(16);
    let head = if to_boundary % size == 0 {
        (to_boundary / size).min(src.len())
    } else {
        src.len()
    };
    let (d_head, d) = dst.split_at_mut(head * size);
    let (s_head, s) = src.split_at(head);
    plain(d_head, s_head, &get);
    let mut lines = d.chunks_exact_mut(64);
    let mut elems = s.chunks_exact(N);
    let mut line = [T::zeroed(); N];
    for (d_line, s_line) in (&mut lines).zip(&mut elems) {
        for (l, e) in line.iter_mut().zip(s_line) {
            *l = get(e);
        }
        let l = line.as_ptr().cast::<__m128i>();
        // SAFETY: `d_line` is 64 bytes of `d`, a `&mut` slice no one else in this process
        // sees, so the four 16-byte stores are in bounds; `d` starts on a 16-byte boundary
        // (the head above copied up to it; where it could not, the head took every element
        // and there is no line) and every line is 64 bytes further, as `_mm_stream_si128`
        // requires; the loads read the 64-byte local `line` (`N`
        // elements of `64 / N` bytes; unaligned loads); SSE2 is part of the x86-64 baseline.
        unsafe {
            let p = d_line.as_mut_ptr().cast::<__m128i>();
            _mm_stream_si128(p, _mm_loadu_si128(l));
            _mm_stream_si128(p.add(1), _mm_loadu_si128(l.add(1)));
            _mm_stream_si128(p.add(2), _mm_loadu_si128(l.add(2)));
            _mm_stream_si128(p.add(3), _mm_loadu_si128(l.add(3)));
        }
    }
    plain(lines.into_remainder(), elems.remainder(), &get);
    // SAFETY: a fence has no preconditions; it orders the streaming stores above before any
    // later store (the commit that publishes them).
    unsafe { _mm_sfence() };
}

/// The plain element-by-element copy.
#[inline]
fn plain<T: Pod, C>(dst: &mut [u8], src: &[C], get: impl Fn(&C) -> T) {
    let size = std::mem::size_of::<T>();
    if size == 0 {
        return;
    }
    for (d, s) in dst.chunks_exact_mut(size).zip(src) {
        d.copy_from_slice(bytemuck::bytes_of(&get(s)));
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn stream<T: Pod, C>(dst: &mut [u8], src: &[C], get: impl Fn(&C) -> T) {
    plain(dst, src, get);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let n = STREAM_MIN_BYTES * 2 + 100;
        let lens = [0, 1, 63, 64, STREAM_MIN_BYTES - 1, STREAM_MIN_BYTES];
        for len in lens.into_iter().chain([STREAM_MIN_BYTES + 15, n - 1]) {
            for off in [0, 1, 7, 8, 15, 33] {
                check_copy(copy, len, off, 0);
            }
        }
    }

    #[test]
    fn copies_into_a_lane_every_inline_length_and_the_large_ones_exactly() {
        let n = STREAM_MIN_BYTES + 100;
        let lens = (0..=INLINE_MAX_BYTES + 9).chain([4095, STREAM_MIN_BYTES, n]);
        for len in lens {
            for off in [0, 3, 8] {
                for streaming in [false, true] {
                    check_copy(|d, s| copy_to_lane(d, s, streaming), len, off, 0);
                }
            }
        }
    }

    /// Copies `len` bytes from `src_off` into a buffer at `dst_off` with `copy`, and checks
    /// the copy and that nothing around it changed.
    fn check_copy(copy: impl Fn(&mut [u8], &[u8]), len: usize, dst_off: usize, src_off: usize) {
        let src: Vec<u8> = (0..(len + src_off) as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let mut buf = vec![0xAAu8; len + dst_off + 64];
        copy(&mut buf[dst_off..dst_off + len], &src[src_off..]);
        let what = format!("len {len} dst_off {dst_off} src_off {src_off}");
        assert_eq!(&buf[dst_off..dst_off + len], &src[src_off..], "{what}");
        assert!(buf[..dst_off].iter().all(|&b| b == 0xAA), "before: {what}");
        assert!(
            buf[dst_off + len..].iter().all(|&b| b == 0xAA),
            "after: {what}"
        );
    }

    #[test]
    #[should_panic(expected = "unequal lengths")]
    fn a_lane_copy_of_unequal_lengths_panics_as_copy_from_slice_does() {
        copy_to_lane(&mut [0u8; 9], &[1u8; 8], false);
    }

    #[test]
    fn copies_elements_through_their_getter_at_any_alignment() {
        let n = STREAM_MIN_BYTES / 4 + 37;
        let vals: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
        let cells: Vec<Cell<f32>> = vals.iter().copied().map(Cell::new).collect();
        let want: &[u8] = bytemuck::cast_slice(&vals);
        let mut buf = vec![0u8; want.len() + 64];
        for off in [0, 4, 8, 12, 16, 1] {
            buf.fill(0xAA);
            copy_cells(&mut buf[off..off + want.len()], &cells, Cell::get);
            assert_eq!(&buf[off..off + want.len()], want, "off {off}");
            assert!(buf[..off].iter().all(|&b| b == 0xAA));
            assert!(buf[off + want.len()..].iter().all(|&b| b == 0xAA));
        }
        let f64s: Vec<Cell<f64>> = (0..n).map(|i| Cell::new(i as f64)).collect();
        let mut out = vec![0u8; n * 8];
        copy_cells(&mut out, &f64s, Cell::get);
        let back: Vec<f64> = out
            .chunks_exact(8)
            .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, (0..n).map(|i| i as f64).collect::<Vec<_>>());
    }

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("12X"), None);
        assert_eq!(parse_size(""), None);
        assert!(last_level_cache_bytes() >= 1 << 10);
        assert!(!worth_streaming(last_level_cache_bytes()));
        assert!(worth_streaming(last_level_cache_bytes() + 1));
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn unequal_lengths_panic_like_copy_from_slice() {
        copy_cells(&mut [0u8; 7], &[Cell::new(1u32), Cell::new(2)], Cell::get);
    }
}

//! Lane memory: the words a lane lives in, behind one small trait so the protocol runs unchanged
//! over shared memory ([`ShmMem`]) and over heap atomics ([`HeapMem`], for loom and unit tests).
//!
//! Lane memory is written by another process and is **untrusted**: a reader only ever touches
//! it through atomic loads, forms no reference to it, and validates what it loaded afterwards
//! (a frame overwritten while read is discarded). A writer stores into its own claimed payload
//! bytes with plain (and, for large copies, non-temporal) stores, through a slice
//! (`Claim::payload_mut`) or one copy ([`LaneMem::copy_into_claim`]); everything else it
//! writes, atomically.
//!
//! # The seqlock caveat
//!
//! A claim's bytes are written by no one else (claims are disjoint; the lap guard or `&mut`
//! keeps a later claim off them), but readers may load them while they are being written: a
//! reader that lags by a whole ring reads a frame as the writer overwrites it. This is a
//! seqlock, and like crossbeam's `AtomicCell` and its `SeqLock`, it is **in theory a data
//! race** under the C++/Rust memory model, which makes any concurrent non-atomic write and
//! read of the same location undefined behaviour, atomic load or not. It is sound in practice
//! here for the same reasons as there:
//!
//! - every read of lane memory is an atomic (relaxed) load of a whole word or byte, never a
//!   reference, so the compiler cannot assume the bytes are stable, cache them, or read them
//!   twice and see two values;
//! - a value loaded during a race is never used: the reader checks the frame's commit word and
//!   the lane's write limit after its loads (with the fences the lane protocol describes) and
//!   discards the copy, or whatever a reading closure made of it, if the frame may have been
//!   overwritten meanwhile; garbage is bounded to a discarded value, never a wild access
//!   (every length and offset is bounds-checked first);
//! - the writer's plain stores are to memory no other thread or process stores to, and the
//!   hardware (x86-64, AArch64) makes no distinction between a plain and a relaxed atomic
//!   store of a word.
//!
//! Miri and loom would report such a race if a test made one (loom cannot model plain stores
//! into its atomics at all): tests that run a writer's plain stores on the heap
//! ([`HeapMem`], through `Claim::payload_mut`) alongside readers are kept from Miri.

use crate::sync::{AtomicU64, Ordering};

/// Word-addressed lane memory (8-byte words, little-endian).
pub trait LaneMem: Send + Sync {
    /// Number of 8-byte words.
    fn len_words(&self) -> usize;

    /// Whether this process may write the memory (readers map lanes read-only).
    fn writable(&self) -> bool {
        true
    }

    /// Word `i`, or `None` past the end.
    fn get(&self, i: usize) -> Option<&AtomicU64>;

    /// Words `i .. i + n` (a payload, say) with one bounds check, or `None` if any is past the
    /// end.
    fn span(&self, i: usize, n: usize) -> Option<&[AtomicU64]>;

    /// Words `i .. i + N` (a frame's header, say) with one bounds check, or `None` if any is
    /// past the end: [`LaneMem::span`] of a length known when compiling.
    #[inline(always)]
    fn words<const N: usize>(&self, i: usize) -> Option<&[AtomicU64; N]> {
        self.span(i, N)?.try_into().ok()
    }

    /// Copies `dst.len()` bytes starting at byte offset `byte_off` (8-aligned) with atomic word
    /// loads. Returns `false` (copying nothing) if the range is out of bounds.
    fn copy_out(&self, byte_off: usize, dst: &mut [u8]) -> bool {
        if byte_off % 8 != 0 {
            return false;
        }
        let first = byte_off / 8;
        let words = dst.len().div_ceil(8);
        if first
            .checked_add(words)
            .is_none_or(|end| end > self.len_words())
        {
            return false;
        }
        for (k, chunk) in dst.chunks_mut(8).enumerate() {
            let w = self
                .get(first + k)
                .map_or(0, |a| a.load(Ordering::Relaxed))
                .to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        true
    }

    /// Writes `src` at byte offset `byte_off` (8-aligned) with atomic word stores; the bytes
    /// after `src` up to the next word boundary are zeroed. Only for memory this writer has
    /// claimed. Returns `false` (writing nothing) if out of bounds.
    fn copy_in(&self, byte_off: usize, src: &[u8]) -> bool {
        if byte_off % 8 != 0 {
            return false;
        }
        let first = byte_off / 8;
        let words = src.len().div_ceil(8);
        if first
            .checked_add(words)
            .is_none_or(|end| end > self.len_words())
        {
            return false;
        }
        for (k, chunk) in src.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            if let Some(a) = self.get(first + k) {
                a.store(u64::from_le_bytes(w), Ordering::Relaxed);
            }
        }
        true
    }

    /// [`copy_in`](Self::copy_in) for the payload of a frame this process's writer claimed:
    /// the same bytes (and zeroed padding up to the next word), with plain stores where the
    /// memory allows ([`ShmMem`]: one copy, where `copy_in` makes a store per word).
    ///
    /// # Safety
    /// `[byte_off, byte_off + src.len())`, rounded up to whole words, lies in the payload of a
    /// frame this lane's writer claimed and has not committed or aborted, and the caller holds
    /// that claim: nothing else writes those bytes or holds a reference to them meanwhile.
    /// Readers (of this process or another) may load them concurrently, with atomic loads
    /// only, validating afterwards (the module docs).
    unsafe fn copy_into_claim(&self, byte_off: usize, src: &[u8]) -> bool {
        self.copy_in(byte_off, src)
    }
}

/// Lane memory a writer can also reach with plain stores, into its own claim
/// (`Lane::claimed_payload_mut`): shared memory, and heap memory outside loom (whose atomics
/// are not memory).
#[cfg(not(loom))]
pub trait PlainMem: LaneMem {
    /// The first byte of the memory, with the provenance of all of it, for a writer's plain
    /// stores into its claim (the module docs).
    fn plain_base(&self) -> *mut u8;
}

/// Lane memory on the heap, as loom atomics under `--cfg loom`. For models and tests.
pub struct HeapMem {
    words: Box<[AtomicU64]>,
}

impl HeapMem {
    /// Zeroed memory of `len_bytes` (rounded up to whole words).
    pub fn new(len_bytes: usize) -> HeapMem {
        HeapMem {
            words: (0..len_bytes.div_ceil(8))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

impl HeapMem {
    /// Memory holding a copy of `bytes` (zero-padded to whole words): to read arbitrary or
    /// captured lane images, e.g. in the fuzz target.
    pub fn from_bytes(bytes: &[u8]) -> HeapMem {
        HeapMem {
            words: bytes
                .chunks(8)
                .map(|c| {
                    let mut w = [0u8; 8];
                    w[..c.len()].copy_from_slice(c);
                    AtomicU64::new(u64::from_le_bytes(w))
                })
                .collect(),
        }
    }
}

#[cfg(not(loom))]
impl PlainMem for HeapMem {
    fn plain_base(&self) -> *mut u8 {
        // From the whole slice, so the pointer may reach every word; writing through it is
        // allowed because an `AtomicU64` is an `UnsafeCell` (shared, mutable).
        self.words.as_ptr().cast::<u8>().cast_mut()
    }
}

impl LaneMem for HeapMem {
    fn len_words(&self) -> usize {
        self.words.len()
    }
    #[inline]
    fn get(&self, i: usize) -> Option<&AtomicU64> {
        self.words.get(i)
    }
    #[inline]
    fn span(&self, i: usize, n: usize) -> Option<&[AtomicU64]> {
        self.words.get(i..i.checked_add(n)?)
    }
}

#[cfg(not(loom))]
pub use shm::ShmMem;

#[cfg(not(loom))]
mod shm {
    use std::sync::atomic::AtomicU64;

    use memmap2::MmapRaw;

    use super::{LaneMem, PlainMem};

    /// Lane memory in a shared mapping.
    pub struct ShmMem {
        map: MmapRaw,
        writable: bool,
    }

    impl ShmMem {
        /// Wraps a mapping. `writable` says whether it was mapped read-write (only the lane's
        /// producer maps it so).
        pub(crate) fn new(map: MmapRaw, writable: bool) -> ShmMem {
            ShmMem { map, writable }
        }

        /// Start of the mapping.
        pub(crate) fn base(&self) -> *mut u8 {
            self.map.as_mut_ptr()
        }
    }

    impl PlainMem for ShmMem {
        fn plain_base(&self) -> *mut u8 {
            self.base()
        }
    }

    impl LaneMem for ShmMem {
        fn len_words(&self) -> usize {
            self.map.len() / 8
        }

        fn writable(&self) -> bool {
            self.writable
        }

        #[inline]
        fn get(&self, i: usize) -> Option<&AtomicU64> {
            if i >= self.len_words() {
                return None;
            }
            // SAFETY:
            // - the mapping is page-aligned and `i < len / 8`, so `base + 8i` is an in-bounds,
            //   8-aligned address that stays mapped as long as `self` (the `MmapRaw`) lives,
            //   which the returned borrow cannot outlive;
            // - every process accesses lane words only through atomics, except a writer's
            //   plain stores into its own claim (the module docs: no reference is ever formed
            //   over lane memory, readers load atomically and validate afterwards), and any
            //   bit pattern is a valid `u64`.
            Some(unsafe { AtomicU64::from_ptr(self.base().add(i * 8).cast::<u64>()) })
        }

        #[inline]
        fn span(&self, i: usize, n: usize) -> Option<&[AtomicU64]> {
            if i.checked_add(n)? > self.len_words() {
                return None;
            }
            // SAFETY: `get`'s reasoning, for each of the `n` words: `i + n <= len / 8`, so
            // all are in bounds and 8-aligned in a mapping that outlives the borrow, and lane
            // words are accessed only as the module docs say; a slice of `AtomicU64`s is laid
            // out as `n` consecutive `AtomicU64`s, so this is the same `n` references `get`
            // makes.
            Some(unsafe {
                std::slice::from_raw_parts(self.base().add(i * 8).cast::<AtomicU64>(), n)
            })
        }

        fn copy_out(&self, byte_off: usize, dst: &mut [u8]) -> bool {
            let Some(end) = byte_off.checked_add(dst.len()) else {
                return false;
            };
            if byte_off % 8 != 0 || end > self.map.len() {
                return false;
            }
            atomic_copy_out(self.base(), byte_off, dst);
            true
        }

        #[inline]
        unsafe fn copy_into_claim(&self, byte_off: usize, src: &[u8]) -> bool {
            let padded = src.len().next_multiple_of(8);
            let Some(end) = byte_off.checked_add(padded) else {
                return false;
            };
            if byte_off % 8 != 0 || end > self.map.len() || !self.writable {
                return false;
            }
            // Whole words with one copy (inline moves for a small payload), then the last
            // part-word, zero-padded, with one store.
            let whole = src.len() / 8 * 8;
            // SAFETY:
            // - `[byte_off, end)` is in bounds (checked above) of a mapping that is writable
            //   (checked) and stays mapped while `self` lives;
            // - the caller holds the claim of these bytes: no one else writes them or holds a
            //   reference to them, and readers only load them atomically and validate
            //   afterwards (the module docs), so the slice of them made for the copy, as
            //   `claimed_payload_mut` makes one, is the only reference to them while it lives;
            // - `src` does not overlap them: the only references ever formed over lane memory
            //   are writers' `claimed_payload_mut` slices of their own claims, which are
            //   disjoint from this one, and none of this claim while it is copied into;
            // - `byte_off` and `whole` are multiples of 8 in a page-aligned mapping, so the
            //   last word's `u64` store is aligned.
            unsafe {
                let dst = self.base().add(byte_off);
                crate::stream::copy_to_lane(
                    std::slice::from_raw_parts_mut(dst, whole),
                    &src[..whole],
                    false,
                );
                if whole < src.len() {
                    let mut last = [0u8; 8];
                    last[..src.len() - whole].copy_from_slice(&src[whole..]);
                    dst.add(whole).cast::<u64>().write(u64::from_ne_bytes(last));
                }
            }
            true
        }
    }

    /// Copies `dst.len()` bytes from `base + byte_off` with relaxed atomic loads: whole words,
    /// then single bytes for the tail. Racy by design: the writer's plain stores into a claim
    /// may race with these loads (the module docs, "The seqlock caveat"), and the caller
    /// validates afterwards and discards what it copied if the frame was overwritten.
    fn atomic_copy_out(base: *mut u8, byte_off: usize, dst: &mut [u8]) {
        use std::sync::atomic::{AtomicU8, Ordering};
        let (words, tail) = dst.split_at_mut(dst.len() / 8 * 8);
        for (k, chunk) in words.chunks_exact_mut(8).enumerate() {
            // SAFETY: the caller checked `byte_off + dst.len() <= mapping length` and that
            // `byte_off` is 8-aligned, so this word is in bounds and aligned; see `get` for why
            // atomic access to lane memory is sound.
            let w = unsafe { AtomicU64::from_ptr(base.add(byte_off + 8 * k).cast::<u64>()) };
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        let tail_off = byte_off + words.len();
        for (k, b) in tail.iter_mut().enumerate() {
            // SAFETY: in bounds by the same check; a `u8` is always aligned.
            let a = unsafe { AtomicU8::from_ptr(base.add(tail_off + k)) };
            *b = a.load(Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    /// `words` and `span` hand out the very words `get` does, and nothing past the end.
    pub(crate) fn check_words<M: LaneMem>(m: &M) {
        let n = m.len_words();
        for i in 0..n {
            m.get(i).expect("in range").store(i as u64 * 3 + 1, Relaxed);
        }
        let w: &[AtomicU64; 5] = m.words(n - 5).expect("the last five words");
        for (k, a) in w.iter().enumerate() {
            assert!(std::ptr::eq(a, m.get(n - 5 + k).expect("in range")));
            assert_eq!(a.load(Relaxed), (n - 5 + k) as u64 * 3 + 1);
        }
        assert!(m.words::<5>(n - 4).is_none());
        assert!(m.words::<1>(n).is_none());
        assert!(m.words::<2>(usize::MAX).is_none());
        assert!(m.words::<0>(n).is_some());
        // `span`: the same words, any count, and nothing past the end.
        let s = m.span(n - 7, 7).expect("the last seven words");
        assert_eq!(s.len(), 7);
        for (k, a) in s.iter().enumerate() {
            assert!(std::ptr::eq(a, m.get(n - 7 + k).expect("in range")));
        }
        assert!(m.span(n - 7, 8).is_none());
        assert!(m.span(n, 1).is_none());
        assert!(m.span(1, usize::MAX).is_none());
        assert_eq!(m.span(n, 0).map(<[_]>::len), Some(0));
    }

    #[test]
    fn words_and_spans_are_the_words_get_gives_and_none_past_the_end() {
        check_words(&HeapMem::new(64));
        // Shared memory: `segment`'s tests (a segment is made of this module's memory).
    }
}

//! Doorbells: how a consumer sleeps without burning CPU and a producer wakes it without a
//! syscall unless it is actually asleep (ARCHITECTURE.md, "Lanes").
//!
//! One `u32` futex word per consumer, in shared memory (no `FUTEX_PRIVATE_FLAG`): bit 0 is
//! SLEEPING, bits 1.. count rings. Store-buffering (Dekker) protocol:
//!
//! - consumer: `fetch_or(SLEEPING)`, `fence(SeqCst)`, re-check every lane, then `futex_wait`
//!   on the value it set (with a timeout as a safety net);
//! - producer, after a commit: `fence(SeqCst)`, load the word; only if SLEEPING is set, CAS it
//!   to `(d + 2) & !SLEEPING` and `futex_wake` — at most one syscall per sleep.
//!
//! Either the producer sees SLEEPING or the consumer's re-check sees the commit, so no wakeup
//! is lost; the CAS changes the word, so a consumer that has not reached `futex_wait` yet gets
//! `EAGAIN` at once. A dead consumer's stale SLEEPING bit costs at most one wake.
//!
//! **Asymmetric fences.** A `fence(SeqCst)` after every record made the producer wait, record
//! after record, until its stores (to lines the consumer on the other CPU was reading) reached
//! the cache: it capped a stream of small records well below what the lane sustains. So a
//! producer that could register for Linux's `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`
//! replaces its fence with a compiler fence, and a consumer about to sleep issues that
//! membarrier after setting SLEEPING and before its re-check: the kernel makes every running
//! thread of every registered process execute a full fence before the call returns. If the
//! producer loaded the bell before that point, its commit (still in its store buffer) is
//! flushed by it, so the consumer's re-check sees the record; if after, it sees SLEEPING. The
//! expensive half runs once per sleep instead of once per record. A consumer whose membarrier
//! fails (a kernel without it, where producers cannot register either, or a seccomp filter)
//! caps its sleeps at [`UNFENCED_SLEEP_CAP`], so a missed ring costs at most that. Under loom
//! both sides use the fences (the models check the protocol with them).

use std::time::Duration;

use crate::sync::{AtomicU32, Ordering, fence};

/// The longest sleep of a consumer whose membarrier failed (see the module docs).
pub const UNFENCED_SLEEP_CAP: Duration = Duration::from_millis(1);

/// The producer's side of the store-load ordering: a full fence, or only a compiler fence when
/// this process is registered for consumers' membarriers.
#[inline]
fn producer_fence() {
    if barrier::producer_registered() {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

#[cfg(not(loom))]
mod barrier {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};

    use rustix::thread::{MembarrierCommand, membarrier};

    static REGISTERED: OnceLock<bool> = OnceLock::new();
    /// A membarrier of this (consumer) process failed: its sleeps are capped.
    static HEAVY_FAILED: AtomicBool = AtomicBool::new(false);

    /// Whether this process is registered for global expedited membarriers (registers on
    /// first use; once per process).
    pub(super) fn producer_registered() -> bool {
        *REGISTERED.get_or_init(|| membarrier(MembarrierCommand::RegisterGlobalExpedited).is_ok())
    }

    /// Makes every running thread of every registered process execute a full memory fence.
    pub(super) fn heavy() {
        if membarrier(MembarrierCommand::GlobalExpedited).is_err() {
            HEAVY_FAILED.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a membarrier of this process failed.
    pub(super) fn heavy_failed() -> bool {
        HEAVY_FAILED.load(Ordering::Relaxed)
    }
}

#[cfg(loom)]
mod barrier {
    pub(super) fn producer_registered() -> bool {
        false
    }
    pub(super) fn heavy() {}
    pub(super) fn heavy_failed() -> bool {
        false
    }
}

/// Registers this process as a producer for the consumers' membarriers now (it happens on the
/// first ring otherwise), so the registration's cost stays out of the first record. Returns
/// whether rings skip the full fence.
pub fn register_producer() -> bool {
    barrier::producer_registered()
}

/// Bit 0 of a doorbell: the consumer is (about to be) asleep.
pub const SLEEPING: u32 = 1;

/// A doorbell word (in shared memory, or on the heap for tests and models).
pub struct Doorbell<'a> {
    word: &'a AtomicU32,
}

impl<'a> Doorbell<'a> {
    /// A doorbell over `word`.
    pub fn new(word: &'a AtomicU32) -> Doorbell<'a> {
        Doorbell { word }
    }

    /// Consumer: announce the intent to sleep. Re-check for data after this, then call
    /// [`Doorbell::sleep`] with the returned value, or [`Doorbell::cancel`] if data arrived.
    pub fn prepare_sleep(&self) -> u32 {
        let d = self.word.fetch_or(SLEEPING, Ordering::SeqCst) | SLEEPING;
        fence(Ordering::SeqCst);
        // The producers' half of the fence (see the module docs).
        barrier::heavy();
        d
    }

    /// Consumer: data arrived after all; stay awake.
    pub fn cancel(&self) {
        self.word.fetch_and(!SLEEPING, Ordering::Relaxed);
    }

    /// Consumer: sleep until rung or `timeout` (returns at once if the word is no longer
    /// `expected`). Clears SLEEPING before returning.
    pub fn sleep(&self, expected: u32, timeout: Duration) {
        let timeout = if barrier::heavy_failed() {
            timeout.min(UNFENCED_SLEEP_CAP)
        } else {
            timeout
        };
        futex::wait(self.word, expected, timeout);
        self.word.fetch_and(!SLEEPING, Ordering::Relaxed);
    }

    /// Producer, after committing: wake the consumer if it sleeps. Returns whether a wake
    /// syscall was made.
    pub fn ring(&self) -> bool {
        producer_fence();
        self.ring_fenced()
    }

    /// [`Doorbell::ring`] without the fence, for a caller that fenced after its commit already
    /// (one fence for several bells).
    fn ring_fenced(&self) -> bool {
        let d = self.word.load(Ordering::Relaxed);
        if d & SLEEPING != 0
            && self
                .word
                .compare_exchange(
                    d,
                    d.wrapping_add(2) & !SLEEPING,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            futex::wake(self.word);
            return true;
        }
        false
    }

    /// Consumer idle strategy: spin `spins` times, then announce, re-check and sleep up to
    /// `timeout`. `ready` is the "is there data" check. Returns when `ready()` may be true.
    pub fn wait_until(&self, mut ready: impl FnMut() -> bool, spins: u32, timeout: Duration) {
        for _ in 0..spins {
            if ready() {
                return;
            }
            std::hint::spin_loop();
        }
        let d = self.prepare_sleep();
        if ready() {
            self.cancel();
            return;
        }
        self.sleep(d, timeout);
    }
}

/// Doorbells per [`DoorbellPage`].
pub const BELLS_PER_PAGE: usize = 32;

/// Why a doorbell page could not be made or mapped.
#[cfg(not(loom))]
pub use crate::segment::SegmentError;

/// A page of [`BELLS_PER_PAGE`] doorbells, 128 bytes apart (no false sharing), in a sealed
/// memfd that producers and consumers both map read-write. Consumer `i` sleeps on bell `i`;
/// a producer rings the bells of its lane's subscribers.
#[cfg(not(loom))]
pub struct DoorbellPage {
    seg: crate::segment::Segment,
}

#[cfg(not(loom))]
impl DoorbellPage {
    /// Creates a zeroed page.
    pub fn create(name: &str) -> Result<DoorbellPage, SegmentError> {
        Ok(DoorbellPage {
            seg: crate::segment::Segment::create(name, crate::segment::page_size())?,
        })
    }

    /// Maps a page another process created (read-write).
    pub fn open(fd: std::os::fd::OwnedFd) -> Result<DoorbellPage, SegmentError> {
        Ok(DoorbellPage {
            seg: crate::segment::Segment::open_rw(fd)?,
        })
    }

    /// The page's fd.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.seg.fd()
    }

    /// Bell `i` (`None` if `i >= BELLS_PER_PAGE`).
    pub fn bell(&self, i: usize) -> Option<Doorbell<'_>> {
        if i >= BELLS_PER_PAGE {
            return None;
        }
        // SAFETY:
        // - the page is a mapping of at least one page (4 KiB) and `i * 128 + 4 <= 4096`, so
        //   the word is in bounds; mappings are page-aligned, so it is 4-aligned;
        // - the mapping lives as long as `self.seg`, which the returned borrow cannot outlive;
        // - every process accesses doorbell words only through atomics, and any bit pattern
        //   is a valid `u32`.
        let word = unsafe {
            crate::sync::AtomicU32::from_ptr(self.seg.mem.base().add(i * 128).cast::<u32>())
        };
        Some(Doorbell::new(word))
    }

    /// Rings every bell whose bit is set in `mask`.
    pub fn ring_mask(&self, mask: u64) {
        if mask == 0 {
            return;
        }
        // One fence orders the caller's commit before every sleeper check below.
        producer_fence();
        let mut m = mask;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(bell) = self.bell(i) {
                bell.ring_fenced();
            }
        }
    }
}

/// Under loom there is no shared memory; the type exists so the writer compiles.
#[cfg(loom)]
pub struct DoorbellPage;

#[cfg(loom)]
impl DoorbellPage {
    /// No-op under loom.
    pub fn ring_mask(&self, _mask: u64) {}
}

#[cfg(not(loom))]
mod futex {
    use std::time::Duration;

    use rustix::thread::futex;

    use crate::sync::AtomicU32;

    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // EAGAIN (value changed), EINTR and ETIMEDOUT all just mean "go and look".
        let _ = futex::wait(word, futex::Flags::empty(), expected, Some(&ts));
    }

    pub(super) fn wake(word: &AtomicU32) {
        let _ = futex::wake(word, futex::Flags::empty(), 1);
    }
}

#[cfg(loom)]
mod futex {
    //! A futex model for loom: the kernel's futex checks the value and enqueues atomically
    //! under its bucket lock; a mutex and condvar give the same guarantee.
    use std::time::Duration;

    use loom::sync::{Condvar, Mutex};

    use crate::sync::{AtomicU32, Ordering};

    loom::lazy_static! {
        static ref BUCKET: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
    }

    pub(super) fn wait(word: &AtomicU32, expected: u32, _timeout: Duration) {
        let (m, cv) = &*BUCKET;
        let Ok(guard) = m.lock() else { return };
        if word.load(Ordering::SeqCst) != expected {
            return;
        }
        // No timeout in the model: a lost wakeup shows up as a deadlock.
        let _ = cv.wait(guard);
    }

    pub(super) fn wake(_word: &AtomicU32) {
        let (m, cv) = &*BUCKET;
        let _guard = m.lock();
        cv.notify_all();
    }
}

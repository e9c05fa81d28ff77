//! The atomics the lane protocol uses: `std`'s normally, loom's under `--cfg loom`, so the loom
//! models in `tests/loom.rs` check the same code that runs in production.
//!
//! [`ClaimLock`] guards a shared writer's claim arithmetic: a spin lock in production (its
//! release is a plain store, where `std`'s mutex releases with an atomic swap: on x86 a locked
//! instruction, which waits for every store before it — the previous record's lines, which the
//! consumer on the other CPU is reading — to reach the cache), loom's mutex under loom.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(loom)]
pub(crate) use loom_lock::ClaimLock;
#[cfg(not(loom))]
pub(crate) use spin_lock::ClaimLock;

#[cfg(loom)]
mod loom_lock {
    /// Under loom: a mutex (the models check the protocol around the lock, not the lock).
    #[derive(Debug, Default)]
    pub(crate) struct ClaimLock<T>(loom::sync::Mutex<T>);

    impl<T> ClaimLock<T> {
        pub(crate) fn new(v: T) -> ClaimLock<T> {
            ClaimLock(loom::sync::Mutex::new(v))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }
}

#[cfg(not(loom))]
mod spin_lock {
    use std::cell::UnsafeCell;
    use std::ops::{Deref, DerefMut};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A process-local spin lock for a few instructions of arithmetic. Never in shared memory,
    /// so a crash cannot leave it held for another process.
    #[derive(Debug, Default)]
    pub(crate) struct ClaimLock<T> {
        /// `true` while held. Acquired with a `compare_exchange` (Acquire), released with a
        /// store (Release); both by the threads of this process only.
        locked: AtomicBool,
        value: UnsafeCell<T>,
    }

    // SAFETY: the value is only reached through a `ClaimGuard`, and at most one guard exists
    // at a time (the `locked` flag), so sharing the lock shares `T` between threads one at a
    // time, which `T: Send` allows.
    unsafe impl<T: Send> Sync for ClaimLock<T> {}

    /// Holds a [`ClaimLock`]; releases it on drop.
    pub(crate) struct ClaimGuard<'a, T> {
        lock: &'a ClaimLock<T>,
    }

    impl<T> ClaimLock<T> {
        pub(crate) fn new(v: T) -> ClaimLock<T> {
            ClaimLock {
                locked: AtomicBool::new(false),
                value: UnsafeCell::new(v),
            }
        }

        /// Takes the lock, spinning (then yielding the CPU) while another thread holds it.
        #[inline]
        pub(crate) fn lock(&self) -> ClaimGuard<'_, T> {
            let mut spins = 0u32;
            while self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                // Wait for the holder without hammering its line with read-modify-writes.
                while self.locked.load(Ordering::Relaxed) {
                    spins += 1;
                    if spins < 64 {
                        std::hint::spin_loop();
                    } else {
                        // The holder may have been preempted: let it run.
                        std::thread::yield_now();
                    }
                }
            }
            ClaimGuard { lock: self }
        }
    }

    impl<T> Deref for ClaimGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: this guard holds the lock (acquired with Acquire, which orders this
            // access after the previous holder's Release), so no other reference to the
            // value exists until it is dropped.
            unsafe { &*self.lock.value.get() }
        }
    }

    impl<T> DerefMut for ClaimGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: as in `deref`, and `&mut self` makes this the only reference made
            // through the guard.
            unsafe { &mut *self.lock.value.get() }
        }
    }

    impl<T> Drop for ClaimGuard<'_, T> {
        #[inline]
        fn drop(&mut self) {
            self.lock.locked.store(false, Ordering::Release);
        }
    }
}

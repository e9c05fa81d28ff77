//! Fork detection for the emit hot path: a process-wide **fork generation** that an at-fork
//! child handler bumps, so code that owns per-process resources (a lane, a broker connection)
//! notices it runs in a `fork()`ed child with one relaxed load and a compare, instead of a
//! `getpid()` system call per emit.
//!
//! The generation is 0 in a process that was not forked after [`install`] ran, and strictly
//! greater in every forked descendant than in any of its ancestors (the child's copy of the
//! counter is incremented), so a value recorded when a resource was created differs from the
//! current one exactly when the resource belongs to an ancestor process. (Python's
//! `multiprocessing` forks workers this way; `fork` + `exec` replaces the whole image and needs
//! none of this.)

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

static GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

/// The child side of `pthread_atfork`: runs in the new process, single-threaded, before
/// `fork()` returns there. Only an atomic increment (async-signal-safe).
extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Installs the at-fork handler (once per process; later calls do nothing). Call it before
/// recording a generation a resource is tied to.
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: `pthread_atfork` only records the handler pointers; `in_child` is a plain
        // `extern "C"` function with no arguments that lives for the whole program and only
        // increments an atomic, which is async-signal-safe as POSIX requires of a handler that
        // runs in the child of a multi-threaded process. The null prepare/parent handlers are
        // allowed by POSIX.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            // ENOMEM only; without the handler a forked child would write its parent's lane,
            // so say it (once). Nothing better can be done here.
            crate::say!("snapbus: pthread_atfork failed ({rc}); fork detection is off");
        }
    });
}

/// The fork generation of this process (see the module docs). One relaxed load.
#[inline]
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

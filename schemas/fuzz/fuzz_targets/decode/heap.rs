//! Heap accounting: a counting global allocator, and the budgets one decode must stay within.

use super::*;

/// Wraps the system allocator and tracks live bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Live bytes above which the current measured region aborts at once (see [`measure`]).
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

fn grew(n: usize) {
    let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(live, Ordering::Relaxed);
    if live > LIMIT.load(Ordering::Relaxed) {
        over_budget(live);
    }
}

/// Stops the process the moment a measured decode exceeds its heap budget: an exponential
/// blow-up would otherwise only show up as a slow timeout or an out-of-memory. Aborting (not
/// panicking: we are inside the allocator) makes libFuzzer save the input as a crash.
#[cold]
fn over_budget(live: usize) -> ! {
    use std::io::Write as _;
    let budget = BUDGET.load(Ordering::Relaxed);
    let grown = live - LIMIT.load(Ordering::Relaxed).saturating_sub(budget);
    LIMIT.store(usize::MAX, Ordering::Relaxed);
    let _ = writeln!(
        std::io::stderr(),
        "snapbus-fuzz: heap budget exceeded: a decode grew the heap by {grown} bytes, budget {budget}"
    );
    std::process::abort();
}

/// The budget of the current measured region, for the message above.
static BUDGET: AtomicUsize = AtomicUsize::new(0);

fn shrank(n: usize) {
    LIVE.fetch_sub(n, Ordering::Relaxed);
}

// SAFETY: forwards every call to `System` unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Count the new block before releasing the old one: a copying realloc holds both.
            grew(new_size);
            shrank(layout.size());
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result with the peak heap growth (bytes) while it ran. The result
/// is still alive at the end, so what it holds counts too. Growing more than `budget` bytes
/// aborts the process immediately (with a message), before a blow-up can exhaust memory.
pub(crate) fn measure<R>(budget: usize, f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    BUDGET.store(budget, Ordering::Relaxed);
    LIMIT.store(base.saturating_add(budget), Ordering::Relaxed);
    let r = f();
    LIMIT.store(usize::MAX, Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed);
    (r, peak.saturating_sub(base))
}

/// What decoding `payload_len` bytes with a descriptor of `desc_len` canonical bytes and nesting
/// `depth` may hold at its peak: one `Value` plus one struct entry per input byte and nesting
/// level (a one-byte `bool` wrapped in `depth` single-field structs), a bounded amount per
/// descriptor byte (field paths in errors), and a constant (1 MiB: the decoder allows a few
/// thousand values beyond the per-byte ones). Anything beyond is a value built
/// from nothing, e.g. elements of zero encoded size counted as one byte while they decode to a
/// large value.
pub(crate) fn payload_budget(payload_len: usize, desc_len: usize, depth: usize) -> usize {
    let per_level = size_of::<Value<'_>>() + size_of::<(Cow<'_, str>, Value<'_>)>();
    per_level * depth.max(1) * payload_len + 512 * desc_len + (1 << 20)
}

/// What `from_canonical_bytes` of `len` bytes may hold at its peak (the tree, names, the
/// validation paths and the canonical re-encoding for the fingerprint).
pub(crate) fn descriptor_budget(len: usize) -> usize {
    512 * len + (1 << 20)
}

//! `CLOCK_REALTIME` in nanoseconds, cheaply: every record is stamped, and reading the TSC costs
//! less than a `clock_gettime` call.
//!
//! On x86-64 with an invariant TSC (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`), each
//! thread extrapolates from its own anchor `(tsc, realtime)` with a rate it measured itself, and
//! re-anchors with a real `clock_gettime` every [`REANCHOR_NANOS`] (so NTP adjustments, and
//! migration between cores whose TSCs differ, are followed within that time). Until a thread
//! has measured its rate (its first millisecond) it uses `clock_gettime`. Anywhere else, it is
//! always `clock_gettime`. Values may step by a few nanoseconds at a re-anchor; lane writers
//! keep their timestamps non-decreasing.

use std::cell::Cell;
use std::sync::OnceLock;

/// How long a thread extrapolates before re-anchoring.
pub const REANCHOR_NANOS: u64 = 10_000_000;
/// The shortest interval a rate is measured over.
const MIN_RATE_NANOS: u64 = 1_000_000;

/// `clock_gettime(CLOCK_REALTIME)` in nanoseconds.
pub fn realtime_nanos_syscall() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[derive(Clone, Copy, Default)]
struct Anchor {
    tsc: u64,
    real: u64,
    /// Nanoseconds per tick, as a 32.32 fixed-point number; 0 until measured.
    rate: u64,
    /// Ticks after `tsc` at which to re-anchor.
    reanchor_ticks: u64,
}

thread_local! {
    static ANCHOR: Cell<Anchor> = const {
        Cell::new(Anchor { tsc: 0, real: 0, rate: 0, reanchor_ticks: 0 })
    };
}

fn tsc_usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        cfg!(target_arch = "x86_64")
            && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
                info.lines()
                    .find(|l| l.starts_with("flags"))
                    .is_some_and(|flags| {
                        let has = |f: &str| flags.split_whitespace().any(|w| w == f);
                        has("constant_tsc") && has("nonstop_tsc")
                    })
            })
    })
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` exists on every x86-64 CPU and only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    0
}

/// CLOCK_REALTIME in nanoseconds (see the module docs for how).
#[inline]
pub fn now_realtime_nanos() -> u64 {
    if !tsc_usable() {
        return realtime_nanos_syscall();
    }
    let tsc = rdtsc();
    ANCHOR.with(|cell| {
        let a = cell.get();
        let ticks = tsc.wrapping_sub(a.tsc);
        if a.rate != 0 && ticks < a.reanchor_ticks {
            return a.real + ((u128::from(ticks) * u128::from(a.rate)) >> 32) as u64;
        }
        reanchor(cell, a, tsc)
    })
}

#[cold]
fn reanchor(cell: &Cell<Anchor>, a: Anchor, tsc: u64) -> u64 {
    let real = realtime_nanos_syscall();
    let elapsed = real.wrapping_sub(a.real);
    let ticks = tsc.wrapping_sub(a.tsc);
    if a.real == 0 || ticks == 0 || elapsed > 60_000_000_000 || ticks > u64::MAX / 2 {
        // First call, a clock step, or a TSC that went backwards (another core): start over.
        cell.set(Anchor {
            tsc,
            real,
            rate: 0,
            reanchor_ticks: 0,
        });
        return real;
    }
    if elapsed < MIN_RATE_NANOS && a.rate == 0 {
        // Not long enough to measure the rate yet: keep the first anchor.
        return real;
    }
    let rate = ((u128::from(elapsed) << 32) / u128::from(ticks)).min(u128::from(u64::MAX)) as u64;
    let reanchor_ticks = if rate == 0 {
        0
    } else {
        ((u128::from(REANCHOR_NANOS) << 32) / u128::from(rate)).min(u128::from(u64::MAX / 2)) as u64
    };
    cell.set(Anchor {
        tsc,
        real,
        rate,
        reanchor_ticks,
    });
    real
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tsc_clock_tracks_clock_gettime() {
        // Let the thread measure its rate, then compare over a few re-anchor periods.
        let t0 = std::time::Instant::now();
        let mut worst = 0u64;
        while t0.elapsed() < std::time::Duration::from_millis(50) {
            let a = realtime_nanos_syscall();
            let b = now_realtime_nanos();
            let c = realtime_nanos_syscall();
            if t0.elapsed() > std::time::Duration::from_millis(5) {
                // b was read between a and c; allow 50 µs of extrapolation error.
                let err = a.saturating_sub(b).max(b.saturating_sub(c));
                worst = worst.max(err);
            }
        }
        assert!(worst < 50_000, "TSC clock off by {worst} ns");
    }
}

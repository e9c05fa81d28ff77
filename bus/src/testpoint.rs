//! Test-only crash points (feature `testpoints`), LTTng-style: a multi-process test sets
//! `SNAPBUS_CRASH_AT=<point>[:<n>]` in a producer's environment and the producer kills itself
//! with SIGKILL the `n`-th time (default 1st) it reaches that point. Without the feature every
//! call compiles to nothing.
//!
//! Points in the writer: `after_intent` (tail intent published, header not written),
//! `after_busy` (header and BUSY written, payload not), `mid_payload` (half the payload
//! written), `before_commit` (payload written, commit word not), `after_commit`.

/// Marks a crash point.
#[inline(always)]
pub(crate) fn hit(point: &'static str) {
    #[cfg(feature = "testpoints")]
    imp::hit(point);
    #[cfg(not(feature = "testpoints"))]
    let _ = point;
}

#[cfg(feature = "testpoints")]
mod imp {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);

    pub(super) fn hit(point: &'static str) {
        let target = TARGET.get_or_init(|| {
            let v = std::env::var("SNAPBUS_CRASH_AT").ok()?;
            let (name, n) = match v.split_once(':') {
                Some((name, n)) => (name.to_owned(), n.parse().unwrap_or(1)),
                None => (v, 1),
            };
            Some((name, n))
        });
        if let Some((name, n)) = target {
            if name == point && HITS.fetch_add(1, Ordering::Relaxed) + 1 == *n {
                let _ = rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::KILL,
                );
            }
        }
    }
}

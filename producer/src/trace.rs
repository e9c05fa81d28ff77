//! The trace context of spans ([`Telemetry::span`](crate::Telemetry::span),
//! [`Telemetry::time_it`](crate::Telemetry::time_it), Python's `span()`): which span is open on
//! this thread, so that a span started inside another names it as its parent, and the trace
//! both belong to.
//!
//! It costs nothing while nobody listens: a span whose level is off (or before a bus was
//! found) gets no id and leaves the context alone. An enabled span takes one atomic increment
//! (its id, unique in the process), two thread-local accesses, and three integers more in the
//! one record it emits when it ends (`snapbus.duration` v2): no record at its start, so no
//! consumer has to hold open spans, and a span costs what a duration sample did.
//!
//! Trace ids: a root span (none open on its thread) starts a trace whose id is a per-process
//! nonce (high 64 bits: a hash of the pid and the time the process first made a trace, made
//! again in a forked child) and the root's span id (low 64 bits). Spans nest per thread; a
//! span ended out of order leaves the context as it found it (the innermost open span stays).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// A span's identity in its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanContext {
    /// The trace (never 0).
    pub trace_id: u128,
    /// The span, unique in its process (never 0).
    pub span_id: u64,
}

thread_local! {
    static CURRENT: Cell<Option<SpanContext>> = const { Cell::new(None) };
}

/// Span ids of this process (a forked child goes on from its parent's count, under a trace
/// nonce of its own).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The nonce of this process's traces, and `fork::generation() + 1` of the process that made
/// it (0: none yet).
static NONCE: AtomicU64 = AtomicU64::new(0);
static NONCE_GEN: AtomicU64 = AtomicU64::new(0);

/// The innermost span open on this thread, if any.
pub fn current_span() -> Option<SpanContext> {
    CURRENT.with(Cell::get)
}

/// A span entered on this thread: its context and its parent's (restored when it exits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entered {
    /// The span.
    pub context: SpanContext,
    /// The span that was open on this thread when it started (its parent), if any.
    pub parent: Option<SpanContext>,
}

impl Entered {
    /// The parent's span id, 0 for a root span (as `snapbus.duration` records it).
    pub fn parent_id(&self) -> u64 {
        self.parent.map_or(0, |p| p.span_id)
    }
}

/// Starts a span on this thread: a new id, the trace of the open span (or a new trace), and
/// makes it the open span. Pair it with [`exit`] on the same thread.
pub fn enter() -> Entered {
    let span_id = NEXT_ID.fetch_add(1, Ordering::Relaxed).max(1);
    let parent = current_span();
    let trace_id = match parent {
        Some(p) => p.trace_id,
        None => (u128::from(nonce()) << 64) | u128::from(span_id),
    };
    let context = SpanContext { trace_id, span_id };
    CURRENT.with(|c| c.set(Some(context)));
    Entered { context, parent }
}

/// Ends `span` on this thread: its parent is the open span again, if `span` was the open one
/// (a span ended out of order changes nothing).
pub fn exit(span: &Entered) {
    CURRENT.with(|c| {
        if c.get() == Some(span.context) {
            c.set(span.parent);
        }
    });
}

/// This process's trace nonce (never 0).
fn nonce() -> u64 {
    let generation = snapbus_bus::fork::generation() + 1;
    if NONCE_GEN.load(Ordering::Acquire) == generation {
        return NONCE.load(Ordering::Relaxed);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = splitmix64(splitmix64(now) ^ u64::from(std::process::id())).max(1);
    NONCE.store(n, Ordering::Relaxed);
    NONCE_GEN.store(generation, Ordering::Release);
    n
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_nest_per_thread_and_share_their_roots_trace() {
        assert_eq!(current_span(), None);
        let root = enter();
        assert_eq!(root.parent, None);
        let child = enter();
        assert_eq!(child.parent, Some(root.context));
        assert_eq!(child.context.trace_id, root.context.trace_id);
        assert_ne!(child.context.span_id, root.context.span_id);
        let other = std::thread::spawn(|| {
            let e = enter();
            exit(&e);
            e
        })
        .join()
        .expect("thread");
        assert_eq!(other.parent, None, "another thread has its own context");
        assert_ne!(other.context.trace_id, root.context.trace_id);
        exit(&child);
        assert_eq!(current_span(), Some(root.context));
        exit(&root);
        assert_eq!(current_span(), None);
        let next = enter();
        assert_ne!(next.context.trace_id, root.context.trace_id, "a new trace");
        exit(&next);
    }
}

//! Built-in schemas the bus itself emits: duration samples, process resource samples, and
//! spans (start / end / event, with attributes, in the style of one_logger and OpenTelemetry).

use std::collections::BTreeMap;

use snapbus_schemas_derive::{Snapshot, Wire};

use crate::schema::SchemaDescriptor;
use crate::snapshot::Snapshot as _;

/// One measured duration: a `time_it` block or a `span` guard, emitted once, when it ends
/// (its start is the record's time minus the duration). Since version 2 it names the span in
/// its trace, so that exporters rebuild the tree (OTLP spans with parent links); a version-1
/// record decodes with zero ids (a duration without identity).
#[derive(Snapshot, Debug, Clone, PartialEq, Default)]
#[snapshot(id = "snapbus.duration", version = 2)]
pub struct DurationSample {
    /// What was timed (`"env.step"`).
    pub label: String,
    /// How long it took, in nanoseconds.
    pub duration_nanos: u64,
    /// The trace the span belongs to (that of its root span); 0: none.
    #[snapshot(since = 2)]
    pub trace_id: u128,
    /// The span's id, unique in its process (never 0 in a trace).
    #[snapshot(since = 2)]
    pub span_id: u64,
    /// The enclosing span's id; 0 for a root span.
    #[snapshot(since = 2)]
    pub parent_id: u64,
}

/// A sample of the emitting process's resource use (from `/proc/self` on Linux).
#[derive(Snapshot, Debug, Clone, PartialEq, Eq)]
#[snapshot(id = "snapbus.resource", version = 1)]
pub struct ResourceSample {
    /// Resident set size in bytes.
    pub rss_bytes: u64,
    /// CPU time in user mode since the process started, in nanoseconds.
    pub cpu_user_nanos: u64,
    /// CPU time in kernel mode since the process started, in nanoseconds.
    pub cpu_sys_nanos: u64,
    /// Minor page faults since the process started.
    pub minor_faults: u64,
    /// Major page faults since the process started.
    pub major_faults: u64,
    /// Number of threads.
    pub threads: u32,
}

/// The value of a span or event attribute.
#[derive(Wire, Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A flag.
    Bool(bool),
    /// A signed integer.
    I64(i64),
    /// An unsigned integer.
    U64(u64),
    /// A float.
    F64(f64),
    /// A string.
    Str(String),
}

/// Attributes of a span or event, by key.
pub type Attributes = BTreeMap<String, AttrValue>;

/// A span began (`"episode"`, `"checkpoint.save"`).
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "snapbus.span.start", version = 1)]
pub struct SpanStart {
    /// Process-unique span id.
    pub span_id: u64,
    /// The enclosing span, if any.
    pub parent_id: Option<u64>,
    /// Span name.
    pub name: String,
    /// Attributes known at the start.
    pub attributes: Attributes,
}

/// A span ended.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "snapbus.span.end", version = 1)]
pub struct SpanEnd {
    /// The id from [`SpanStart::span_id`].
    pub span_id: u64,
    /// Time since the start, in nanoseconds.
    pub duration_nanos: u64,
    /// Attributes known at the end (a status, a result).
    pub attributes: Attributes,
}

/// A point event, inside a span or not.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "snapbus.span.event", version = 1)]
pub struct SpanEvent {
    /// The span the event happened in, if any.
    pub span_id: Option<u64>,
    /// Event name.
    pub name: String,
    /// Attributes.
    pub attributes: Attributes,
}

/// The descriptors of every built-in schema.
pub fn all() -> [&'static SchemaDescriptor; 5] {
    [
        DurationSample::descriptor(),
        ResourceSample::descriptor(),
        SpanStart::descriptor(),
        SpanEnd::descriptor(),
        SpanEvent::descriptor(),
    ]
}

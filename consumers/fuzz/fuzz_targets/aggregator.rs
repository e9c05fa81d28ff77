//! Fuzzes the aggregator's payload extraction over untrusted payloads (shared memory is
//! untrusted input: a buggy producer can write anything its descriptor does not describe).
//!
//! Input: `[u16 LE descriptor length L][L bytes][payloads…]`, each payload `[u8 length][bytes]`.
//! The L bytes are decoded as canonical descriptor bytes; when they do not decode (most
//! inputs), a built-in schema with every kind of field (nested structs, enums with data,
//! options, strings, sequences, fixed arrays, tensors, maps) is used instead, so the fuzzer
//! spends its time on payloads. Every payload is fed to two aggregators (grouped by the first
//! top-level field, per episode; ungrouped, per 3 records); then the producer ends. Checked:
//!
//! - no panic (overflow checks and debug assertions are on in this crate's profile);
//! - every summary emitted decodes with its own descriptor, and its `count` is at most the
//!   number of payloads fed.

#![no_main]

use snapbus_bus::Level;
use std::collections::BTreeMap;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use snapbus_bus::ProducerInfo;
use snapbus_consumers::Record;
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, Window};
use snapbus_consumers::{Consumer, ProducerChange};
use snapbus_schemas::{Bytes, SchemaDescriptor, Snapshot, Tensor, Value, Wire, decode};

#[derive(Wire)]
enum Kind {
    Idle,
    Move(f32, i16),
    Jump { height: f64, ok: bool },
}

#[derive(Wire)]
struct Inner {
    loss: f64,
    note: String,
    kind: Kind,
}

#[derive(Snapshot)]
#[snapshot(id = "fuzz.step", version = 1)]
struct Step {
    env: String,
    episode: u32,
    mode: Kind,
    reward: Option<f32>,
    pos: [f32; 3],
    big: [u8; 20],
    hist: Vec<f64>,
    obs: Tensor<u16>,
    inner: Inner,
    items: Vec<Inner>,
    tags: BTreeMap<String, i64>,
    raw: Bytes,
    pair: (i8, u64),
}

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (desc_bytes, mut payloads) = rest.split_at(len);
    let schema = Arc::new(
        SchemaDescriptor::from_canonical_bytes(desc_bytes)
            .unwrap_or_else(|_| Step::descriptor().clone()),
    );
    let first_field = schema.root().fields().first().map(|f| f.name.clone());
    let mut grouped = AggregatorOptions::new(Window::Episode);
    grouped.group_by = first_field.into_iter().collect();
    let ungrouped = AggregatorOptions::new(Window::Steps(3));
    let mut aggs = [grouped, ungrouped].map(|o| Aggregator::new(o, Vec::new()));
    let info = ProducerInfo {
        pid: 1,
        name: "fuzz".into(),
        cmdline: Vec::new(),
        session_tag: None,
        perf_tag: None,
        lane_id: 7,
        started_nanos: 0,
        relayed: false,
    };
    let mut fed = 0u64;
    while let Some((&n, rest)) = payloads.split_first() {
        let n = usize::from(n).min(rest.len());
        let (payload, rest) = rest.split_at(n);
        payloads = rest;
        let record = Record {
            producer_id: 1,
            producer: snapbus_consumers::Producer::from(&info),
            schema: &schema,
            emitter: None,
            header: snapbus_consumers::RecordHeader {
                seq: fed,
                t_nanos: fed * 1_000,
                schema_key: 1,
                schema_version: 1,
                level: Level::INFO,
                emitter_id: 0,
                payload_len: payload.len(),
            },
            payload,
            extracted: None,
        };
        for a in &mut aggs {
            // A hook error (a CSV problem) cannot happen here: there is no CSV.
            let _ = a.on_event(&record);
        }
        fed += 1;
    }
    for a in &mut aggs {
        let _ = a.on_producer(ProducerChange::Ended(snapbus_consumers::Producer::from(
            &info,
        )));
        for (desc, payload) in a.sink() {
            let v = decode(desc.root(), payload).expect("a summary decodes with its descriptor");
            match v.field("count") {
                Some(Value::U64(c)) => assert!(*c <= fed, "count {c} > {fed} fed"),
                other => panic!("count: {other:?}"),
            }
        }
    }
});

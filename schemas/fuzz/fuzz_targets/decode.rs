//! Fuzzes every decoder of `snapbus-schemas` that reads untrusted bytes.
//!
//! The first input byte picks a mode (`byte % 4`):
//!
//! - **A** (`0`): the next two bytes (little-endian `u16`, bounded by what remains) give the
//!   length of a descriptor, parsed with `SchemaDescriptor::from_canonical_bytes`; the rest is a
//!   payload decoded with that descriptor.
//! - **A'** (`1`): like A, but the harness supplies the descriptor header (magic, a fixed id,
//!   version 1) and the input only the root node, so the fuzzer spends its bytes on the type tree.
//! - **B** (`2`): the next byte picks one of a fixed set of descriptors (the built-ins, a rich
//!   hand-built struct covering every `TypeDesc` variant, and small single-variant ones); the
//!   rest is a payload decoded with it.
//! - **C** (`3`): the next byte picks a typed decoder (the built-in snapshots via `decode_exact`
//!   and `decode_versioned` with an arbitrary writer version taken from the input, and
//!   `Tensor<_>` of several dtypes via `decode_exact`).
//!
//! Properties checked (any violation panics, which libFuzzer reports as a crash):
//!
//! - no decoder panics, and error offsets stay inside the input;
//! - a successful dynamic `decode` re-encodes with `encode_value` to exactly the input, and
//!   `Value::to_json` / `into_owned` work on the result;
//! - a successful `from_canonical_bytes` re-encodes with `to_canonical_bytes` to exactly the
//!   input, decodes again to an equal descriptor with the same fingerprint, validates, displays,
//!   renders a JSON Schema and registers;
//! - a successful typed `decode_exact` re-encodes with `Wire::encode_to_vec` to exactly the
//!   input and agrees with the dynamic decoder (`to_value`); `decode_versioned` agrees with
//!   `decode_exact` for the schema's own version, fails for version 0 and reads a prefix for
//!   newer versions;
//! - the peak heap growth of one decode stays within a budget linear in the input size (a
//!   counting global allocator measures it), so a length prefix cannot make the decoder
//!   allocate more than the input justifies. Run with `-malloc_limit_mb` / `-rss_limit_mb` as
//!   well, to catch a single huge allocation or a leak.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use snapbus_schemas::builtin::{DurationSample, ResourceSample, SpanEnd, SpanEvent, SpanStart};
use snapbus_schemas::{
    DESCRIPTOR_MAGIC, DType, DecodeErrorKind, Field, SchemaDescriptor, SchemaRegistry, Snapshot,
    Tensor, ToValue, TypeDesc, Value, Variant, Wire, check_compatible, decode, decode_from,
    decode_versioned, encode_value,
};

// ---------------------------------------------------------------------------------------------
// Heap accounting.

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
fn measure<R>(budget: usize, f: impl FnOnce() -> R) -> (R, usize) {
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
fn payload_budget(payload_len: usize, desc_len: usize, depth: usize) -> usize {
    let per_level = size_of::<Value<'_>>() + size_of::<(Cow<'_, str>, Value<'_>)>();
    per_level * depth.max(1) * payload_len + 512 * desc_len + (1 << 20)
}

/// What `from_canonical_bytes` of `len` bytes may hold at its peak (the tree, names, the
/// validation paths and the canonical re-encoding for the fingerprint).
fn descriptor_budget(len: usize) -> usize {
    512 * len + (1 << 20)
}

// ---------------------------------------------------------------------------------------------
// Fixed descriptors for mode B.

fn b(t: TypeDesc) -> Box<TypeDesc> {
    Box::new(t)
}

fn seq(t: TypeDesc) -> TypeDesc {
    TypeDesc::Seq { elem: b(t) }
}

fn opt(t: TypeDesc) -> TypeDesc {
    TypeDesc::Option { some: b(t) }
}

fn arr(len: u64, t: TypeDesc) -> TypeDesc {
    TypeDesc::Array { len, elem: b(t) }
}

fn tup(elems: Vec<TypeDesc>) -> TypeDesc {
    TypeDesc::Tuple { elems }
}

fn map(k: TypeDesc, v: TypeDesc) -> TypeDesc {
    TypeDesc::Map {
        key: b(k),
        value: b(v),
    }
}

fn st(fields: &[(&str, TypeDesc)]) -> TypeDesc {
    TypeDesc::Struct {
        fields: fields
            .iter()
            .map(|(n, t)| Field::new(*n, t.clone()))
            .collect(),
    }
}

fn tensor(dtype: DType) -> TypeDesc {
    TypeDesc::Tensor { dtype }
}

/// An enum with every variant kind, including an empty tuple variant.
fn mode_enum() -> TypeDesc {
    TypeDesc::Enum {
        variants: vec![
            Variant::unit("Train"),
            Variant::unit("Eval"),
            Variant::tuple("Custom", vec![TypeDesc::U16, TypeDesc::String]),
            Variant::tuple("Newtype", vec![TypeDesc::F64]),
            Variant::structure(
                "Scheduled",
                vec![
                    Field::new("at_step", TypeDesc::U64),
                    Field::new("lr", TypeDesc::F64),
                    Field::new("tags", seq(TypeDesc::String)),
                ],
            ),
            Variant::tuple("Empty", vec![]),
            Variant::structure("NoFields", vec![]),
            Variant::tuple(
                "Wide",
                vec![TypeDesc::U128, TypeDesc::I128, opt(TypeDesc::Bool)],
            ),
        ],
    }
}

/// A struct touching every `TypeDesc` variant, nested.
fn everything() -> TypeDesc {
    let scalars = st(&[
        ("b", TypeDesc::Bool),
        ("u8", TypeDesc::U8),
        ("u16", TypeDesc::U16),
        ("u32", TypeDesc::U32),
        ("u64", TypeDesc::U64),
        ("u128", TypeDesc::U128),
        ("i8", TypeDesc::I8),
        ("i16", TypeDesc::I16),
        ("i32", TypeDesc::I32),
        ("i64", TypeDesc::I64),
        ("i128", TypeDesc::I128),
        ("f32", TypeDesc::F32),
        ("f64", TypeDesc::F64),
    ]);
    let inner = st(&[
        ("id", TypeDesc::U16),
        ("name", TypeDesc::String),
        ("flags", seq(TypeDesc::Bool)),
    ]);
    st(&[
        ("scalars", scalars),
        ("text", TypeDesc::String),
        ("blob", TypeDesc::Bytes),
        ("maybe", opt(inner.clone())),
        ("maybe_maybe", opt(opt(TypeDesc::U128))),
        ("inners", seq(inner.clone())),
        ("floats", seq(TypeDesc::F64)),
        ("small", seq(TypeDesc::I16)),
        ("units", seq(tup(vec![]))),
        ("fixed", arr(4, TypeDesc::U16)),
        ("fixed_opt", arr(2, opt(TypeDesc::U8))),
        ("fixed_str", arr(2, TypeDesc::String)),
        ("fixed_none", arr(0, TypeDesc::Bytes)),
        ("pair", tup(vec![TypeDesc::I32, TypeDesc::F32])),
        (
            "triple",
            tup(vec![TypeDesc::I64, TypeDesc::Bool, opt(TypeDesc::Bytes)]),
        ),
        ("unit", tup(vec![])),
        ("marker", st(&[])),
        ("mode", mode_enum()),
        ("modes", seq(mode_enum())),
        ("by_name", map(TypeDesc::String, mode_enum())),
        ("by_id", map(TypeDesc::I32, seq(TypeDesc::F64))),
        (
            "by_pair",
            map(
                tup(vec![TypeDesc::U8, TypeDesc::U8]),
                opt(map(TypeDesc::String, TypeDesc::Bool)),
            ),
        ),
        ("t_u8", tensor(DType::U8)),
        ("t_u16", tensor(DType::U16)),
        ("t_u32", tensor(DType::U32)),
        ("t_u64", tensor(DType::U64)),
        ("t_i8", tensor(DType::I8)),
        ("t_i16", tensor(DType::I16)),
        ("t_i32", tensor(DType::I32)),
        ("t_i64", tensor(DType::I64)),
        ("t_f32", tensor(DType::F32)),
        ("t_f64", tensor(DType::F64)),
        ("tensors", seq(tensor(DType::F32))),
        (
            "nested",
            st(&[
                ("x", TypeDesc::F64),
                ("inner", seq(st(&[("k", TypeDesc::String)]))),
            ]),
        ),
    ])
}

/// The mode-B descriptors: validated, canonical-encoded once. Index 0..5 are the built-ins.
static FIXED: LazyLock<Vec<(TypeDesc, usize)>> = LazyLock::new(|| {
    let mut roots: Vec<TypeDesc> = vec![
        DurationSample::descriptor().root().clone(),
        ResourceSample::descriptor().root().clone(),
        SpanStart::descriptor().root().clone(),
        SpanEnd::descriptor().root().clone(),
        SpanEvent::descriptor().root().clone(),
        everything(),
        mode_enum(),
        map(TypeDesc::String, TypeDesc::U64),
        map(tup(vec![]), TypeDesc::Bool),
        opt(opt(TypeDesc::String)),
        seq(tup(vec![])),
        seq(seq(TypeDesc::U8)),
        seq(TypeDesc::Bytes),
        arr(3, TypeDesc::F32),
        arr(5, tup(vec![])),
        arr(2, seq(TypeDesc::I128)),
        tup(vec![TypeDesc::U128, TypeDesc::I128, TypeDesc::Bool]),
        TypeDesc::String,
        TypeDesc::Bytes,
        seq(TypeDesc::Bool),
        seq(TypeDesc::F32),
        seq(TypeDesc::U128),
        seq(st(&[("a", TypeDesc::U8), ("b", opt(TypeDesc::String))])),
    ];
    roots.extend(DType::ALL.map(tensor));
    roots
        .into_iter()
        .map(|root| {
            let d =
                SchemaDescriptor::new("fuzz.fixed", 1, root).expect("fixed descriptor is valid");
            let len = d.to_canonical_bytes().len();
            (d.root().clone(), len)
        })
        .collect()
});

// ---------------------------------------------------------------------------------------------
// Checks.

/// Decodes `payload` with `desc` and checks the dynamic-decode properties.
fn check_payload(desc: &TypeDesc, desc_len: usize, payload: &[u8]) {
    let budget = payload_budget(payload.len(), desc_len, desc.depth());
    let (res, peak) = measure(budget, || decode(desc, payload));
    assert!(
        peak <= budget,
        "decode of {} payload bytes (descriptor {} bytes) peaked at {peak} heap bytes, budget {budget}: {desc}",
        payload.len(),
        desc_len,
    );
    let value = match res {
        Ok(v) => v,
        Err(e) => {
            assert!(
                e.offset <= payload.len(),
                "error offset {} beyond {}: {e}",
                e.offset,
                payload.len()
            );
            let _ = e.to_string();
            return;
        }
    };

    // Round trip: re-encoding reproduces exactly the input.
    let mut out = Vec::with_capacity(payload.len());
    if let Err(e) = encode_value(desc, &value, &mut out) {
        panic!("decoded value does not re-encode: {e}\n  desc: {desc}\n  value: {value:?}");
    }
    assert!(
        out == payload,
        "re-encode differs from the input\n  desc: {desc}\n  in:  {payload:02x?}\n  out: {out:02x?}"
    );

    // decode_from reads the same value and consumes everything.
    let mut r = snapbus_schemas::WireReader::new(payload);
    let again = decode_from(desc, &mut r).expect("decode_from agrees with decode");
    assert_eq!(r.remaining(), 0);
    assert_eq!(format!("{again:?}"), format!("{value:?}"));

    // JSON and owned copies do not panic and keep the value.
    let json = value.to_json();
    let _ = json.to_string();
    let owned = value.clone().into_owned();
    assert_eq!(format!("{owned:?}"), format!("{value:?}"));
    let _ = value.as_f64();
    let _ = value.kind_name();
    let _ = value.path("a.b");
    check_numeric_views(&value);
}

/// The element accessors of packed arrays and tensors stay in bounds for any index.
fn check_numeric_views(v: &Value<'_>) {
    let check = |len: usize, get: &dyn Fn(usize) -> Option<f64>| {
        if len > 0 {
            assert!(get(len - 1).is_some(), "last element missing");
        }
        assert!(get(len).is_none(), "element past the end");
        assert!(get(usize::MAX).is_none(), "element usize::MAX");
        assert!(get(usize::MAX / 2).is_none(), "element usize::MAX / 2");
    };
    match v {
        Value::Packed(p) => {
            check(p.len(), &|i| p.get_f64(i));
            let _ = p.is_empty();
            let _ = p.to_vec::<u8>();
            let _ = p.to_vec::<f64>();
        }
        Value::Tensor(t) => {
            check(t.len(), &|i| t.get_f64(i));
            let _ = t.to_vec::<f32>();
            let _ = t.to_vec::<i16>();
        }
        Value::Option(Some(x)) => check_numeric_views(x),
        Value::Seq(items) => items.iter().for_each(check_numeric_views),
        Value::Struct(fields) => fields.iter().for_each(|(_, x)| check_numeric_views(x)),
        Value::Variant { value, .. } => check_numeric_views(value),
        Value::Map(entries) => entries.iter().for_each(|(k, x)| {
            check_numeric_views(k);
            check_numeric_views(x);
        }),
        _ => {}
    }
}

/// Parses a descriptor and checks its round-trip properties; returns it when valid.
fn check_descriptor(bytes: &[u8]) -> Option<SchemaDescriptor> {
    let budget = descriptor_budget(bytes.len());
    let (res, peak) = measure(budget, || SchemaDescriptor::from_canonical_bytes(bytes));
    assert!(
        peak <= budget,
        "from_canonical_bytes of {} bytes peaked at {peak} heap bytes, budget {budget}",
        bytes.len()
    );
    let d = match res {
        Ok(d) => d,
        Err(e) => {
            let _ = e.to_string();
            return None;
        }
    };
    let canon = d.to_canonical_bytes();
    assert!(
        canon == bytes,
        "canonical bytes differ from the input\n  in:  {bytes:02x?}\n  out: {canon:02x?}"
    );
    let again =
        SchemaDescriptor::from_canonical_bytes(&canon).expect("canonical bytes decode again");
    assert!(
        again == d,
        "re-decoded descriptor differs: {d:?} vs {again:?}"
    );
    assert_eq!(again.fingerprint(), d.fingerprint());
    d.validate().expect("a decoded descriptor validates");
    let _ = d.to_string();
    let _ = d.root().depth();
    let _ = d.root().min_encoded_len();
    let _ = d.to_json_schema().to_string();
    check_compatible(&d, &again).expect("a descriptor is compatible with itself");
    let mut reg = SchemaRegistry::new();
    reg.register(d.clone())
        .expect("a valid descriptor registers");
    reg.register(again)
        .expect("an equal descriptor registers again");
    Some(d)
}

/// Whether a decoded value holds a map whose keys are not strictly increasing (duplicates or
/// out of order), i.e. not what a `BTreeMap` would have written.
fn has_noncanonical_map(v: &Value<'_>) -> bool {
    use Value as V;
    match v {
        V::Map(entries) => {
            let keys_ok = entries.windows(2).all(|w| match (&w[0].0, &w[1].0) {
                (V::Str(a), V::Str(b)) => a < b,
                _ => false,
            });
            !keys_ok
                || entries
                    .iter()
                    .any(|(k, v)| has_noncanonical_map(k) || has_noncanonical_map(v))
        }
        V::Option(Some(x)) => has_noncanonical_map(x),
        V::Seq(items) => items.iter().any(has_noncanonical_map),
        V::Struct(fields) => fields.iter().any(|(_, x)| has_noncanonical_map(x)),
        V::Variant { value, .. } => has_noncanonical_map(value),
        _ => false,
    }
}

/// Typed decode of a built-in snapshot, cross-checked with the dynamic decoder and
/// `decode_versioned`.
fn check_snapshot<T: Snapshot + std::fmt::Debug + PartialEq>(payload: &[u8], writer_version: u32) {
    let id = T::SCHEMA_ID;
    let budget = 8 * payload_budget(payload.len(), 0, 1);
    let (res, peak) = measure(budget, || T::decode_exact(payload));
    assert!(
        peak <= budget,
        "{id}: typed decode peaked at {peak}, budget {budget}"
    );
    let desc = T::descriptor().root();
    let dynamic = decode(desc, payload);
    // Maps are unordered: a typed decode accepts keys in any order (a Python or C++ producer
    // writes them in insertion order) and a `BTreeMap` re-encodes them sorted, so inputs with
    // unsorted maps get the order-insensitive checks (no panic, typed and dynamic agree on
    // success, re-encoding is stable) instead of byte-exact ones.
    let lenient = dynamic.as_ref().is_ok_and(has_noncanonical_map);
    match &res {
        Ok(v) => {
            let bytes = v.encode_to_vec().expect("typed re-encode");
            assert_eq!(v.encoded_len(), bytes.len());
            let dv = dynamic
                .as_ref()
                .unwrap_or_else(|e| panic!("{id}: typed decode ok, dynamic failed: {e}"));
            if lenient {
                let again = T::decode_exact(&bytes).expect("re-encoding decodes");
                assert!(
                    again == *v || format!("{again:?}") == format!("{v:?}"),
                    "{id}: re-encoding is not stable"
                );
            } else {
                assert!(
                    bytes == payload,
                    "{id}: typed decode_exact succeeded but encode_to_vec differs from the input\n  in:  {payload:02x?}\n  out: {bytes:02x?}"
                );
                assert_eq!(
                    format!("{:?}", v.to_value()),
                    format!("{dv:?}"),
                    "{id}: to_value differs from decode"
                );
            }
        }
        Err(e) => {
            assert!(e.offset <= payload.len());
            // The dynamic decoder keeps a map's entries as they are on the wire, duplicates
            // included; the typed one refuses duplicate keys. Otherwise they agree.
            if e.kind != DecodeErrorKind::DuplicateMapKey {
                assert!(
                    dynamic.is_err(),
                    "{id}: typed decode failed ({e}) but dynamic decode succeeded"
                );
            }
        }
    }

    // decode_versioned: own version = decode_exact; 0 = error; newer = reads a prefix.
    let own = decode_versioned::<T>(payload, T::VERSION);
    assert_eq!(
        own.is_ok(),
        res.is_ok(),
        "{id}: decode_versioned(own version) and decode_exact disagree"
    );
    if let (Ok(a), Ok(b)) = (&own, &res) {
        assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "{id}: decode_versioned(own version) != decode_exact"
        );
    }
    assert!(decode_versioned::<T>(payload, 0).is_err());
    let (vres, peak) = measure(budget, || decode_versioned::<T>(payload, writer_version));
    assert!(
        peak <= budget,
        "{id}: decode_versioned peaked at {peak}, budget {budget}"
    );
    match vres {
        Ok(v) => {
            let bytes = v.encode_to_vec().expect("typed re-encode");
            if writer_version > T::VERSION {
                // The fields T knows were read and the rest skipped: re-encoding gives a prefix
                // of the input (when the maps in it are canonical).
                let lenient_prefix = decode_from(desc, &mut snapbus_schemas::WireReader::new(payload))
                        .is_ok_and(|v| has_noncanonical_map(&v));
                if !lenient_prefix {
                    assert!(
                        payload.starts_with(&bytes),
                        "{id}: newer-version read is not a prefix of the input"
                    );
                }
            } else if !lenient {
                assert!(bytes == payload, "{id}: versioned re-encode differs");
            }
        }
        Err(e) => {
            assert!(e.offset <= payload.len());
            if writer_version > T::VERSION {
                // A prefix read fails only if the strict read of the known prefix fails too.
                assert!(
                    res.is_err(),
                    "{id}: strict decode ok but newer-version read failed: {e}"
                );
            }
        }
    }
}

/// Typed tensor decode, cross-checked with the dynamic decoder.
fn check_tensor<T: snapbus_schemas::Element + std::fmt::Debug>(payload: &[u8]) {
    let budget = 8 * payload_budget(payload.len(), 0, 1);
    let (res, peak) = measure(budget, || Tensor::<T>::decode_exact(payload));
    assert!(
        peak <= budget,
        "Tensor<{}>: typed decode peaked at {peak}, budget {budget}",
        T::DTYPE
    );
    let desc = Tensor::<T>::type_desc();
    let dynamic = decode(&desc, payload);
    match res {
        Ok(t) => {
            let bytes = t.encode_to_vec().expect("tensor re-encode");
            assert!(bytes == payload, "Tensor<{}>: re-encode differs", T::DTYPE);
            let dv = dynamic
                .unwrap_or_else(|e| panic!("Tensor<{}>: typed ok, dynamic failed: {e}", T::DTYPE));
            assert_eq!(format!("{:?}", t.to_value()), format!("{dv:?}"));
            // Rebuilding from parts validates the same shape.
            let (shape, data) = t.into_parts();
            Tensor::new(shape, data).expect("decoded tensor has a consistent shape");
        }
        Err(e) => {
            assert!(e.offset <= payload.len());
            assert!(
                dynamic.is_err(),
                "Tensor<{}>: typed failed ({e}), dynamic ok",
                T::DTYPE
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Entry point.

/// Header of a descriptor with id `fuzz.a` and version 1, for mode A'.
fn header() -> Vec<u8> {
    let mut h = DESCRIPTOR_MAGIC.to_vec();
    h.extend_from_slice(&6u64.to_le_bytes());
    h.extend_from_slice(b"fuzz.a");
    h.extend_from_slice(&1u32.to_le_bytes());
    h
}

fn split_descriptor(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = data.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    Some(rest.split_at(len))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            let Some((desc_bytes, payload)) = split_descriptor(data) else {
                return;
            };
            if let Some(d) = check_descriptor(desc_bytes) {
                check_payload(d.root(), desc_bytes.len(), payload);
            }
        }
        1 => {
            let Some((node_bytes, payload)) = split_descriptor(data) else {
                return;
            };
            let mut desc_bytes = header();
            desc_bytes.extend_from_slice(node_bytes);
            if let Some(d) = check_descriptor(&desc_bytes) {
                check_payload(d.root(), desc_bytes.len(), payload);
            }
        }
        2 => {
            let Some((&which, payload)) = data.split_first() else {
                return;
            };
            let (desc, len) = &FIXED[usize::from(which) % FIXED.len()];
            check_payload(desc, *len, payload);
        }
        _ => {
            let Some((&which, rest)) = data.split_first() else {
                return;
            };
            let Some((version, payload)) = rest.split_first_chunk::<4>() else {
                return;
            };
            let writer_version = u32::from_le_bytes(*version);
            match which % 9 {
                0 => check_snapshot::<DurationSample>(payload, writer_version),
                1 => check_snapshot::<ResourceSample>(payload, writer_version),
                2 => check_snapshot::<SpanStart>(payload, writer_version),
                3 => check_snapshot::<SpanEnd>(payload, writer_version),
                4 => check_snapshot::<SpanEvent>(payload, writer_version),
                5 => check_tensor::<f32>(payload),
                6 => check_tensor::<u8>(payload),
                7 => check_tensor::<f64>(payload),
                _ => check_tensor::<i16>(payload),
            }
        }
    }
});

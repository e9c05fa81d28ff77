//! Encode / decode of the snapbus wire codec (`snapbus-schemas`) side by side with peer codecs
//! (bincode 2 with the legacy config, postcard, serde_json, wincode), on two payloads:
//!
//! - `event64`: a flat event whose snapbus encoding is exactly 64 bytes;
//! - `tensor1m`: a `Tensor<f32>` of shape `[512, 512]` (1 MiB of data).
//!
//! Each scenario has one criterion group per direction (`encode/event64`, `decode/event64`,
//! `encode/tensor1m`, `decode/tensor1m`) with one bench id per codec, so all codecs are
//! measured in the same run. Encoders write into a preallocated buffer (serde_json into a reused
//! `Vec`), as on the bus emit path. The setup asserts once that snapbus, bincode 2 (legacy) and
//! wincode produce identical bytes for both payloads, so the comparison is like for like.
//!
//! Run: `cargo bench -p snapbus-benches --bench codec_encode_decode`. Results: `BENCHMARKS.md`.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput, measurement::WallTime};
use snapbus_schemas::{Snapshot, Tensor, Wire};

/// Encoded size of the event in the snapbus / bincode-legacy / wincode layout.
const EVENT_LEN: usize = 64;
/// Tensor shape: 512 x 512 f32 = 1 MiB of data.
const SIDE: u64 = 512;

// ---------------------------------------------------------------------------------------------
// Payload types: snapbus-derived originals and serde / wincode mirrors.
// ---------------------------------------------------------------------------------------------

use snapbus_benches::Event;

/// A mirror type: one the serde-based codecs and wincode read and write (their derives, the
/// same for every mirror).
macro_rules! mirror {
    ($(#[$attr:meta])* struct $name:ident { $($field:tt)* }) => {
        $(#[$attr])*
        #[derive(serde::Serialize, serde::Deserialize, wincode::SchemaWrite, wincode::SchemaRead)]
        #[derive(Debug, Clone, PartialEq)]
        struct $name { $($field)* }

        impl Mirror for $name {}
    };
}

/// What the benches need of a mirror: the serde-based codecs' and wincode's traits, and
/// comparing it with its decoded copy.
trait Mirror:
    serde::Serialize
    + serde::de::DeserializeOwned
    + wincode::SchemaWrite<wincode::config::DefaultConfig, Src = Self>
    + for<'de> wincode::SchemaRead<'de, wincode::config::DefaultConfig, Dst = Self>
    + PartialEq
    + std::fmt::Debug
{
}

mirror! {
    /// The same event for the serde-based codecs and wincode.
    struct EventMirror {
        episode: u32,
        step: u32,
        t: u64,
        reward: f64,
        position: [f32; 3],
        done: bool,
        truncated: bool,
        env_id: u16,
        action: u32,
        log_prob: f32,
        value: f64,
        seed: u64,
    }
}

/// The 1 MiB tensor, as a snapbus snapshot.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "bench.tensor", version = 1)]
struct TensorSnap {
    tensor: Tensor<f32>,
}

mirror! {
    /// The tensor for the peers: byte-identical to snapbus's `Tensor` layout in bincode (legacy)
    /// and wincode (`u64` rank + dims, `u64` count + raw little-endian elements).
    struct TensorMirror {
        shape: Vec<u64>,
        data: Vec<f32>,
    }
}

fn make_event() -> (Event, EventMirror) {
    let event = Event {
        episode: 41,
        step: 1_234,
        t: 1_723_456_789_012_345_678,
        reward: 0.731_25,
        position: [1.5, -2.25, 0.125],
        done: false,
        truncated: true,
        env_id: 7,
        action: 3,
        log_prob: -1.386_294_4,
        value: 12.345_678_9,
        seed: 0xDEAD_BEEF_CAFE_F00D,
    };
    let mirror = EventMirror {
        episode: event.episode,
        step: event.step,
        t: event.t,
        reward: event.reward,
        position: event.position,
        done: event.done,
        truncated: event.truncated,
        env_id: event.env_id,
        action: event.action,
        log_prob: event.log_prob,
        value: event.value,
        seed: event.seed,
    };
    (event, mirror)
}

fn make_tensor() -> (TensorSnap, TensorMirror) {
    let n = (SIDE * SIDE) as usize;
    // Non-trivial values (not all zeros) so text codecs do realistic work.
    let data: Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).sin() * 100.0).collect();
    let shape = vec![SIDE, SIDE];
    let mirror = TensorMirror {
        shape: shape.clone(),
        data: data.clone(),
    };
    let snap = TensorSnap {
        tensor: Tensor::new(shape, data).unwrap(),
    };
    (snap, mirror)
}

// ---------------------------------------------------------------------------------------------
// Byte-identity checks (run once, before measuring).
// ---------------------------------------------------------------------------------------------

fn snapbus_bytes<T: Wire>(v: &T) -> Vec<u8> {
    let mut buf = vec![0u8; v.encoded_len()];
    let n = v.encode_into(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn bincode_bytes<T: serde::Serialize>(v: &T) -> Vec<u8> {
    bincode2::serde::encode_to_vec(v, bincode2::config::legacy()).unwrap()
}

/// Asserts snapbus == bincode2-legacy == wincode bytes and that every codec round-trips.
fn check_identity<S, M>(name: &str, snap: &S, mirror: &M) -> usize
where
    S: Wire + PartialEq + std::fmt::Debug,
    M: Mirror,
{
    let s = snapbus_bytes(snap);
    let b = bincode_bytes(mirror);
    let w = wincode::serialize(mirror).unwrap();
    assert_eq!(s, b, "{name}: snapbus bytes != bincode2-legacy bytes");
    assert_eq!(s, w, "{name}: snapbus bytes != wincode bytes");

    // Round trips, so the decode benches measure successful decodes.
    assert_eq!(&S::decode_exact(&s).unwrap(), snap);
    let (back, used): (M, usize) =
        bincode2::serde::decode_from_slice(&b, bincode2::config::legacy()).unwrap();
    assert_eq!((&back, used), (mirror, b.len()));
    assert_eq!(&wincode::deserialize::<M>(&w).unwrap(), mirror);
    let p = postcard::to_allocvec(mirror).unwrap();
    assert_eq!(&postcard::from_bytes::<M>(&p).unwrap(), mirror);
    let j = serde_json::to_vec(mirror).unwrap();
    assert_eq!(&serde_json::from_slice::<M>(&j).unwrap(), mirror);

    eprintln!(
        "{name}: snapbus = bincode2-legacy = wincode = {} bytes (identical); postcard {} bytes; \
         serde_json {} bytes",
        s.len(),
        p.len(),
        j.len()
    );
    s.len()
}

// ---------------------------------------------------------------------------------------------
// Benchmarks.
// ---------------------------------------------------------------------------------------------

fn configure(group: &mut BenchmarkGroup<'_, WallTime>, bytes: u64, large: bool) {
    group.throughput(Throughput::Bytes(bytes));
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    if large {
        // Each iteration is 10 µs .. 20 ms: flat sampling keeps serde_json's runs bounded.
        group.sample_size(30);
        group.sampling_mode(SamplingMode::Flat);
    } else {
        group.sample_size(60);
    }
}

/// Encode and decode groups for one scenario. `payload_len` is the snapbus encoded size, used
/// as the throughput of every codec so the MB/s columns compare the same logical payload.
fn bench_scenario<S, M>(c: &mut Criterion, scenario: &str, snap: &S, mirror: &M, large: bool)
where
    S: Snapshot + PartialEq + std::fmt::Debug,
    M: Mirror,
{
    let payload_len = check_identity(scenario, snap, mirror);
    if !large {
        assert_eq!(
            payload_len, EVENT_LEN,
            "event must encode to exactly 64 bytes"
        );
    }

    // Encoded inputs for the decoders, and output buffers for the encoders (preallocated once).
    let snap_enc = snapbus_bytes(snap);
    let bincode_enc = bincode_bytes(mirror);
    let postcard_enc = postcard::to_allocvec(mirror).unwrap();
    let json_enc = serde_json::to_vec(mirror).unwrap();
    let wincode_enc = wincode::serialize(mirror).unwrap();
    let mut buf = vec![0u8; payload_len.max(postcard_enc.len()) + 64];
    let mut json_buf: Vec<u8> = Vec::with_capacity(json_enc.len() * 2);

    // ---- encode -----------------------------------------------------------------------------
    let mut g = c.benchmark_group(format!("encode/{scenario}"));
    configure(&mut g, payload_len as u64, large);
    g.bench_function("snapbus", |b| {
        b.iter(|| {
            black_box(snap)
                .encode_into(black_box(&mut buf[..]))
                .unwrap()
        })
    });
    g.bench_function("bincode2-legacy", |b| {
        b.iter(|| {
            bincode2::serde::encode_into_slice(
                black_box(mirror),
                black_box(&mut buf[..]),
                bincode2::config::legacy(),
            )
            .unwrap()
        })
    });
    g.bench_function("postcard", |b| {
        b.iter(|| {
            postcard::to_slice(black_box(mirror), black_box(&mut buf[..]))
                .unwrap()
                .len()
        })
    });
    g.bench_function("serde_json", |b| {
        b.iter(|| {
            json_buf.clear();
            serde_json::to_writer(black_box(&mut json_buf), black_box(mirror)).unwrap();
            json_buf.len()
        })
    });
    g.bench_function("wincode", |b| {
        b.iter(|| wincode::serialize_into(black_box(&mut buf[..]), black_box(mirror)).unwrap())
    });
    g.finish();

    // ---- decode -----------------------------------------------------------------------------
    let mut g = c.benchmark_group(format!("decode/{scenario}"));
    configure(&mut g, payload_len as u64, large);
    g.bench_function("snapbus", |b| {
        b.iter(|| S::decode_exact(black_box(&snap_enc)).unwrap())
    });
    // Dynamic decoding as consumers do it (the descriptor's plan compiled once), and with a
    // plan compiled on every call.
    let desc = S::descriptor();
    g.bench_function("snapbus-dynamic", |b| {
        b.iter(|| desc.decode(black_box(&snap_enc)).unwrap())
    });
    g.bench_function("snapbus-dynamic-compile", |b| {
        b.iter(|| snapbus_schemas::decode(desc.root(), black_box(&snap_enc)).unwrap())
    });
    g.bench_function("bincode2-legacy", |b| {
        b.iter(|| {
            let (v, _): (M, usize) = bincode2::serde::decode_from_slice(
                black_box(&bincode_enc),
                bincode2::config::legacy(),
            )
            .unwrap();
            v
        })
    });
    g.bench_function("postcard", |b| {
        b.iter(|| postcard::from_bytes::<M>(black_box(&postcard_enc)).unwrap())
    });
    g.bench_function("serde_json", |b| {
        b.iter(|| serde_json::from_slice::<M>(black_box(&json_enc)).unwrap())
    });
    g.bench_function("wincode", |b| {
        b.iter(|| wincode::deserialize::<M>(black_box(&wincode_enc)).unwrap())
    });
    g.finish();
}

fn codecs(c: &mut Criterion) {
    let (event, event_mirror) = make_event();
    bench_scenario(c, "event64", &event, &event_mirror, false);

    let (tensor, tensor_mirror) = make_tensor();
    bench_scenario(c, "tensor1m", &tensor, &tensor_mirror, true);
}

criterion::criterion_group!(benches, codecs);
criterion::criterion_main!(benches);

//! The dynamic emit path (`Publisher::emit_value`): a schema known only at run time, a value
//! encoded straight into the lane. A real broker (threads of this process) and a real
//! subscriber.

use std::time::{Duration, Instant};

use snapbus_bus::Level;
use snapbus_bus::broker;
use snapbus_bus::publisher::EmitError;
use snapbus_bus::schemas::{
    EncodeError, Field, SchemaDescriptor, TypeDesc, Value, decode, encode_value,
};
use snapbus_bus::subscriber::Event;

use crate::common::{small_publisher, subscribe_oldest, test_bus};

const WATCHDOG: Duration = Duration::from_secs(60);

fn schema() -> SchemaDescriptor {
    SchemaDescriptor::new(
        "test.dynamic",
        1,
        TypeDesc::Struct {
            fields: vec![
                Field::new("step", TypeDesc::U32),
                Field::new("name", TypeDesc::String),
                Field::new(
                    "xs",
                    TypeDesc::Seq {
                        elem: Box::new(TypeDesc::F64),
                    },
                ),
            ],
        },
    )
    .expect("schema")
}

fn value(step: u32) -> Value<'static> {
    Value::Struct(vec![
        ("step".into(), Value::U32(step)),
        ("name".into(), Value::Str(format!("run-{step}").into())),
        (
            "xs".into(),
            Value::Seq((0..step).map(|i| Value::F64(f64::from(i) / 2.0)).collect()),
        ),
    ])
}

#[test]
fn dynamic_values_round_trip_and_a_mismatch_is_counted_with_nothing_written() {
    let (root, dir) = test_bus("dynamic", "dyntest");
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(60)).expect("broker");
    let p = small_publisher(dir.clone(), "dyntest");
    let emitter = p.emitter("dyn");
    let desc = schema();
    for step in 0..3 {
        p.emit_value(Level::WARN, emitter, &desc, &value(step))
            .expect("emit");
    }
    // A value that does not match: an encode error, counted, and no frame (not even an
    // aborted one) in the lane.
    let wrong = Value::Struct(vec![("step".into(), Value::U64(1))]);
    let err = p
        .emit_value(Level::WARN, emitter, &desc, &wrong)
        .expect_err("mismatch");
    assert!(
        matches!(err, EmitError::Encode(EncodeError::TypeMismatch { .. })),
        "{err:?}"
    );
    p.emit_value(Level::WARN, emitter, &desc, &value(3))
        .expect("emit after the mismatch");
    let stats = p.stats();
    assert_eq!((stats.written, stats.encode_errors), (4, 1));
    assert_eq!(stats.not_written(), 1);
    assert_eq!(p.lane().lane().stats().aborted, 0, "nothing half-written");

    let mut sub = subscribe_oldest(&dir, "test.dynamic");
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        assert!(t0.elapsed() < WATCHDOG, "only {} of 4 records", seen.len());
        if let Some(Event::Record(r)) = sub.next(Duration::from_millis(100)).expect("next") {
            assert_eq!(
                r.schema.fingerprint(),
                desc.fingerprint(),
                "the consumer got the run-time descriptor"
            );
            assert_eq!(r.meta.level, Level::WARN.as_u8());
            assert_eq!(r.emitter, Some("dyn"));
            let got = decode(r.schema.root(), r.payload).expect("decode");
            assert_eq!(got.field("step"), Some(&Value::U32(seen.len() as u32)));
            seen.push(r.payload.to_vec());
        }
    }
    // The same bytes the allocating encoder produces.
    let expected: Vec<_> = (0..4)
        .map(|step| {
            let mut bytes = Vec::new();
            encode_value(desc.root(), &value(step), &mut bytes).expect("encode");
            bytes
        })
        .collect();
    assert_eq!(seen, expected);
    drop(sub);
    drop(p);
    broker.stop().expect("broker");
    let _ = std::fs::remove_dir_all(&root);
}

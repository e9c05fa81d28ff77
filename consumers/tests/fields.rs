//! The shared field-extraction module: dotted leaf paths, numeric leaves, reductions, keys,
//! malformed payloads, and the field tree that export names its columns by.

use snapbus_bus::subscriber::Glob;
use snapbus_consumers::fields::{
    Extracted, FieldNode, KeyType, KeyValue, MAX_ELEMENTWISE, Parts, Plan, PlanError, decode_group,
    tensor_paths,
};
use snapbus_schemas::{Snapshot, Tensor, Wire};

use crate::common::{Info, Mode};

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "fields.step", version = 1)]
struct Step {
    episode: u32,
    env: String,
    mode: Mode,
    reward: f64,
    pos: [f32; 2],
    long: [u8; 20],
    bonus: Option<f32>,
    info: Info,
    pair: (i8, bool),
    hist: Vec<f32>,
    obs: Tensor<u16>,
}

fn step(bonus: Option<f32>, hist: Vec<f32>) -> Step {
    Step {
        episode: 4,
        env: "env3".into(),
        mode: Mode::Eval,
        reward: -1.5,
        pos: [0.5, -2.0],
        long: std::array::from_fn(|i| i as u8),
        bonus,
        info: Info {
            loss: 0.25,
            note: "n".into(),
        },
        pair: (-3, true),
        hist,
        obs: Tensor::new(vec![2, 2], vec![1u16, 3, 8, 4]).expect("tensor"),
    }
}

const LEAVES: [&str; 17] = [
    "episode",
    "reward",
    "pos.0",
    "pos.1",
    "long.mean",
    "long.min",
    "long.max",
    "bonus",
    "info.loss",
    "pair.0",
    "pair.1",
    "hist.mean",
    "hist.min",
    "hist.max",
    "obs.mean",
    "obs.min",
    "obs.max",
];

#[test]
fn numeric_leaves_are_named_by_dotted_paths_and_extracted_with_reductions() {
    // `long` is reduced, `pos` is element by element.
    const { assert!(MAX_ELEMENTWISE < 20) };
    let plan = Plan::numeric(Step::descriptor().root());
    assert_eq!(plan.leaves(), LEAVES);
    assert!(plan.keys().is_empty() && !plan.has_window_field());
    let binary: Vec<bool> = plan.leaves().iter().map(|l| l == "pair.1").collect();
    assert_eq!(plan.binary_leaves(), binary);

    let mut out = Extracted::default();
    let payload = step(Some(2.0), vec![1.0, f32::NAN, 5.0])
        .encode_to_vec()
        .expect("encode");
    plan.extract(&payload, &mut out).expect("extract");
    let want = [
        4.0, -1.5, 0.5, -2.0, 9.5, 0.0, 19.0, 2.0, 0.25, -3.0, 1.0, 3.0, 1.0, 5.0, 4.0, 1.0, 8.0,
    ];
    assert_eq!(out.values, want);
    assert!(out.group.is_empty() && out.window.is_none());

    // Absent values are NaN: a none option, an empty sequence (the vectors are reused).
    let payload = step(None, Vec::new()).encode_to_vec().expect("encode");
    plan.extract(&payload, &mut out).expect("extract");
    for (leaf, v) in plan.leaves().iter().zip(&out.values) {
        let absent = leaf == "bonus" || leaf.starts_with("hist.");
        assert_eq!(v.is_nan(), absent, "{leaf} = {v}");
    }
}

#[test]
fn group_by_and_window_fields_are_keys_not_leaves_and_globs_narrow_the_leaves() {
    let root = Step::descriptor().root();
    let group_by = ["env".to_owned(), "mode".to_owned()];
    let plan = Plan::compile(root, &group_by, Some("episode"), &[]).expect("compile");
    assert_eq!(
        plan.keys(),
        [
            ("env".to_owned(), KeyType::Str),
            ("mode".to_owned(), KeyType::Str),
            ("episode".to_owned(), KeyType::U64),
        ]
    );
    assert!(plan.has_window_field());
    assert_eq!(plan.leaves(), &LEAVES[1..]);

    let mut out = Extracted::default();
    let payload = step(None, vec![1.0]).encode_to_vec().expect("encode");
    plan.extract(&payload, &mut out).expect("extract");
    assert_eq!(out.window, Some(4));
    assert_eq!(
        decode_group(&out.group, 2),
        Some(vec![
            KeyValue::Str("env3".into()),
            KeyValue::Str("Eval".into())
        ])
    );

    // A missing group-by field is an error; a missing (or non-integer) window field is not
    // (a named window field is never a leaf).
    assert_eq!(
        Plan::compile(root, &["nope".to_owned()], None, &[]).map(|_| ()),
        Err(PlanError::GroupField("nope".into()))
    );
    let plan = Plan::compile(root, &[], Some("reward"), &[]).expect("compile");
    assert!(!plan.has_window_field() && plan.keys().is_empty());
    assert!(!plan.leaves().iter().any(|l| l == "reward"));

    // Globs select fields by their path (an array as a whole: `pos`, not `pos.1`).
    let globs = [
        Glob::new("info.*").expect("glob"),
        Glob::new("pos").expect("glob"),
    ];
    let plan = Plan::compile(root, &[], None, &globs).expect("compile");
    assert_eq!(plan.leaves(), ["pos.0", "pos.1", "info.loss"]);
    let plan = Plan::compile(root, &[], None, &[Glob::new("pos.1").expect("glob")]);
    assert!(plan.expect("compile").leaves().is_empty());
}

#[test]
fn a_payload_that_does_not_match_its_descriptor_is_malformed_never_a_panic() {
    let plan =
        Plan::compile(Step::descriptor().root(), &["env".to_owned()], None, &[]).expect("compile");
    let payload = step(Some(1.0), vec![1.0, 2.0])
        .encode_to_vec()
        .expect("encode");
    let mut out = Extracted::default();
    plan.extract(&payload, &mut out).expect("the whole payload");
    for n in 0..payload.len() {
        assert!(plan.extract(&payload[..n], &mut out).is_err(), "cut at {n}");
    }
    // Flipped bytes: an error or some values, never a panic or a huge allocation.
    for i in 0..payload.len() {
        let mut bad = payload.clone();
        bad[i] ^= 0xff;
        let _ = plan.extract(&bad, &mut out);
    }
}

/// Every path of the tree, in walk order.
fn paths(n: &FieldNode<'_>, out: &mut Vec<String>) {
    out.push(n.path.clone());
    match &n.parts {
        Parts::Leaf => {}
        Parts::Struct(parts) | Parts::Tuple(parts) => parts.iter().for_each(|p| paths(p, out)),
        Parts::Option(some) => paths(some, out),
        Parts::Enum(variants) => variants.iter().flatten().for_each(|p| paths(p, out)),
    }
}

#[derive(Wire, Debug, Clone, PartialEq)]
enum Action {
    Idle,
    Move(f32),
    Turn(i8, i8),
    Jump { height: f64 },
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "fields.tree", version = 1)]
struct Tree {
    action: Action,
    maybe: Option<(u8, Tensor<u8>)>,
    image: Tensor<u8>,
    nested: Info,
}

#[test]
fn the_field_tree_names_every_part_and_tensors_are_found_through_structs() {
    let root = Tree::descriptor().root();
    let mut all = Vec::new();
    paths(&FieldNode::tree(root), &mut all);
    assert_eq!(
        all,
        [
            "",
            "action",
            "action.Move",
            "action.Turn.0",
            "action.Turn.1",
            "action.Jump.height",
            "maybe",
            "maybe",
            "maybe.0",
            "maybe.1",
            "image",
            "nested",
            "nested.loss",
            "nested.note",
        ]
    );
    // `maybe.1` is inside an option: `Value::path` does not reach it, neither does this.
    assert_eq!(tensor_paths(root), ["image"]);
}

/// Numbers and keys extracted from a payload where it lies in the ring are those extracted
/// from a copy: strings of every length shift what follows off the word boundaries, and
/// sequences and tensors long enough to be read in several pieces.
#[test]
fn extraction_from_the_ring_equals_extraction_from_a_copy() {
    use std::time::{Duration, Instant};

    use snapbus_bus::Level;
    use snapbus_bus::lane::StartAt;
    use snapbus_bus::subscriber::{Event, InPlaceEvent, RecordRef, SubscribeOptions, Subscriber};
    use snapbus_consumers::fields::Malformed;

    let bus = crate::runtime::Bus::start("fields-ring");
    let p = bus.publisher();
    let mut sent = 0;
    for n in 0..24usize {
        let mut s = step(
            (n % 3 != 0).then_some(n as f32),
            (0..n * n * 11).map(|k| (k % 97) as f32 - 40.0).collect(),
        );
        s.env = "e".repeat(n % 9);
        s.obs = Tensor::new(
            vec![n as u64 * 61 + 1],
            (0..n * 61 + 1).map(|k| (k * 7 % 1000) as u16).collect(),
        )
        .expect("tensor");
        p.emit(Level::INFO, 0, &s).expect("emit");
        sent += 1;
    }
    p.close();
    let numeric = Plan::numeric(Step::descriptor().root());
    let keyed = Plan::compile(
        Step::descriptor().root(),
        &["env".to_owned(), "mode".to_owned()],
        Some("episode"),
        &[],
    )
    .expect("compile");
    let mut sub = Subscriber::connect(
        bus.dir(),
        SubscribeOptions {
            kind: "test".into(),
            globs: vec![Glob::new("fields.step").expect("glob")],
            start: StartAt::Oldest,
            cut: false,
            skip_lanes: Vec::new(),
            count_history_as_lost: true,
        },
    )
    .expect("subscribe");
    type Out = (Vec<f64>, Vec<u8>, Option<u64>);
    fn run(plan: &Plan, from: impl FnOnce(&Plan, &mut Extracted) -> Result<(), Malformed>) -> Out {
        let mut out = Extracted::default();
        from(plan, &mut out).expect("extract");
        (out.values, out.group, out.window)
    }
    let mut seen = 0;
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no end after {seen}"
        );
        let next = sub
            .next_in_place(Duration::from_millis(100), |r| {
                let mut copy = vec![0u8; r.payload.len()];
                assert!(r.payload.copy_to(&mut copy));
                [&numeric, &keyed].map(|plan| {
                    (
                        run(plan, |p, out| p.extract_from(r.payload, out)),
                        run(plan, |p, out| p.extract(&copy, out)),
                    )
                })
            })
            .expect("next_in_place");
        match next {
            Some(InPlaceEvent::Record(RecordRef { payload: value, .. })) => {
                for (in_ring, from_copy) in value {
                    // NaN is not equal to itself: compare the bits.
                    let bits = |o: &Out| {
                        let v: Vec<u64> = o.0.iter().map(|x| x.to_bits()).collect();
                        (v, o.1.clone(), o.2)
                    };
                    assert_eq!(bits(&in_ring), bits(&from_copy), "record {seen}");
                }
                seen += 1;
            }
            Some(InPlaceEvent::Other(Event::Ended(_))) => break,
            Some(InPlaceEvent::Other(Event::Lagged { lost, .. })) => panic!("{lost} lost"),
            _ => {}
        }
    }
    assert_eq!(seen, sent);
}

/// Reductions over every length around the four-way split, NaN anywhere: the mean, minimum and
/// maximum of what is not NaN (all NaN when nothing is).
#[test]
fn reductions_ignore_nan_at_every_length_and_position() {
    let plan = Plan::numeric(Step::descriptor().root());
    let at = |leaf: &str| plan.leaves().iter().position(|l| l == leaf).expect("leaf");
    let (mean, min, max) = (at("hist.mean"), at("hist.min"), at("hist.max"));
    let mut out = Extracted::default();
    for len in 0..40usize {
        for nan_every in [0usize, 1, 2, 3, 5, 7] {
            let hist: Vec<f32> = (0..len)
                .map(|k| {
                    if nan_every > 0 && k % nan_every == nan_every - 1 {
                        f32::NAN
                    } else {
                        ((k * 37 + len) % 97) as f32 - 40.0
                    }
                })
                .collect();
            let payload = step(None, hist.clone()).encode_to_vec().expect("encode");
            plan.extract(&payload, &mut out).expect("extract");
            let kept: Vec<f64> = hist
                .iter()
                .filter(|v| !v.is_nan())
                .map(|&v| f64::from(v))
                .collect();
            let got = (out.values[mean], out.values[min], out.values[max]);
            if kept.is_empty() {
                assert!(
                    got.0.is_nan() && got.1.is_nan() && got.2.is_nan(),
                    "{len} {got:?}"
                );
                continue;
            }
            // Small integers: every partial sum is exact, whatever the order.
            let want = (
                kept.iter().sum::<f64>() / kept.len() as f64,
                kept.iter().copied().fold(f64::INFINITY, f64::min),
                kept.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            );
            assert_eq!(got, want, "{len} elements, NaN every {nan_every}");
        }
    }
}

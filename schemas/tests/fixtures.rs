//! Test types covering every descriptor kind, with proptest strategies.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use serde::Serialize;
use snapbus_schemas::{Bytes, Snapshot, Tensor, Wire};

#[derive(Wire, Serialize, Debug, Clone, PartialEq)]
pub(crate) enum Mode {
    Train,
    Eval,
    Custom(u16, String),
    Scheduled { at_step: u64, lr: f64 },
    Wrapped(Box<Inner>),
}

#[derive(Wire, Serialize, Debug, Clone, PartialEq)]
pub(crate) struct Inner {
    pub id: u16,
    pub name: String,
    pub flags: Vec<bool>,
}

#[derive(Wire, Serialize, Debug, Clone, PartialEq)]
pub(crate) struct Pair(pub i32, pub f32);

#[derive(Wire, Serialize, Debug, Clone, PartialEq)]
pub(crate) struct Marker;

#[derive(Wire, Serialize, Debug, Clone, PartialEq)]
pub(crate) struct Scalars {
    pub b: bool,
    pub r#u8: u8,
    pub r#u16: u16,
    pub r#u32: u32,
    pub r#u64: u64,
    pub r#u128: u128,
    pub r#i8: i8,
    pub r#i16: i16,
    pub r#i32: i32,
    pub r#i64: i64,
    pub r#i128: i128,
    pub r#f32: f32,
    pub r#f64: f64,
}

/// Every kind of descriptor at least once, nested.
#[derive(Snapshot, Serialize, Debug, Clone, PartialEq)]
#[snapshot(id = "test.everything", version = 1)]
pub(crate) struct Everything {
    pub scalars: Scalars,
    pub text: String,
    pub blob: Bytes,
    pub maybe: Option<Inner>,
    pub inners: Vec<Inner>,
    pub floats: Vec<f64>,
    pub small: Vec<i16>,
    pub fixed: [u16; 4],
    pub fixed_inner: [Option<u8>; 2],
    pub tuple: (u8, String, f64),
    pub pair: Pair,
    pub marker: Marker,
    pub unit: (),
    pub mode: Mode,
    pub modes: Vec<Mode>,
    pub by_name: BTreeMap<String, i64>,
    pub by_id: HashMap<u32, Vec<u8>>,
    pub image: Tensor<u8>,
    pub features: Tensor<f32>,
    pub counts: Tensor<i64>,
    pub nested: Vec<Option<(u8, Inner)>>,
}

/// Floats of type `$t` without NaN (NaN != NaN would make value equality meaningless); NaN
/// bit patterns are covered by the byte-level round trips instead.
macro_rules! no_nan {
    ($t:ident) => {
        prop::num::$t::NORMAL
            | prop::num::$t::SUBNORMAL
            | prop::num::$t::ZERO
            | prop::num::$t::INFINITE
            | prop::num::$t::NEGATIVE
    };
}

fn any_f64() -> impl Strategy<Value = f64> + Clone {
    no_nan!(f64)
}

fn any_f32() -> impl Strategy<Value = f32> + Clone {
    no_nan!(f32)
}

pub(crate) fn inner() -> impl Strategy<Value = Inner> {
    (
        any::<u16>(),
        ".{0,12}",
        prop::collection::vec(any::<bool>(), 0..5),
    )
        .prop_map(|(id, name, flags)| Inner { id, name, flags })
}

pub(crate) fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Train),
        Just(Mode::Eval),
        (any::<u16>(), ".{0,8}").prop_map(|(a, b)| Mode::Custom(a, b)),
        (any::<u64>(), any_f64()).prop_map(|(at_step, lr)| Mode::Scheduled { at_step, lr }),
        inner().prop_map(|i| Mode::Wrapped(Box::new(i))),
    ]
}

pub(crate) fn scalars() -> impl Strategy<Value = Scalars> {
    (
        (
            any::<bool>(),
            any::<u8>(),
            any::<u16>(),
            any::<u32>(),
            any::<u64>(),
            any::<u128>(),
        ),
        (
            any::<i8>(),
            any::<i16>(),
            any::<i32>(),
            any::<i64>(),
            any::<i128>(),
        ),
        (any_f32(), any_f64()),
    )
        .prop_map(
            |(
                (b, r#u8, r#u16, r#u32, r#u64, r#u128),
                (r#i8, r#i16, r#i32, r#i64, r#i128),
                (r#f32, r#f64),
            )| {
                Scalars {
                    b,
                    r#u8,
                    r#u16,
                    r#u32,
                    r#u64,
                    r#u128,
                    r#i8,
                    r#i16,
                    r#i32,
                    r#i64,
                    r#i128,
                    r#f32,
                    r#f64,
                }
            },
        )
}

/// A tensor with 0 to 3 dimensions, some of them possibly 0 (empty tensors).
pub(crate) fn tensor<T: snapbus_schemas::Element + std::fmt::Debug>(
    elem: impl Strategy<Value = T> + Clone,
) -> impl Strategy<Value = Tensor<T>> {
    prop::collection::vec(0u64..4, 0..4).prop_flat_map(move |shape| {
        let n = shape.iter().product::<u64>() as usize;
        (Just(shape), prop::collection::vec(elem.clone(), n))
            .prop_map(|(shape, data)| Tensor::new(shape, data).expect("shape matches data"))
    })
}

pub(crate) fn everything() -> impl Strategy<Value = Everything> {
    (
        (
            scalars(),
            ".{0,16}",
            prop::collection::vec(any::<u8>(), 0..16).prop_map(Bytes),
            prop::option::of(inner()),
            prop::collection::vec(inner(), 0..4),
            prop::collection::vec(any_f64(), 0..8),
            prop::collection::vec(any::<i16>(), 0..8),
            any::<[u16; 4]>(),
            any::<[Option<u8>; 2]>(),
        ),
        (
            (any::<u8>(), ".{0,6}", any_f64()),
            (any::<i32>(), any_f32()).prop_map(|(a, b)| Pair(a, b)),
            mode(),
            prop::collection::vec(mode(), 0..4),
            prop::collection::btree_map(".{0,6}", any::<i64>(), 0..4),
            prop::collection::hash_map(
                any::<u32>(),
                prop::collection::vec(any::<u8>(), 0..4),
                0..4,
            ),
            tensor(any::<u8>()),
            tensor(any_f32()),
            tensor(any::<i64>()),
            prop::collection::vec(prop::option::of((any::<u8>(), inner())), 0..3),
        ),
    )
        .prop_map(
            |(
                (scalars, text, blob, maybe, inners, floats, small, fixed, fixed_inner),
                (tuple, pair, mode, modes, by_name, by_id, image, features, counts, nested),
            )| Everything {
                scalars,
                text,
                blob,
                maybe,
                inners,
                floats,
                small,
                fixed,
                fixed_inner,
                tuple,
                pair,
                marker: Marker,
                unit: (),
                mode,
                modes,
                by_name,
                by_id,
                image,
                features,
                counts,
                nested,
            },
        )
}

/// A fixed, non-trivial value (for tests that need one example).
pub(crate) fn sample() -> Everything {
    Everything {
        scalars: Scalars {
            b: true,
            r#u8: 1,
            r#u16: 2,
            r#u32: 3,
            r#u64: 4,
            r#u128: u128::MAX,
            r#i8: -1,
            r#i16: -2,
            r#i32: -3,
            r#i64: -4,
            r#i128: i128::MIN,
            r#f32: 0.1,
            r#f64: -2.5,
        },
        text: "héllo".into(),
        blob: Bytes(vec![0, 255]),
        maybe: Some(Inner {
            id: 7,
            name: "in".into(),
            flags: vec![true, false],
        }),
        inners: vec![Inner {
            id: 1,
            name: String::new(),
            flags: vec![],
        }],
        floats: vec![1.0, f64::INFINITY],
        small: vec![-1, 2],
        fixed: [1, 2, 3, 4],
        fixed_inner: [None, Some(9)],
        tuple: (5, "t".into(), 0.5),
        pair: Pair(-7, 1.5),
        marker: Marker,
        unit: (),
        mode: Mode::Scheduled {
            at_step: 10,
            lr: 0.001,
        },
        modes: vec![Mode::Train, Mode::Custom(3, "x".into()), Mode::Eval],
        by_name: BTreeMap::from([("a".into(), 1), ("b".into(), -2)]),
        by_id: HashMap::from([(42, vec![1, 2, 3])]),
        image: Tensor::new(vec![2, 3], vec![0, 1, 2, 3, 4, 5]).expect("shape"),
        features: Tensor::new(vec![3], vec![0.5, -1.0, 2.0]).expect("shape"),
        counts: Tensor::new(vec![], vec![99]).expect("shape"),
        nested: vec![
            None,
            Some((
                1,
                Inner {
                    id: 2,
                    name: "n".into(),
                    flags: vec![true],
                },
            )),
        ],
    }
}

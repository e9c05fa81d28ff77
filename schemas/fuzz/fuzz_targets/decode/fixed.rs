//! The fixed descriptors of mode B: the built-ins, a rich struct covering every `TypeDesc`
//! variant, and small single-variant ones.

use super::*;

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
pub(crate) static FIXED: LazyLock<Vec<(TypeDesc, usize)>> = LazyLock::new(|| {
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
            // A built-in with fields added later (`since` > 1) is valid from that version on.
            let version = match &root {
                TypeDesc::Struct { fields } => fields.iter().map(|f| f.since).max().unwrap_or(1),
                _ => 1,
            };
            let d = SchemaDescriptor::new("fuzz.fixed", version.max(1), root)
                .expect("fixed descriptor is valid");
            let len = d.to_canonical_bytes().len();
            (d.root().clone(), len)
        })
        .collect()
});

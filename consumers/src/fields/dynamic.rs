//! Numbers inside dynamic values ([`TypeDesc::Dynamic`](snapbus_schemas::TypeDesc::Dynamic)):
//! their leaves are known only record by record, so they are found by walking each one.
//!
//! The leaves of a dynamic field at `path`: a number or bool is the leaf `path`; a map's
//! entries are leaves under `path.key`; a list of numbers and an n-dimensional array are
//! reduced like a sequence ([`REDUCTIONS`]: `path.mean`, `path.min`, `path.max`); strings,
//! bytes, none and lists of anything else have none.

use snapbus_schemas::walk::{Node, NodeId, Scalar, Visit};
use snapbus_schemas::{DType, DecodeError};

use super::read::{Cursor, Malformed, Source, reduce_span};
use super::tree::{REDUCTIONS, join};

/// What a part of a dynamic value yields, built bottom up.
pub(super) enum Found {
    /// A number (a bool as 0/1).
    Num(f64),
    /// A string (a map's key).
    Text(String),
    /// Leaves under this value, by path relative to it (`""`: the value itself).
    Leaves(Vec<(String, f64)>),
    /// Nothing to summarize.
    Nothing,
}

impl Found {
    /// Appends the leaves found to `out`, under `path`.
    pub(super) fn push_under(self, path: &str, out: &mut Vec<(String, f64)>) {
        match self {
            Found::Num(v) => out.push((path.to_owned(), v)),
            Found::Leaves(leaves) => {
                out.extend(leaves.into_iter().map(|(p, v)| (join(path, &p), v)));
            }
            Found::Text(_) | Found::Nothing => {}
        }
    }
}

/// The visitor that finds the numeric leaves of a dynamic value.
pub(super) struct Leaves;

/// A list being walked: its numbers, while every item is one.
pub(super) struct List {
    nums: Vec<f64>,
    numeric: bool,
}

impl<'d, 'a, S: Source + ?Sized> Visit<'d, Cursor<'a, S>> for Leaves {
    type Out = Found;
    type Error = DecodeError;
    type Seq = List;
    type Record = ();
    type Map = Vec<(String, f64)>;

    fn scalar(&mut self, v: Scalar) -> Result<Found, DecodeError> {
        Ok(Found::Num(v.as_f64()))
    }

    fn string(&mut self, src: &Cursor<'a, S>, at: usize, len: usize) -> Result<Found, DecodeError> {
        let mut bytes = vec![0u8; len];
        src.src.read(at, &mut bytes).map_err(bad)?;
        Ok(String::from_utf8(bytes).map_or(Found::Nothing, Found::Text))
    }

    fn bytes(&mut self, _: &Cursor<'a, S>, _: usize, _: usize) -> Result<Found, DecodeError> {
        Ok(Found::Nothing)
    }

    fn packed(
        &mut self,
        src: &Cursor<'a, S>,
        dtype: DType,
        at: usize,
        count: usize,
    ) -> Result<Found, DecodeError> {
        reduced(src, dtype, at, count)
    }

    fn tensor(
        &mut self,
        src: &Cursor<'a, S>,
        dtype: DType,
        shape: &[u64],
        at: usize,
    ) -> Result<Found, DecodeError> {
        let count = shape.iter().product::<u64>();
        reduced(
            src,
            dtype,
            at,
            usize::try_from(count).map_err(|_| bad(Malformed))?,
        )
    }

    fn option(&mut self, value: Option<Found>) -> Result<Found, DecodeError> {
        Ok(value.unwrap_or(Found::Nothing))
    }

    fn seq_begin(&mut self, _: &Node<'d>, len: usize) -> Result<List, DecodeError> {
        Ok(List {
            nums: Vec::with_capacity(len.min(4096)),
            numeric: true,
        })
    }

    fn seq_item(&mut self, seq: &mut List, item: Found) -> Result<(), DecodeError> {
        match item {
            Found::Num(v) if seq.numeric => seq.nums.push(v),
            _ => seq.numeric = false,
        }
        Ok(())
    }

    fn seq_end(&mut self, _: &Node<'d>, seq: List) -> Result<Found, DecodeError> {
        if !seq.numeric || seq.nums.is_empty() {
            return Ok(Found::Nothing);
        }
        let mut out = [0.0; 3];
        let bytes: Vec<u8> = seq.nums.iter().flat_map(|v| v.to_le_bytes()).collect();
        reduce_span(&bytes[..], DType::F64, 0, seq.nums.len(), &mut out).map_err(bad)?;
        Ok(reductions(out))
    }

    fn record_begin(&mut self, _: NodeId, _: &Node<'d>, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }

    fn record_end(&mut self, _: NodeId, _: &Node<'d>, _: ()) -> Result<Found, DecodeError> {
        Ok(Found::Nothing)
    }

    fn variant(
        &mut self,
        _: u32,
        _: NodeId,
        _: &Node<'d>,
        _: Option<Found>,
    ) -> Result<Found, DecodeError> {
        Ok(Found::Nothing)
    }

    fn map_begin(&mut self, _: usize) -> Result<Self::Map, DecodeError> {
        Ok(Vec::new())
    }

    fn map_entry(
        &mut self,
        map: &mut Self::Map,
        key: Found,
        value: Found,
    ) -> Result<(), DecodeError> {
        if let Found::Text(key) = key {
            value.push_under(&key, map);
        }
        Ok(())
    }

    fn map_end(&mut self, map: Self::Map) -> Result<Found, DecodeError> {
        Ok(Found::Leaves(map))
    }
}

fn reduced<S: Source + ?Sized>(
    src: &Cursor<'_, S>,
    dtype: DType,
    at: usize,
    count: usize,
) -> Result<Found, DecodeError> {
    let mut out = [0.0; 3];
    reduce_span(src.src, dtype, at, count, &mut out).map_err(bad)?;
    Ok(reductions(out))
}

fn reductions(out: [f64; 3]) -> Found {
    Found::Leaves(
        REDUCTIONS
            .iter()
            .zip(out)
            .map(|(name, v)| ((*name).to_owned(), v))
            .collect(),
    )
}

fn bad(_: Malformed) -> DecodeError {
    DecodeError::new(
        0,
        snapbus_schemas::DecodeErrorKind::UnexpectedEnd {
            needed: 0,
            remaining: 0,
        },
    )
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use snapbus_schemas::{DType, Field, TensorView, TypeDesc, Value, encode_value};

    use crate::fields::{Extracted, Plan};

    fn s(v: &str) -> Value<'static> {
        Value::Str(Cow::Owned(v.to_owned()))
    }

    #[test]
    fn dynamic_leaves_are_found_record_by_record() {
        let root = TypeDesc::Struct {
            fields: vec![
                Field::new("step", TypeDesc::U32),
                Field::new("extra", TypeDesc::Dynamic),
                Field::new("after", TypeDesc::F64),
            ],
        };
        let plan = Plan::numeric(&root);
        assert!(plan.has_dynamic());
        assert_eq!(plan.leaves(), ["step", "after"]);
        let record = |extra: Value<'static>| {
            let v = Value::Struct(vec![
                (Cow::Borrowed("step"), Value::U32(3)),
                (Cow::Borrowed("extra"), extra),
                (Cow::Borrowed("after"), Value::F64(0.5)),
            ]);
            let mut bytes = Vec::new();
            encode_value(&root, &v, &mut bytes).expect("encode");
            bytes
        };
        let image = TensorView {
            dtype: DType::U8,
            shape: vec![2, 2],
            data: Cow::Owned(vec![0, 2, 4, 6]),
        };
        let first = record(Value::Map(vec![
            (s("is_done"), Value::Bool(true)),
            (s("name"), s("cup")),
            (
                s("stats"),
                Value::Map(vec![
                    (s("steps"), Value::I64(77)),
                    (s("none"), Value::Option(None)),
                ]),
            ),
            (s("hist"), Value::Seq(vec![Value::I64(1), Value::F64(5.0)])),
            (s("mixed"), Value::Seq(vec![Value::I64(1), s("x")])),
            (s("image"), Value::Tensor(image)),
        ]));
        let mut out = Extracted::default();
        plan.extract(&first, &mut out).expect("extract");
        assert_eq!(out.values, [3.0, 0.5]);
        let want: Vec<(String, f64)> = [
            ("extra.is_done", 1.0),
            ("extra.stats.steps", 77.0),
            ("extra.hist.mean", 3.0),
            ("extra.hist.min", 1.0),
            ("extra.hist.max", 5.0),
            ("extra.image.mean", 3.0),
            ("extra.image.min", 0.0),
            ("extra.image.max", 6.0),
        ]
        .iter()
        .map(|(p, v)| ((*p).to_owned(), *v))
        .collect();
        assert_eq!(out.dynamic, want);
        // The next record of the same schema has another shape: other leaves, none left over.
        plan.extract(&record(Value::F64(2.5)), &mut out)
            .expect("extract");
        assert_eq!(out.dynamic, [("extra".to_owned(), 2.5)]);
        plan.extract(&record(s("text")), &mut out).expect("extract");
        assert!(out.dynamic.is_empty());
        // Bad bytes in a dynamic field are malformed, not a panic.
        let mut bad = record(Value::I64(1));
        bad[4] = 200;
        assert!(plan.extract(&bad, &mut out).is_err());
    }
}

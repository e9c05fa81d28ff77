//! Payloads decoded to Python values: a [`Plan`] per schema (made once, holding the record
//! classes), walked over the record's bytes.
//!
//! Structs become instances of a dataclass made once per schema with
//! `dataclasses.make_dataclass` (a `dict` where a field name is not a Python identifier);
//! unit enum variants their name, other variants `{name: value}`; options `None` or the value;
//! sequences, arrays and tuples lists (tuples: tuples); maps dicts; tensors read-only numpy
//! views over the record's `bytes` (`memoryview`s without numpy); bytes `bytes`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use snapbus_bus::schemas::{
    DType, DecodeError, SchemaDescriptor, TypeDesc, VariantKind, WireReader,
};

/// Largest tensor rank on the wire.
const MAX_RANK: u64 = 32;

/// How to decode one type.
pub(crate) enum Plan {
    Bool,
    U8,
    U16,
    U32,
    U64,
    U128,
    I8,
    I16,
    I32,
    I64,
    I128,
    F32,
    F64,
    Str,
    Bytes,
    Option(Box<Plan>),
    Seq(Box<Plan>),
    Array(u64, Box<Plan>),
    Tuple(Vec<Plan>),
    Struct(StructPlan),
    Enum(Vec<(Py<PyString>, VariantPlan)>),
    Map(Box<Plan>, Box<Plan>),
    Tensor(DType),
}

/// A struct: its record class (`None`: a dict) and its fields.
pub(crate) struct StructPlan {
    cls: Option<Py<PyAny>>,
    names: Vec<Py<PyString>>,
    fields: Vec<Plan>,
}

/// An enum variant's payload.
pub(crate) enum VariantPlan {
    Unit,
    Tuple(Vec<Plan>),
    Struct(StructPlan),
}

/// The pure-Python helpers (`snapbus._decode`).
pub(crate) fn helpers(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("snapbus._decode")?.unbind())
        })
        .map(|m| m.bind(py))
}

/// numpy, if it can be imported: its `ndarray` type and a dtype object per [`DType`].
struct Numpy {
    ndarray: Py<PyAny>,
    dtypes: Vec<Py<PyAny>>,
}

/// numpy, imported on first use (`None`: not installed; tensors become memoryviews).
fn numpy(py: Python<'_>) -> PyResult<Option<&Numpy>> {
    static NUMPY: PyOnceLock<Option<Numpy>> = PyOnceLock::new();
    NUMPY
        .get_or_try_init(py, || {
            let np = match py.import("numpy") {
                Ok(np) => np,
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyImportError>(py) => {
                    return Ok::<_, PyErr>(None);
                }
                Err(e) => return Err(e),
            };
            let dtype = np.getattr("dtype")?;
            let dtypes = DType::ALL
                .iter()
                .map(|d| dtype.call1((d.numpy(),)).map(Bound::unbind))
                .collect::<PyResult<_>>()?;
            Ok(Some(Numpy {
                ndarray: np.getattr("ndarray")?.unbind(),
                dtypes,
            }))
        })
        .map(Option::as_ref)
}

impl Plan {
    /// The plan of a schema's root type; record classes are named after the schema id.
    pub(crate) fn of_schema(py: Python<'_>, schema: &SchemaDescriptor) -> PyResult<Plan> {
        let name = class_name(schema.id());
        Plan::of(py, schema.root(), &name)
    }

    fn of(py: Python<'_>, desc: &TypeDesc, name: &str) -> PyResult<Plan> {
        let sub = |d: &TypeDesc, n: &str| Plan::of(py, d, n).map(Box::new);
        Ok(match desc {
            TypeDesc::Bool => Plan::Bool,
            TypeDesc::U8 => Plan::U8,
            TypeDesc::U16 => Plan::U16,
            TypeDesc::U32 => Plan::U32,
            TypeDesc::U64 => Plan::U64,
            TypeDesc::U128 => Plan::U128,
            TypeDesc::I8 => Plan::I8,
            TypeDesc::I16 => Plan::I16,
            TypeDesc::I32 => Plan::I32,
            TypeDesc::I64 => Plan::I64,
            TypeDesc::I128 => Plan::I128,
            TypeDesc::F32 => Plan::F32,
            TypeDesc::F64 => Plan::F64,
            TypeDesc::String => Plan::Str,
            TypeDesc::Bytes => Plan::Bytes,
            TypeDesc::Option { some } => Plan::Option(sub(some, name)?),
            TypeDesc::Seq { elem } => Plan::Seq(sub(elem, name)?),
            TypeDesc::Array { len, elem } => Plan::Array(*len, sub(elem, name)?),
            TypeDesc::Tuple { elems } => Plan::Tuple(
                elems
                    .iter()
                    .enumerate()
                    .map(|(i, e)| Plan::of(py, e, &format!("{name}_{i}")))
                    .collect::<PyResult<_>>()?,
            ),
            TypeDesc::Struct { fields } => Plan::Struct(StructPlan::of(
                py,
                fields.iter().map(|f| (f.name.as_str(), &f.ty)),
                name,
            )?),
            TypeDesc::Enum { variants } => Plan::Enum(
                variants
                    .iter()
                    .map(|v| {
                        let vname = format!("{name}_{}", v.name);
                        let plan = match &v.kind {
                            VariantKind::Unit => VariantPlan::Unit,
                            VariantKind::Tuple { elems } => VariantPlan::Tuple(
                                elems
                                    .iter()
                                    .map(|e| Plan::of(py, e, &vname))
                                    .collect::<PyResult<_>>()?,
                            ),
                            VariantKind::Struct { fields } => VariantPlan::Struct(StructPlan::of(
                                py,
                                fields.iter().map(|f| (f.name.as_str(), &f.ty)),
                                &vname,
                            )?),
                        };
                        Ok((PyString::intern(py, &v.name).unbind(), plan))
                    })
                    .collect::<PyResult<_>>()?,
            ),
            TypeDesc::Map { key, value } => Plan::Map(sub(key, name)?, sub(value, name)?),
            TypeDesc::Tensor { dtype } => Plan::Tensor(*dtype),
        })
    }

    /// Decodes the whole of `data` (a record's payload).
    pub(crate) fn decode(&self, data: &Bound<'_, PyBytes>) -> PyResult<Py<PyAny>> {
        let py = data.py();
        let bytes = data.as_bytes();
        let mut d = Decoder {
            r: WireReader::new(bytes),
            data,
            budget: 4096 + 64 * (bytes.len() as u64 + 1),
        };
        let v = d.value(py, self)?;
        d.r.finish().map_err(bad)?;
        Ok(v.unbind())
    }
}

impl StructPlan {
    fn of<'d>(
        py: Python<'_>,
        fields: impl Iterator<Item = (&'d str, &'d TypeDesc)>,
        name: &str,
    ) -> PyResult<StructPlan> {
        let mut names = Vec::new();
        let mut plans = Vec::new();
        for (fname, ty) in fields {
            plans.push(Plan::of(py, ty, &format!("{name}_{fname}"))?);
            names.push(PyString::intern(py, fname).unbind());
        }
        let cls = helpers(py)?.call_method1("record_class", (name, PyList::new(py, &names)?))?;
        let cls = (!cls.is_none()).then(|| cls.unbind());
        Ok(StructPlan {
            cls,
            names,
            fields: plans,
        })
    }
}

/// A Python class name for a schema id (`demo.step` → `demo_step`).
fn class_name(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn bad(e: DecodeError) -> PyErr {
    PyValueError::new_err(format!("the payload does not decode: {e}"))
}

struct Decoder<'a, 'py> {
    r: WireReader<'a>,
    data: &'a Bound<'py, PyBytes>,
    /// Values left to build (a hostile descriptor of zero-sized values cannot make a small
    /// payload build billions).
    budget: u64,
}

impl<'py> Decoder<'_, 'py> {
    fn value(&mut self, py: Python<'py>, plan: &Plan) -> PyResult<Bound<'py, PyAny>> {
        if self.budget == 0 {
            return Err(PyValueError::new_err(
                "the payload does not decode: too many values for its size",
            ));
        }
        self.budget -= 1;
        let r = &mut self.r;
        Ok(match plan {
            Plan::Bool => match r.read_u8().map_err(bad)? {
                0 => false.into_pyobject(py)?.to_owned().into_any(),
                1 => true.into_pyobject(py)?.to_owned().into_any(),
                b => {
                    return Err(PyValueError::new_err(format!(
                        "the payload does not decode: bool byte {b} at offset {}",
                        r.offset() - 1
                    )));
                }
            },
            Plan::U8 => r.read_u8().map_err(bad)?.into_pyobject(py)?.into_any(),
            Plan::U16 => u16::from_le_bytes(r.take_array().map_err(bad)?)
                .into_pyobject(py)?
                .into_any(),
            Plan::U32 => r.read_u32().map_err(bad)?.into_pyobject(py)?.into_any(),
            Plan::U64 => r.read_u64().map_err(bad)?.into_pyobject(py)?.into_any(),
            Plan::U128 => u128::from_le_bytes(r.take_array().map_err(bad)?)
                .into_pyobject(py)?
                .into_any(),
            Plan::I8 => i8::from_le_bytes(r.take_array().map_err(bad)?)
                .into_pyobject(py)?
                .into_any(),
            Plan::I16 => i16::from_le_bytes(r.take_array().map_err(bad)?)
                .into_pyobject(py)?
                .into_any(),
            Plan::I32 => i32::from_le_bytes(r.take_array().map_err(bad)?)
                .into_pyobject(py)?
                .into_any(),
            Plan::I64 => i64::from_le_bytes(r.take_array().map_err(bad)?)
                .into_pyobject(py)?
                .into_any(),
            Plan::I128 => i128::from_le_bytes(r.take_array().map_err(bad)?)
                .into_pyobject(py)?
                .into_any(),
            Plan::F32 => f64::from(f32::from_le_bytes(r.take_array().map_err(bad)?))
                .into_pyobject(py)?
                .into_any(),
            Plan::F64 => f64::from_le_bytes(r.take_array().map_err(bad)?)
                .into_pyobject(py)?
                .into_any(),
            Plan::Str => self.string(py)?,
            Plan::Bytes => {
                let n = r.read_len(1).map_err(bad)?;
                PyBytes::new(py, r.take(n).map_err(bad)?).into_any()
            }
            Plan::Option(some) => self.option(py, some)?,
            Plan::Seq(elem) => {
                let n = r.read_len(1).map_err(bad)?;
                self.list(py, elem, n)?
            }
            Plan::Array(len, elem) => {
                let n = usize::try_from(*len).unwrap_or(usize::MAX);
                self.list(py, elem, n)?
            }
            Plan::Tuple(elems) => self.tuple(py, elems)?.into_any(),
            Plan::Struct(s) => self.record(py, s)?,
            Plan::Enum(variants) => self.variant(py, variants)?,
            Plan::Map(k, v) => self.map(py, k, v)?,
            Plan::Tensor(dtype) => self.tensor(py, *dtype)?,
        })
    }

    /// A string: its length, then UTF-8 bytes.
    #[inline]
    fn string(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let r = &mut self.r;
        let n = r.read_len(1).map_err(bad)?;
        let at = r.offset();
        let b = r.take(n).map_err(bad)?;
        let s = std::str::from_utf8(b).map_err(|e| {
            PyValueError::new_err(format!(
                "the payload does not decode: a string at offset {at} is not UTF-8: {e}"
            ))
        })?;
        Ok(PyString::new(py, s).into_any())
    }

    /// An option: a tag byte, then the value if `1`.
    #[inline]
    fn option(&mut self, py: Python<'py>, some: &Plan) -> PyResult<Bound<'py, PyAny>> {
        match self.r.read_u8().map_err(bad)? {
            0 => Ok(py.None().into_bound(py)),
            1 => self.value(py, some),
            b => Err(PyValueError::new_err(format!(
                "the payload does not decode: option tag {b} at offset {}",
                self.r.offset() - 1
            ))),
        }
    }

    /// A tuple's elements, in order.
    #[inline]
    fn tuple(&mut self, py: Python<'py>, elems: &[Plan]) -> PyResult<Bound<'py, PyTuple>> {
        let items = elems
            .iter()
            .map(|e| self.value(py, e))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, items)
    }

    /// An enum: the variant index, then its payload (a unit variant is its name, others
    /// `{name: payload}`).
    #[inline]
    fn variant(
        &mut self,
        py: Python<'py>,
        variants: &[(Py<PyString>, VariantPlan)],
    ) -> PyResult<Bound<'py, PyAny>> {
        let at = self.r.offset();
        let i = self.r.read_u32().map_err(bad)?;
        let Some((name, v)) = variants.get(i as usize) else {
            return Err(PyValueError::new_err(format!(
                "the payload does not decode: variant {i} at offset {at} (the enum has {})",
                variants.len()
            )));
        };
        Ok(match v {
            VariantPlan::Unit => name.bind(py).clone().into_any(),
            VariantPlan::Tuple(elems) => {
                let d = PyDict::new(py);
                d.set_item(name.bind(py), self.tuple(py, elems)?)?;
                d.into_any()
            }
            VariantPlan::Struct(s) => {
                let d = PyDict::new(py);
                d.set_item(name.bind(py), self.record(py, s)?)?;
                d.into_any()
            }
        })
    }

    /// A map: its length, then each key and value.
    #[inline]
    fn map(&mut self, py: Python<'py>, k: &Plan, v: &Plan) -> PyResult<Bound<'py, PyAny>> {
        let n = self.r.read_len(1).map_err(bad)?;
        let d = PyDict::new(py);
        for _ in 0..n {
            let key = self.value(py, k)?;
            let val = self.value(py, v)?;
            d.set_item(key, val)?;
        }
        Ok(d.into_any())
    }

    /// A tensor: rank, dimensions, element count, then the elements, as a read-only numpy view
    /// over the record's bytes (a memoryview without numpy).
    #[inline]
    fn tensor(&mut self, py: Python<'py>, dtype: DType) -> PyResult<Bound<'py, PyAny>> {
        let r = &mut self.r;
        let at = r.offset();
        let rank = r.read_u64().map_err(bad)?;
        if rank > MAX_RANK {
            return Err(PyValueError::new_err(format!(
                "the payload does not decode: tensor rank {rank} at offset {at}"
            )));
        }
        let mut shape = Vec::with_capacity(rank as usize);
        for _ in 0..rank {
            shape.push(r.read_u64().map_err(bad)?);
        }
        let n = r.read_len(dtype.size_bytes()).map_err(bad)?;
        let expected = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if expected != Some(n as u64) {
            return Err(PyValueError::new_err(format!(
                "the payload does not decode: a tensor of shape {shape:?} holds {n} \
                 elements (offset {at})"
            )));
        }
        let offset = r.offset();
        r.take(n * dtype.size_bytes()).map_err(bad)?;
        if let Some(np) = numpy(py)? {
            // A read-only view (the buffer is `bytes`) whose base is the record's bytes.
            let k = DType::ALL.iter().position(|d| *d == dtype).unwrap_or(0);
            return np.ndarray.bind(py).call1((
                PyTuple::new(py, shape)?,
                np.dtypes[k].bind(py),
                self.data,
                offset,
            ));
        }
        helpers(py)?.call_method1(
            "tensor",
            (
                self.data,
                dtype.numpy(),
                n,
                offset,
                PyTuple::new(py, shape)?,
            ),
        )
    }

    fn list(&mut self, py: Python<'py>, elem: &Plan, n: usize) -> PyResult<Bound<'py, PyAny>> {
        let mut items = Vec::with_capacity(n.min(self.r.remaining() + 1));
        for _ in 0..n {
            items.push(self.value(py, elem)?);
        }
        Ok(PyList::new(py, items)?.into_any())
    }

    fn record(&mut self, py: Python<'py>, s: &StructPlan) -> PyResult<Bound<'py, PyAny>> {
        let mut values = Vec::with_capacity(s.fields.len());
        for f in &s.fields {
            values.push(self.value(py, f)?);
        }
        match &s.cls {
            Some(cls) => cls.bind(py).call1(PyTuple::new(py, values)?),
            None => {
                let d = PyDict::new(py);
                for (k, v) in s.names.iter().zip(values) {
                    d.set_item(k.bind(py), v)?;
                }
                Ok(d.into_any())
            }
        }
    }
}

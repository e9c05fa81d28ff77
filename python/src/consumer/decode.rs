//! Payloads decoded to Python values: the one walk of the wire format
//! ([`snapbus_bus::schemas::walk`]) with a visitor that builds Python objects, and a [`Plan`]
//! per schema (made once) holding the layout and the record classes.
//!
//! Structs become instances of a dataclass made once per schema with
//! `dataclasses.make_dataclass` (a `dict` where a field name is not a Python identifier);
//! unit enum variants their name, other variants `{name: value}`; options `None` or the value;
//! sequences and arrays lists, tuples tuples; maps dicts; tensors read-only numpy views over the
//! record's `bytes` (`memoryview`s without numpy); bytes `bytes`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use snapbus_bus::schemas::walk::{
    Kind, LayoutPlan, Node, NodeId, Scalar, VariantShape, Visit, WalkError, walk,
};
use snapbus_bus::schemas::{DType, DecodeError, SchemaDescriptor, WireReader};

/// How to decode one schema: its layout, and per node what the visitor made of it once.
pub(crate) struct Plan {
    layout: LayoutPlan<'static>,
    /// Per node: a struct's (or struct variant's) record class; `None`: a dict, or not a
    /// struct.
    classes: Vec<Option<Py<PyAny>>>,
    /// Per node: its name as an interned Python string (fields and variants; `""` others).
    names: Vec<Py<PyString>>,
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
    /// The plan of a schema's root type; record classes are named after the schema id, then
    /// the path to the struct (`demo_step_pose` for field `pose` of `demo.step`).
    pub(crate) fn of_schema(py: Python<'_>, schema: &SchemaDescriptor) -> PyResult<Plan> {
        let layout = LayoutPlan::compile(schema.root()).into_owned();
        let n = layout.len();
        let names = (0..n as NodeId)
            .map(|id| PyString::intern(py, layout.node(id).name()).unbind())
            .collect();
        // Class names, top down: a child is named after its parent.
        let mut class_names = vec![String::new(); n];
        class_names[0] = class_name(schema.id());
        for id in 0..n as NodeId {
            let node = layout.node(id);
            for (i, c) in layout.children(id).enumerate() {
                let parent = &class_names[id as usize];
                let child = layout.node(c).name();
                class_names[c as usize] = match node.kind() {
                    Kind::Struct | Kind::Variant(VariantShape::Struct) | Kind::Enum => {
                        format!("{parent}_{child}")
                    }
                    Kind::Tuple => format!("{parent}_{i}"),
                    _ => parent.clone(),
                };
            }
        }
        let mut classes = Vec::with_capacity(n);
        for id in 0..n as NodeId {
            let node = layout.node(id);
            let cls = match node.kind() {
                Kind::Struct | Kind::Variant(VariantShape::Struct) => {
                    let fields = layout.children(id).map(|c| layout.node(c).name());
                    let fields = PyList::new(py, fields)?;
                    let name = &class_names[id as usize];
                    let cls = helpers(py)?.call_method1("record_class", (name, fields))?;
                    (!cls.is_none()).then(|| cls.unbind())
                }
                _ => None,
            };
            classes.push(cls);
        }
        Ok(Plan {
            layout,
            classes,
            names,
        })
    }

    /// Decodes the whole of `data` (a record's payload).
    pub(crate) fn decode(&self, data: &Bound<'_, PyBytes>) -> PyResult<Py<PyAny>> {
        let mut r = WireReader::new(data.as_bytes());
        let mut v = ToPython {
            py: data.py(),
            data,
            plan: self,
        };
        let out = walk(&self.layout, &mut r, &mut v).map_err(|e| e.0)?;
        r.finish().map_err(|e| Failed::from(e).0)?;
        Ok(out.unbind())
    }
}

/// A Python class name for a schema id (`demo.step` → `demo_step`).
fn class_name(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A decode that failed: a `ValueError` for a payload that does not match its descriptor, or
/// whatever Python raised while building the values.
struct Failed(PyErr);

impl From<DecodeError> for Failed {
    fn from(e: DecodeError) -> Failed {
        Failed(PyValueError::new_err(format!(
            "the payload does not decode: {e}"
        )))
    }
}

impl From<PyErr> for Failed {
    fn from(e: PyErr) -> Failed {
        Failed(e)
    }
}

impl From<std::convert::Infallible> for Failed {
    fn from(e: std::convert::Infallible) -> Failed {
        match e {}
    }
}

impl WalkError for Failed {}

/// The visitor that builds Python objects over the record's `bytes`.
struct ToPython<'a, 'py> {
    py: Python<'py>,
    data: &'a Bound<'py, PyBytes>,
    plan: &'a Plan,
}

type Out<'py> = Result<Bound<'py, PyAny>, Failed>;

impl<'py> ToPython<'_, 'py> {
    /// The `len` bytes at `at` (the walk has checked they are there).
    fn span(&self, at: usize, len: usize) -> Result<&[u8], Failed> {
        self.data
            .as_bytes()
            .get(at..at.saturating_add(len))
            .ok_or_else(|| Failed(PyValueError::new_err("the payload does not decode")))
    }

    /// `{name: payload}`.
    fn tagged(&self, name: &Py<PyString>, payload: Bound<'py, PyAny>) -> Out<'py> {
        let d = PyDict::new(self.py);
        d.set_item(name.bind(self.py), payload)?;
        Ok(d.into_any())
    }
}

impl<'py> Visit<'static, WireReader<'_>> for ToPython<'_, 'py> {
    type Out = Bound<'py, PyAny>;
    type Error = Failed;
    type Seq = Vec<Bound<'py, PyAny>>;
    type Record = Vec<Bound<'py, PyAny>>;
    type Map = Bound<'py, PyDict>;

    fn scalar(&mut self, v: Scalar) -> Out<'py> {
        let py = self.py;
        Ok(match v {
            Scalar::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
            Scalar::U8(v) => v.into_pyobject(py)?.into_any(),
            Scalar::U16(v) => v.into_pyobject(py)?.into_any(),
            Scalar::U32(v) => v.into_pyobject(py)?.into_any(),
            Scalar::U64(v) => v.into_pyobject(py)?.into_any(),
            Scalar::U128(v) => v.into_pyobject(py)?.into_any(),
            Scalar::I8(v) => v.into_pyobject(py)?.into_any(),
            Scalar::I16(v) => v.into_pyobject(py)?.into_any(),
            Scalar::I32(v) => v.into_pyobject(py)?.into_any(),
            Scalar::I64(v) => v.into_pyobject(py)?.into_any(),
            Scalar::I128(v) => v.into_pyobject(py)?.into_any(),
            Scalar::F32(v) => f64::from(v).into_pyobject(py)?.into_any(),
            Scalar::F64(v) => v.into_pyobject(py)?.into_any(),
        })
    }

    fn string(&mut self, _: &WireReader<'_>, at: usize, len: usize) -> Out<'py> {
        let s = std::str::from_utf8(self.span(at, len)?).map_err(|e| {
            PyValueError::new_err(format!(
                "the payload does not decode: a string at offset {at} is not UTF-8: {e}"
            ))
        })?;
        Ok(PyString::new(self.py, s).into_any())
    }

    fn bytes(&mut self, _: &WireReader<'_>, at: usize, len: usize) -> Out<'py> {
        Ok(PyBytes::new(self.py, self.span(at, len)?).into_any())
    }

    /// Numbers of a sequence or array: a list of `int`s or `float`s.
    fn packed(&mut self, _: &WireReader<'_>, dtype: DType, at: usize, count: usize) -> Out<'py> {
        let py = self.py;
        let w = dtype.size_bytes();
        let bytes = self.span(at, count.saturating_mul(w))?;
        let mut items = Vec::with_capacity(count);
        for b in bytes.chunks_exact(w) {
            let mut le = [0u8; 8];
            le[..w].copy_from_slice(b);
            items.push(match dtype {
                DType::F32 | DType::F64 => dtype.to_f64(b).into_pyobject(py)?.into_any(),
                d if d.is_signed_int() => {
                    // Sign-extend from the element's width.
                    let shift = 64 - 8 * w as u32;
                    ((i64::from_le_bytes(le) << shift) >> shift)
                        .into_pyobject(py)?
                        .into_any()
                }
                _ => u64::from_le_bytes(le).into_pyobject(py)?.into_any(),
            });
        }
        Ok(PyList::new(py, items)?.into_any())
    }

    /// A tensor: a read-only numpy view over the record's bytes (a memoryview without numpy).
    fn tensor(&mut self, _: &WireReader<'_>, dtype: DType, shape: &[u64], at: usize) -> Out<'py> {
        let py = self.py;
        if let Some(np) = numpy(py)? {
            // A read-only view (the buffer is `bytes`) whose base is the record's bytes.
            let k = DType::ALL.iter().position(|d| *d == dtype).unwrap_or(0);
            return Ok(np.ndarray.bind(py).call1((
                PyTuple::new(py, shape)?,
                np.dtypes[k].bind(py),
                self.data,
                at,
            ))?);
        }
        let n: u64 = shape.iter().product();
        Ok(helpers(py)?.call_method1(
            "tensor",
            (self.data, dtype.numpy(), n, at, PyTuple::new(py, shape)?),
        )?)
    }

    fn option(&mut self, value: Option<Bound<'py, PyAny>>) -> Out<'py> {
        Ok(value.unwrap_or_else(|| self.py.None().into_bound(self.py)))
    }

    fn seq_begin(&mut self, _: &Node<'static>, len: usize) -> Result<Self::Seq, Failed> {
        Ok(Vec::with_capacity(len.min(self.data.as_bytes().len() + 1)))
    }

    fn seq_item(&mut self, seq: &mut Self::Seq, item: Bound<'py, PyAny>) -> Result<(), Failed> {
        seq.push(item);
        Ok(())
    }

    fn seq_end(&mut self, node: &Node<'static>, seq: Self::Seq) -> Out<'py> {
        Ok(match node.kind() {
            Kind::Tuple | Kind::Variant(_) => PyTuple::new(self.py, seq)?.into_any(),
            _ => PyList::new(self.py, seq)?.into_any(),
        })
    }

    fn record_begin(
        &mut self,
        _: NodeId,
        _: &Node<'static>,
        len: usize,
    ) -> Result<Self::Record, Failed> {
        Ok(Vec::with_capacity(len))
    }

    fn field(
        &mut self,
        record: &mut Self::Record,
        _: NodeId,
        _: &Node<'static>,
        value: Bound<'py, PyAny>,
    ) -> Result<(), Failed> {
        record.push(value);
        Ok(())
    }

    fn record_end(&mut self, id: NodeId, _: &Node<'static>, values: Self::Record) -> Out<'py> {
        let py = self.py;
        if let Some(cls) = &self.plan.classes[id as usize] {
            return Ok(cls.bind(py).call1(PyTuple::new(py, values)?)?);
        }
        let d = PyDict::new(py);
        for (c, v) in self.plan.layout.children(id).zip(values) {
            d.set_item(self.plan.names[c as usize].bind(py), v)?;
        }
        Ok(d.into_any())
    }

    fn variant(
        &mut self,
        _: u32,
        id: NodeId,
        _: &Node<'static>,
        payload: Option<Bound<'py, PyAny>>,
    ) -> Out<'py> {
        let name = &self.plan.names[id as usize];
        match payload {
            None => Ok(name.bind(self.py).clone().into_any()),
            Some(p) => self.tagged(name, p),
        }
    }

    fn map_begin(&mut self, _: usize) -> Result<Self::Map, Failed> {
        Ok(PyDict::new(self.py))
    }

    fn map_entry(
        &mut self,
        map: &mut Self::Map,
        key: Bound<'py, PyAny>,
        value: Bound<'py, PyAny>,
    ) -> Result<(), Failed> {
        map.set_item(key, value)?;
        Ok(())
    }

    fn map_end(&mut self, map: Self::Map) -> Out<'py> {
        Ok(map.into_any())
    }
}

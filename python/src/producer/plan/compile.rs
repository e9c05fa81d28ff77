//! Compiling plans: the plan `snapbus.schema` walks out of a class's annotations, made into a
//! [`Node`] tree and its validated [`SchemaDescriptor`], checked against the layouts this
//! process registered before, and cached per class (thread-local first, then process-wide).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};
use snapbus::schemas::{DType, Field, SchemaDescriptor, TypeDesc, Variant, check_compatible};

use super::{Compiled, Int, Node};

fn dtype_named(name: &str) -> PyResult<DType> {
    DType::ALL
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| PyTypeError::new_err(format!("unknown dtype {name:?}")))
}

/// Compiles a plan node (see `snapbus/schema.py`) into a [`Node`] and its [`TypeDesc`].
fn compile_node(py: Python<'_>, plan: &Bound<'_, PyAny>) -> PyResult<(Node, TypeDesc)> {
    let t = plan.cast::<PyTuple>()?;
    let kind: String = t.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "bool" => (Node::Bool, TypeDesc::Bool),
        "int" => {
            let name: String = t.get_item(1)?.extract()?;
            let (k, d) = match name.as_str() {
                "u8" => (Int::U8, TypeDesc::U8),
                "u16" => (Int::U16, TypeDesc::U16),
                "u32" => (Int::U32, TypeDesc::U32),
                "u64" => (Int::U64, TypeDesc::U64),
                "i8" => (Int::I8, TypeDesc::I8),
                "i16" => (Int::I16, TypeDesc::I16),
                "i32" => (Int::I32, TypeDesc::I32),
                "i64" => (Int::I64, TypeDesc::I64),
                other => return Err(PyTypeError::new_err(format!("unknown int {other:?}"))),
            };
            (Node::Int(k), d)
        }
        "float" => {
            let name: String = t.get_item(1)?.extract()?;
            if name == "f32" {
                (Node::F32, TypeDesc::F32)
            } else {
                (Node::F64, TypeDesc::F64)
            }
        }
        "str" => (Node::Str, TypeDesc::String),
        "bytes" => (Node::Bytes, TypeDesc::Bytes),
        "enum" => {
            let names: Vec<String> = t.get_item(1)?.extract()?;
            let map = t.get_item(2)?.cast_into::<PyDict>()?.unbind();
            let variants = names.iter().map(Variant::unit).collect();
            (Node::Enum(map, names), TypeDesc::Enum { variants })
        }
        "option" => {
            let (n, d) = compile_node(py, &t.get_item(1)?)?;
            (
                Node::Option(Box::new(n)),
                TypeDesc::Option { some: Box::new(d) },
            )
        }
        "seq" => {
            let (n, d) = compile_node(py, &t.get_item(1)?)?;
            (Node::Seq(Box::new(n)), TypeDesc::Seq { elem: Box::new(d) })
        }
        "tuple" => {
            let mut nodes = Vec::new();
            let mut descs = Vec::new();
            for e in t.get_item(1)?.try_iter()? {
                let (n, d) = compile_node(py, &e?)?;
                nodes.push(n);
                descs.push(d);
            }
            (Node::Tuple(nodes), TypeDesc::Tuple { elems: descs })
        }
        "map" => {
            let (kn, kd) = compile_node(py, &t.get_item(1)?)?;
            let (vn, vd) = compile_node(py, &t.get_item(2)?)?;
            (
                Node::Map(Box::new(kn), Box::new(vn)),
                TypeDesc::Map {
                    key: Box::new(kd),
                    value: Box::new(vd),
                },
            )
        }
        "struct" => {
            let mut nodes = Vec::new();
            let mut fields = Vec::new();
            for f in t.get_item(1)?.try_iter()? {
                let f = f?;
                let f = f.cast::<PyTuple>()?;
                let name: String = f.get_item(0)?.extract()?;
                let since: u32 = f.get_item(1)?.extract()?;
                let (n, d) = compile_node(py, &f.get_item(2)?)?;
                nodes.push((PyString::intern(py, &name).unbind(), n));
                fields.push(Field::since(name, d, since));
            }
            (Node::Struct(nodes), TypeDesc::Struct { fields })
        }
        "tensor" => {
            let d = dtype_named(&t.get_item(1)?.extract::<String>()?)?;
            (Node::Tensor(d), TypeDesc::Tensor { dtype: d })
        }
        other => return Err(PyTypeError::new_err(format!("unknown plan node {other:?}"))),
    })
}

/// Every class compiled in this process (holding the class, so its address stays unique).
static PLANS: Mutex<Vec<(Py<PyType>, Arc<Compiled>)>> = Mutex::new(Vec::new());
/// The descriptors (and the classes that made them) registered in this process, by schema id.
type Layouts = HashMap<String, Vec<(SchemaDescriptor, String)>>;
/// For the "changed under the same version" and evolution checks.
static LAYOUTS: Mutex<Option<Layouts>> = Mutex::new(None);

thread_local! {
    /// (class address, plan), most recently used first: the lock-free first level.
    static LOCAL: std::cell::RefCell<Vec<(usize, Arc<Compiled>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The compiled plan of `cls`, compiling it on first use (`TypeError` for a class that cannot
/// be a schema, naming the field).
pub(crate) fn plan_for(cls: &Bound<'_, PyType>) -> PyResult<Arc<Compiled>> {
    let key = cls.as_ptr() as usize;
    let hit = LOCAL.with(|l| {
        let l = l.borrow();
        l.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, p)| Arc::clone(p))
    });
    if let Some(p) = hit {
        return Ok(p);
    }
    let plan = shared_plan(cls)?;
    LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        l.insert(0, (key, Arc::clone(&plan)));
        l.truncate(64);
    });
    Ok(plan)
}

/// The process-wide level: compiled once per class (a class compiled by two threads at once
/// keeps the first plan stored).
fn shared_plan(cls: &Bound<'_, PyType>) -> PyResult<Arc<Compiled>> {
    {
        let plans = PLANS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, p)) = plans.iter().find(|(c, _)| c.is(cls)) {
            return Ok(Arc::clone(p));
        }
    }
    let compiled = Arc::new(compile(cls)?);
    let mut plans = PLANS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = plans.iter().find(|(c, _)| c.is(cls)) {
        return Ok(Arc::clone(p));
    }
    plans.push((cls.clone().unbind(), Arc::clone(&compiled)));
    Ok(compiled)
}

/// Walks `cls` (Python) and compiles the result (Rust): descriptor validated, layout checked
/// against what this process already registered under the same id and version.
fn compile(cls: &Bound<'_, PyType>) -> PyResult<Compiled> {
    let py = cls.py();
    let walked = py
        .import("snapbus.schema")?
        .getattr("plan_of")?
        .call1((cls,))?;
    let (id, version, root): (String, u32, Bound<'_, PyAny>) = walked.extract()?;
    let class = cls.qualname()?.to_string();
    let (node, desc) = compile_node(py, &root)?;
    let desc = SchemaDescriptor::new(id.clone(), version, desc)
        .map_err(|e| PyTypeError::new_err(format!("{class}: not a valid schema: {e}")))?;
    check_layout(&desc, &class)?;
    Ok(Compiled {
        desc,
        root: node,
        class,
        class_id: cls.as_ptr() as usize,
    })
}

/// Refuses a descriptor that this process registered before under the same id with a layout
/// the evolution rules do not allow: a different layout under the same version (a notebook
/// cell re-defining a class), or versions that are not "fields appended, with `since`".
fn check_layout(desc: &SchemaDescriptor, class: &str) -> PyResult<()> {
    let mut layouts = LAYOUTS.lock().unwrap_or_else(|p| p.into_inner());
    let known = layouts
        .get_or_insert_with(HashMap::new)
        .entry(desc.id().to_owned())
        .or_default();
    let (id, version) = (desc.id(), desc.version());
    for (other, other_class) in known.iter() {
        if other.version() == version && other.fingerprint() != desc.fingerprint() {
            return Err(PyTypeError::new_err(format!(
                "{class}: schema {id:?} version {version} was already registered in this \
                 process by {other_class} with a different layout (fingerprint {:016x}, now \
                 {:016x}); changing a schema's fields needs a new schema_version (append \
                 fields with defaults and field(metadata={{\"since\": N}})) or a new schema_id",
                other.fingerprint(),
                desc.fingerprint()
            )));
        }
        if other.version() != version {
            let (old, new) = if other.version() < version {
                (other, desc)
            } else {
                (desc, other)
            };
            if let Err(e) = check_compatible(new, old) {
                return Err(PyTypeError::new_err(format!(
                    "{class}: schema {id:?} version {version} does not evolve from version {} \
                     ({other_class}) by the rules (fields only appended, each with \
                     field(metadata={{\"since\": N}})): {e}",
                    other.version()
                )));
            }
        }
    }
    if !known
        .iter()
        .any(|(d, _)| d.fingerprint() == desc.fingerprint())
    {
        known.push((desc.clone(), class.to_owned()));
    }
    Ok(())
}

//! Compiling plans: the descriptor `snapbus.schema` walks out of a class's annotations (in
//! `TypeDesc`'s serde JSON, typed in `snapbus/core_schema.py`), deserialised, validated into a
//! [`SchemaDescriptor`], made into a [`Node`] tree, checked against the layouts this process
//! registered before, and cached per class (thread-local first, then process-wide).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyType};
use snapbus::schemas::walk::{Kind, LayoutPlan, NodeId, VariantShape};
use snapbus::schemas::{SchemaDescriptor, TypeDesc, check_compatible};

use super::{Compiled, Node};

/// What `snapbus.schema.plan_of` returns (typed in `snapbus/core_schema.py`): the descriptor
/// in `TypeDesc`'s serde JSON, and per enum node, depth-first, the dict of the Python values
/// that encode as each variant index.
struct Walked<'py> {
    schema: WalkedSchema,
    enums: Bound<'py, PyList>,
}

/// `SchemaDescriptor`'s JSON less its fingerprint (`snapbus.core_schema.SchemaDesc`).
struct WalkedSchema {
    id: String,
    version: u32,
    root: TypeDesc,
}

impl<'py> Walked<'py> {
    /// Reads `plan_of`'s result (a bad one is this module's bug, reported as a `TypeError`).
    fn read(walked: &Bound<'py, PyAny>, class: &str) -> PyResult<Walked<'py>> {
        let py = walked.py();
        let schema = walked.get_item("schema")?;
        let id: String = schema.get_item("id")?.extract()?;
        let version: u32 = schema.get_item("version")?.extract()?;
        let json: String = py
            .import("json")?
            .getattr("dumps")?
            .call1((schema.get_item("root")?,))?
            .extract()?;
        let root = serde_json::from_str(&json).map_err(|e| {
            PyTypeError::new_err(format!(
                "{class}: snapbus.schema made a bad descriptor: {e}"
            ))
        })?;
        let schema = WalkedSchema { id, version, root };
        let enums = walked.get_item("enums")?.cast_into::<PyList>()?;
        Ok(Walked { schema, enums })
    }
}

/// Builds the encode plan of node `id` of `plan` (the descriptor's layout), taking the enum
/// nodes' value dicts from `enums` in depth-first order. Only the types `snapbus.schema` makes
/// have an encode plan.
fn node_of(
    py: Python<'_>,
    plan: &LayoutPlan<'_>,
    id: NodeId,
    enums: &mut EnumValues<'_, '_>,
) -> PyResult<Node> {
    let sub = |i: usize, enums: &mut EnumValues<'_, '_>| {
        node_of(py, plan, plan.child(id, i), enums).map(Box::new)
    };
    Ok(match plan.node(id).kind() {
        Kind::Bool => Node::Bool,
        Kind::Num(dtype) => Node::Num(dtype),
        Kind::Str => Node::Str,
        Kind::Bytes => Node::Bytes,
        Kind::Enum => {
            let mut names = Vec::new();
            for v in plan.children(id).map(|v| plan.node(v)) {
                if v.kind() != Kind::Variant(VariantShape::Unit) {
                    return Err(no_plan(v.kind()));
                }
                names.push(v.name().to_owned());
            }
            Node::Enum(enums.next()?, names)
        }
        Kind::Option => Node::Option(sub(0, enums)?),
        Kind::Seq => Node::Seq(sub(0, enums)?),
        Kind::Map => Node::Map(sub(0, enums)?, sub(1, enums)?),
        Kind::Tuple => Node::Tuple(
            plan.children(id)
                .map(|c| node_of(py, plan, c, enums))
                .collect::<PyResult<_>>()?,
        ),
        Kind::Struct => Node::Struct(
            plan.children(id)
                .map(|c| {
                    let name = PyString::intern(py, plan.node(c).name()).unbind();
                    Ok((name, node_of(py, plan, c, enums)?))
                })
                .collect::<PyResult<_>>()?,
        ),
        Kind::Tensor(dtype) => Node::Tensor(dtype),
        Kind::Dynamic => Node::Dynamic,
        other => return Err(no_plan(other)),
    })
}

fn no_plan(kind: Kind) -> PyErr {
    PyTypeError::new_err(format!("{kind:?} has no Python encoding"))
}

/// The enum nodes' value dicts of a walk, taken in order.
struct EnumValues<'a, 'py> {
    list: &'a Bound<'py, PyList>,
    next: usize,
}

impl EnumValues<'_, '_> {
    fn next(&mut self) -> PyResult<Py<PyDict>> {
        let item = self.list.get_item(self.next).map_err(|_| {
            PyTypeError::new_err("snapbus.schema gave fewer enum value maps than enums")
        })?;
        self.next += 1;
        Ok(item.cast_into::<PyDict>()?.unbind())
    }
}

/// Every class compiled in this process (holding the class, so its address stays unique).
static PLANS: Mutex<Vec<(Py<PyType>, Arc<Compiled>)>> = Mutex::new(Vec::new());
/// The descriptors (and the classes that made them) registered in this process, by schema id.
type Layouts = HashMap<String, Vec<(SchemaDescriptor, String)>>;
/// For the "changed under the same version" and evolution checks.
static LAYOUTS: Mutex<Option<Layouts>> = Mutex::new(None);

/// The compiled plan of a dataclass `cls`, compiled once per class, process-wide
/// (`TypeError` for a class that cannot be a schema, naming the field; a class compiled by
/// two threads at once keeps the first plan stored). `event_class` caches its result.
pub(crate) fn plan_for(cls: &Bound<'_, PyType>) -> PyResult<Arc<Compiled>> {
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

/// Walks `cls` (Python: its descriptor) and compiles the result (Rust: the encode plan built
/// from that descriptor), validated and checked against what this process already registered
/// under the same id and version.
fn compile(cls: &Bound<'_, PyType>) -> PyResult<Compiled> {
    let walked = cls
        .py()
        .import("snapbus.schema")?
        .getattr("plan_of")?
        .call1((cls,))?;
    compile_walked(cls, &walked, true)
}

/// Compiles a walk of `cls` (`snapbus.schema.plan_of`'s result); with `check`, refuses a
/// layout that does not fit those this process registered under its id.
pub(super) fn compile_walked(
    cls: &Bound<'_, PyType>,
    walked: &Bound<'_, PyAny>,
    check: bool,
) -> PyResult<Compiled> {
    let py = cls.py();
    let class = cls.qualname()?.to_string();
    let Walked { schema, enums } = Walked::read(walked, &class)?;
    let desc = SchemaDescriptor::new(schema.id, schema.version, schema.root)
        .map_err(|e| PyTypeError::new_err(format!("{class}: not a valid schema: {e}")))?;
    let mut values = EnumValues {
        list: &enums,
        next: 0,
    };
    let node = node_of(
        py,
        &LayoutPlan::compile(desc.root()),
        LayoutPlan::ROOT,
        &mut values,
    )
    .map_err(|e| PyTypeError::new_err(format!("{class}: {}", e.value(py))))?;
    let mut refused = None;
    if check {
        check_layout(&desc, &class)?;
        refused = check_bus(&desc, &class);
    }
    Ok(Compiled {
        desc,
        root: node,
        class,
        class_id: cls.as_ptr() as usize,
        refused,
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

/// Why `desc` may not be emitted next to the descriptors of its id that the bus already knows
/// (other processes registered them: a class changed without a new `schema_version`, or a
/// version that does not evolve from the one on the bus), if it may not. The same rule as the
/// broker's CONFLICT ([`snapbus_bus::publisher::evolution_conflict`]).
fn check_bus(desc: &SchemaDescriptor, class: &str) -> Option<String> {
    snapbus::bus_descriptors(desc.id())
        .iter()
        .find_map(|other| snapbus_bus::publisher::evolution_conflict(desc, other))
        .map(|why| format!("{class}: {why}"))
}

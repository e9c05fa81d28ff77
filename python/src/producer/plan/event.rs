//! Events by class: a dataclass has one plan (and one per schema prefix); a pydantic model or
//! a `dict` event has one per *shape*: its prefix, its schema id (a `kind` read from the
//! instance) and the names of its extra fields, each compiled once. The shapes of a class are
//! compared by the identity of their `str` objects first (extras' keys are usually the same
//! interned names on every call), then by their text.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyType};
use smallvec::SmallVec;

use super::Compiled;
use super::compile::{compile_walked, plan_for};

/// The extra fields of one event (pass 1 encodes them after the plan's struct), in order.
pub(crate) type Extras<'py> = SmallVec<[(Bound<'py, PyString>, Bound<'py, PyAny>); 8]>;

/// What kind of event a class makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Dataclass,
    Model,
    Dict,
}

/// A class seen as an event (decided once per class by `snapbus.schema.event_kind`).
pub(crate) struct EventClass {
    how: How,
    class: Py<PyType>,
    /// A dataclass's plan (without a prefix): the hot path.
    fixed: Option<Arc<Compiled>>,
    /// The `schema_id` ClassVar (a dataclass's always; a model's if it has one).
    schema_id: Option<Py<PyString>>,
    /// The class's `__name__`: the id of a model with neither `schema_id` nor `kind`.
    name: Py<PyString>,
    shapes: Mutex<Vec<Shape>>,
}

/// One compiled shape of a class.
struct Shape {
    prefix: String,
    /// The schema id before the prefix.
    id: Py<PyString>,
    extras: Vec<Py<PyString>>,
    plan: Arc<Compiled>,
}

/// Whether two `str` objects hold the same text (the same object, the common case, first).
#[inline]
fn same(a: &Py<PyString>, b: &Bound<'_, PyString>) -> bool {
    a.is(b) || a.bind(b.py()).to_cow().ok() == b.to_cow().ok()
}

impl Shape {
    #[inline]
    fn matches(&self, prefix: &str, id: &Bound<'_, PyString>, extras: &Extras<'_>) -> bool {
        self.extras.len() == extras.len()
            && same(&self.id, id)
            && self.prefix == prefix
            && self.extras.iter().zip(extras).all(|(a, (b, _))| same(a, b))
    }
}

/// Every class seen as an event in this process (holding the class: its address stays unique).
static CLASSES: Mutex<Vec<(Py<PyType>, Arc<EventClass>)>> = Mutex::new(Vec::new());

thread_local! {
    /// (class address, event class), most recently added first: the lock-free first level.
    static LOCAL: std::cell::RefCell<Vec<(usize, Arc<EventClass>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The event class of `cls` (`TypeError` for a class whose instances are not events).
#[inline]
pub(crate) fn event_class(cls: &Bound<'_, PyType>) -> PyResult<Arc<EventClass>> {
    let key = cls.as_ptr() as usize;
    let hit = LOCAL.with(|l| {
        l.borrow()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, c)| Arc::clone(c))
    });
    if let Some(c) = hit {
        return Ok(c);
    }
    let c = shared_class(cls)?;
    LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        l.insert(0, (key, Arc::clone(&c)));
        l.truncate(64);
    });
    Ok(c)
}

fn shared_class(cls: &Bound<'_, PyType>) -> PyResult<Arc<EventClass>> {
    {
        let classes = CLASSES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, c)) = classes.iter().find(|(k, _)| k.is(cls)) {
            return Ok(Arc::clone(c));
        }
    }
    let py = cls.py();
    let (how, schema_id): (String, Option<Py<PyString>>) = py
        .import("snapbus.schema")?
        .getattr("event_kind")?
        .call1((cls,))?
        .extract()?;
    let how = match how.as_str() {
        "dataclass" => How::Dataclass,
        "model" => How::Model,
        _ => How::Dict,
    };
    let fixed = match how {
        How::Dataclass => Some(plan_for(cls)?),
        _ => None,
    };
    let c = Arc::new(EventClass {
        how,
        class: cls.clone().unbind(),
        fixed,
        schema_id,
        name: cls.name()?.unbind(),
        shapes: Mutex::new(Vec::new()),
    });
    let mut classes = CLASSES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, c)) = classes.iter().find(|(k, _)| k.is(cls)) {
        return Ok(Arc::clone(c));
    }
    classes.push((cls.clone().unbind(), Arc::clone(&c)));
    Ok(c)
}

impl EventClass {
    /// A dataclass's plan, when no prefix is asked for.
    #[inline]
    pub(crate) fn fixed(&self) -> Option<&Arc<Compiled>> {
        self.fixed.as_ref()
    }

    /// The plan of `obj`'s shape under `prefix` (compiled on its first use), its extra fields
    /// collected into `extras`.
    pub(crate) fn shape<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        prefix: &str,
        extras: &mut Extras<'py>,
    ) -> PyResult<Arc<Compiled>> {
        let id = self.id_and_extras(obj, extras)?;
        {
            let shapes = self.shapes.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = shapes.iter().find(|s| s.matches(prefix, &id, extras)) {
                return Ok(Arc::clone(&s.plan));
            }
        }
        let plan = Arc::new(self.compile(obj.py(), prefix, &id, extras)?);
        let mut shapes = self.shapes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = shapes.iter().find(|s| s.matches(prefix, &id, extras)) {
            return Ok(Arc::clone(&s.plan));
        }
        shapes.push(Shape {
            prefix: prefix.to_owned(),
            id: id.unbind(),
            extras: extras.iter().map(|(k, _)| k.clone().unbind()).collect(),
            plan: Arc::clone(&plan),
        });
        Ok(plan)
    }

    /// The schema id of `obj` (before any prefix), its extras pushed onto `extras`.
    fn id_and_extras<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        extras: &mut Extras<'py>,
    ) -> PyResult<Bound<'py, PyString>> {
        let py = obj.py();
        match self.how {
            How::Dict => dict_event(obj.cast::<PyDict>()?, extras),
            How::Model => {
                if let Ok(Some(extra)) = obj
                    .getattr(intern!(py, "__pydantic_extra__"))
                    .map(|e| e.cast_into::<PyDict>().ok())
                {
                    for (k, v) in extra.iter() {
                        extras.push((k.cast_into::<PyString>()?, v));
                    }
                }
                if let Some(id) = &self.schema_id {
                    return Ok(id.bind(py).clone());
                }
                match obj.getattr(intern!(py, "kind")) {
                    Ok(kind) if kind.is_instance_of::<PyString>() => {
                        Ok(kind.cast_into::<PyString>()?)
                    }
                    _ => Ok(self.name.bind(py).clone()),
                }
            }
            How::Dataclass => Ok(self
                .schema_id
                .as_ref()
                .unwrap_or(&self.name)
                .bind(py)
                .clone()),
        }
    }

    /// Walks (Python) and compiles (Rust) one shape.
    fn compile(
        &self,
        py: Python<'_>,
        prefix: &str,
        id: &Bound<'_, PyString>,
        extras: &Extras<'_>,
    ) -> PyResult<Compiled> {
        let names = PyList::new(py, extras.iter().map(|(k, _)| k))?;
        let full = format!("{prefix}{}", id.to_cow()?);
        let cls = self.class.bind(py);
        let walked = py
            .import("snapbus.schema")?
            .getattr("plan_of")?
            .call1((cls, full, names))?;
        // A dataclass's layout is checked against the others of its id; a model's or dict's
        // comes from its extras, and several shapes of one id are expected.
        let mut plan = compile_walked(cls, &walked, self.how == How::Dataclass)?;
        // The extras are the root's last fields: pass 1 takes their values from `extras`.
        if let super::Node::Struct(fields) = &mut plan.root {
            fields.truncate(fields.len().saturating_sub(extras.len()));
        }
        Ok(plan)
    }
}

/// A `dict` event: its `"kind"` (a `str`) is the schema id, every other entry an extra.
fn dict_event<'py>(
    d: &Bound<'py, PyDict>,
    extras: &mut Extras<'py>,
) -> PyResult<Bound<'py, PyString>> {
    let mut kind = None;
    for (k, v) in d.iter() {
        let k = k.cast_into::<PyString>().map_err(|e| {
            PyTypeError::new_err(format!(
                "a dict event's keys are field names (str), not {}",
                e.into_inner()
                    .repr()
                    .map_or_else(|_| "?".into(), |r| r.to_string())
            ))
        })?;
        if k.to_cow()? == "kind" {
            kind = Some(v.cast_into::<PyString>().map_err(|e| {
                PyTypeError::new_err(format!(
                    "a dict event's \"kind\" is its schema id, a str, not {}",
                    e.into_inner()
                        .repr()
                        .map_or_else(|_| "?".into(), |r| r.to_string())
                ))
            })?);
        } else {
            extras.push((k, v));
        }
    }
    kind.ok_or_else(|| {
        PyTypeError::new_err(
            "a dict event needs a \"kind\" key: its schema id (e.g. {\"kind\": \"lab.step\", ...})",
        )
    })
}

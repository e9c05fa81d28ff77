//! The descriptors the bus knows of a schema id ([`Publisher::bus_descriptors`]), and when two
//! descriptors of one schema id and version are one event's shapes rather than a
//! conflict. A pydantic model's or a `dict` event's extras become the root's last fields, of
//! the dynamic type, so one event has a descriptor per set of extras: those may differ in
//! their trailing dynamic fields only. Anything else under one (id, version) — a typed field
//! added, removed, renamed or retyped — is a conflict: the broker shows it (`ls` CONFLICT) and
//! a Python producer refuses to emit it. One rule for both.

use std::time::Duration;

use snapbus_schemas::{SchemaDescriptor, TypeDesc};

use super::Publisher;

impl Publisher {
    /// The descriptors the bus knows under schema `id` (other processes' too), asked of its
    /// broker, waiting up to `timeout` (`None`: no broker answered): what a new layout is
    /// checked against before its first record ([`evolution_conflict`]).
    pub fn bus_descriptors(&self, id: &str, timeout: Duration) -> Option<Vec<SchemaDescriptor>> {
        let p = self.existing().unwrap_or(self);
        crate::client::BusClient::connect(&p.inner.dir)
            .ok()?
            .with_timeout(timeout)
            .descriptors(id)
            .ok()
    }
}

/// Whether `a` and `b` (root types of one schema id and version) are shapes of one event:
/// equal, or structs that agree field by field as far as both go, with only dynamic fields past
/// that.
pub fn shapes_of_one_event(a: &TypeDesc, b: &TypeDesc) -> bool {
    if a == b {
        return true;
    }
    let (TypeDesc::Struct { fields: fa }, TypeDesc::Struct { fields: fb }) = (a, b) else {
        return false;
    };
    // The same fields as far as they agree; past that, only dynamic fields (extras, in any
    // number) in either.
    let common = fa.iter().zip(fb).take_while(|(x, y)| x == y).count();
    let extras = |rest: &[snapbus_schemas::Field]| rest.iter().all(|f| f.ty == TypeDesc::Dynamic);
    extras(&fa[common..]) && extras(&fb[common..])
}

/// Why `desc` cannot be emitted next to `other` (a descriptor of the same id that the bus
/// already knows), by the evolution rules, or `None` if it can: the same version must be the
/// same layout (up to an event's extras, [`shapes_of_one_event`]); another version must
/// evolve from the older one (fields only appended, each with `since`).
pub fn evolution_conflict(desc: &SchemaDescriptor, other: &SchemaDescriptor) -> Option<String> {
    if other.fingerprint() == desc.fingerprint() {
        return None;
    }
    if other.version() == desc.version() {
        if shapes_of_one_event(other.root(), desc.root()) {
            return None;
        }
        return Some(format!(
            "schema {:?} version {} is on the bus with another layout ({}), not this one ({}): \
             a changed layout needs a new schema_version (fields appended with defaults and \
             field(metadata={{\"since\": N}})) or a new schema_id",
            desc.id(),
            desc.version(),
            other.root(),
            desc.root()
        ));
    }
    let (old, new) = if other.version() < desc.version() {
        (other, desc)
    } else {
        (desc, other)
    };
    snapbus_schemas::check_compatible(new, old).err().map(|e| {
        format!(
            "schema {:?} version {} does not evolve from version {} on the bus by the rules \
             (fields only appended, each with field(metadata={{\"since\": N}})): {e}; version \
             {}: {}, version {}: {}",
            desc.id(),
            new.version(),
            old.version(),
            old.version(),
            old.root(),
            new.version(),
            new.root()
        )
    })
}

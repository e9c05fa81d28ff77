//! The [`Snapshot`] trait, schema evolution and the schema registry.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::cursor::WireReader;
use crate::desc::{Field, TypeDesc};
use crate::error::{DecodeError, DecodeErrorKind, DescriptorError, IncompatibleSchema};
use crate::schema::SchemaDescriptor;
use crate::value::ToValue;
use crate::wire::Wire;

/// A schema-versioned event type: what a producer emits.
///
/// Derive it: `#[derive(Snapshot)]` with `#[snapshot(id = "…", version = N)]` on a struct with
/// named fields. Fields appended in a later version carry `#[snapshot(since = N)]` and,
/// optionally, `default = expr` (otherwise `Default::default()`), used when reading payloads of
/// older versions. Nested types derive [`Wire`].
pub trait Snapshot: Wire + ToValue {
    /// The stable schema id (`"monty.env_interface.step"`).
    const SCHEMA_ID: &'static str;
    /// The schema version this type writes.
    const VERSION: u32;

    /// The descriptor (built once per process).
    fn descriptor() -> &'static SchemaDescriptor;

    /// Reads the fields of a payload written by version `writer_version`: fields introduced
    /// after it get their defaults, and the caller ignores trailing fields of newer versions.
    /// Use [`decode_versioned`] rather than calling this.
    #[doc(hidden)]
    fn decode_fields_of(r: &mut WireReader<'_>, writer_version: u32) -> Result<Self, DecodeError>;
}

/// Decodes a payload that was written by schema version `writer_version` of `T`'s schema.
///
/// - Same version: the payload must be exactly one value.
/// - Older writer: fields appended after `writer_version` take their defaults.
/// - Newer writer: the fields `T` knows are read and the appended ones are skipped.
///
/// The caller is responsible for knowing that the writer's schema is an evolution of `T`'s
/// (same id, append-only): check the writer's descriptor once with [`check_compatible`], or let
/// the bus do it at registration. See the crate docs, "Evolution".
pub fn decode_versioned<T: Snapshot>(bytes: &[u8], writer_version: u32) -> Result<T, DecodeError> {
    if writer_version == 0 {
        return Err(DecodeError::new(
            0,
            DecodeErrorKind::Version {
                expected: T::VERSION,
                found: writer_version,
            },
        ));
    }
    let mut r = WireReader::new(bytes);
    let value = T::decode_fields_of(&mut r, writer_version)?;
    if writer_version <= T::VERSION {
        r.finish()?;
    }
    Ok(value)
}

/// Checks that a reader holding schema `reader` can read payloads written with schema
/// `writer`, by the evolution rules: same id; same version means identical layout; different
/// versions mean the newer root struct is the older one with fields appended, each appended
/// field introduced (`since`) after the older version.
pub fn check_compatible(
    reader: &SchemaDescriptor,
    writer: &SchemaDescriptor,
) -> Result<(), IncompatibleSchema> {
    if reader.id() != writer.id() {
        return Err(IncompatibleSchema::DifferentId {
            reader: reader.id().to_owned(),
            writer: writer.id().to_owned(),
        });
    }
    if reader.version() == writer.version() {
        return match first_difference(reader.root(), writer.root(), "") {
            None => Ok(()),
            Some(difference) => Err(IncompatibleSchema::Conflict {
                id: reader.id().to_owned(),
                version: reader.version(),
                fingerprint_a: reader.fingerprint(),
                fingerprint_b: writer.fingerprint(),
                difference,
            }),
        };
    }
    let (older, newer) = if reader.version() < writer.version() {
        (reader, writer)
    } else {
        (writer, reader)
    };
    let not_append_only = |difference: String| IncompatibleSchema::NotAppendOnly {
        id: reader.id().to_owned(),
        older: older.version(),
        newer: newer.version(),
        difference,
    };
    let (TypeDesc::Struct { fields: old }, TypeDesc::Struct { fields: new }) =
        (older.root(), newer.root())
    else {
        return match first_difference(older.root(), newer.root(), "") {
            None => Ok(()),
            Some(d) => Err(not_append_only(format!(
                "{d}; only struct roots can evolve"
            ))),
        };
    };
    for (i, (o, n)) in old.iter().zip(new).enumerate() {
        if o.name != n.name {
            return Err(not_append_only(format!(
                "field {i} is `{}` in v{} but `{}` in v{}",
                o.name,
                older.version(),
                n.name,
                newer.version()
            )));
        }
        if let Some(d) = first_difference(&o.ty, &n.ty, &o.name) {
            return Err(not_append_only(d));
        }
        if o.since != n.since {
            return Err(not_append_only(format!(
                "field `{}` has since = {} in v{} but {} in v{}",
                o.name,
                o.since,
                older.version(),
                n.since,
                newer.version()
            )));
        }
    }
    if new.len() < old.len() {
        return Err(not_append_only(format!(
            "v{} has {} fields, v{} only {}; fields cannot be removed",
            older.version(),
            old.len(),
            newer.version(),
            new.len()
        )));
    }
    if let Some(f) = new[old.len()..].iter().find(|f| f.since <= older.version()) {
        return Err(not_append_only(format!(
            "field `{}` was appended after v{} but has since = {}; mark it #[snapshot(since = {})]",
            f.name,
            older.version(),
            f.since,
            newer.version()
        )));
    }
    Ok(())
}

/// Describes the first place where two type descriptors differ (`None` if they are equal).
pub fn first_difference(a: &TypeDesc, b: &TypeDesc, path: &str) -> Option<String> {
    if a == b {
        return None;
    }
    let at = if path.is_empty() { "<root>" } else { path };
    let join = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    let fields_diff = |fa: &[Field], fb: &[Field]| -> Option<String> {
        for (x, y) in fa.iter().zip(fb) {
            if x.name != y.name {
                return Some(format!(
                    "`{}`: field `{}` vs field `{}`",
                    at, x.name, y.name
                ));
            }
            if x.since != y.since {
                return Some(format!(
                    "`{}`: since = {} vs since = {}",
                    join(&x.name),
                    x.since,
                    y.since
                ));
            }
            if let Some(d) = first_difference(&x.ty, &y.ty, &join(&x.name)) {
                return Some(d);
            }
        }
        let mut s = String::new();
        let _ = write!(s, "`{at}`: {} fields vs {} fields", fa.len(), fb.len());
        Some(s)
    };
    match (a, b) {
        (TypeDesc::Struct { fields: fa }, TypeDesc::Struct { fields: fb }) => fields_diff(fa, fb),
        (TypeDesc::Option { some: x }, TypeDesc::Option { some: y })
        | (TypeDesc::Seq { elem: x }, TypeDesc::Seq { elem: y }) => first_difference(x, y, path),
        (TypeDesc::Array { len: la, elem: x }, TypeDesc::Array { len: lb, elem: y })
            if la == lb =>
        {
            first_difference(x, y, path)
        }
        _ => Some(format!("`{at}`: {a} vs {b}")),
    }
}

/// A descriptor was refused by [`SchemaRegistry::register`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The descriptor itself is malformed.
    #[error(transparent)]
    Invalid(#[from] DescriptorError),
    /// It conflicts with a registered descriptor of the same schema id.
    #[error(transparent)]
    Incompatible(#[from] IncompatibleSchema),
}

/// Whether a registration added a new schema or found it already known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// First time this `(id, version)` was seen.
    New,
    /// The identical descriptor was already registered.
    Known,
}

/// The schemas known to a bus or a file: `(id, version)` → descriptor.
///
/// Refuses a descriptor that disagrees with one already registered under the same
/// `(id, version)`, and a version that is not an append-only evolution of the versions already
/// registered for its id, so that two producers can never silently mix layouts.
#[derive(Debug, Clone, Default)]
pub struct SchemaRegistry {
    schemas: BTreeMap<(String, u32), SchemaDescriptor>,
}

impl SchemaRegistry {
    /// An empty registry.
    pub fn new() -> SchemaRegistry {
        SchemaRegistry::default()
    }

    /// Registers a descriptor after validating it.
    pub fn register(&mut self, desc: SchemaDescriptor) -> Result<Registered, RegisterError> {
        desc.validate()?;
        let key = (desc.id().to_owned(), desc.version());
        if let Some(existing) = self.schemas.get(&key) {
            check_compatible(existing, &desc)?;
            return Ok(Registered::Known);
        }
        for other in self.versions_of(desc.id()) {
            check_compatible(other, &desc)?;
        }
        self.schemas.insert(key, desc);
        Ok(Registered::New)
    }

    /// The descriptor of `(id, version)`.
    pub fn get(&self, id: &str, version: u32) -> Option<&SchemaDescriptor> {
        self.schemas.get(&(id.to_owned(), version))
    }

    /// All registered versions of `id`, oldest first.
    pub fn versions_of<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a SchemaDescriptor> {
        self.schemas
            .range((id.to_owned(), 0)..=(id.to_owned(), u32::MAX))
            .map(|(_, d)| d)
    }

    /// Every descriptor, ordered by id then version.
    pub fn iter(&self) -> impl Iterator<Item = &SchemaDescriptor> {
        self.schemas.values()
    }

    /// Number of registered `(id, version)` pairs.
    pub fn len(&self) -> usize {
        self.schemas.len()
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.schemas.is_empty()
    }
}

//! [`SchemaDescriptor`]: a named, versioned root type, with its canonical bytes and
//! fingerprint.

use std::fmt;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::canonical;
use crate::desc::{MAX_NAME_LEN, TypeDesc};
use crate::error::{DecodeError, DescriptorError};
use crate::value::Value;
use crate::walk::LayoutPlan;

/// Checks that `id` is a valid schema id: dot-separated segments of ASCII letters, digits, `_`
/// and `-`, at most [`MAX_NAME_LEN`] bytes (`"monty.env_interface.step"`).
pub fn validate_schema_id(id: &str) -> Result<(), DescriptorError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_NAME_LEN
        && id.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(DescriptorError::BadSchemaId { id: id.to_owned() })
    }
}

/// A named, versioned root type: what a producer registers and what every file embeds.
///
/// Built by `#[derive(Snapshot)]` (see [`Snapshot::descriptor`](crate::Snapshot::descriptor)),
/// by [`SchemaDescriptor::new`], or decoded from its canonical bytes. The fingerprint is
/// computed once on construction, the [`LayoutPlan`] of the root on first [`plan`](Self::plan).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "RawDescriptor")]
pub struct SchemaDescriptor {
    id: String,
    version: u32,
    root: TypeDesc,
    fingerprint: u64,
    /// The root's plan, compiled once for every payload decoded through this descriptor.
    #[serde(skip)]
    plan: PlanCache,
}

/// A descriptor's root plan, compiled on first use: a cache of `root`, so its `Debug` says
/// only whether it is filled (and equality leaves it out).
#[derive(Clone, Default)]
struct PlanCache(OnceLock<LayoutPlan<'static>>);

impl fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.0.get().is_some() {
            "compiled"
        } else {
            "not compiled"
        };
        f.write_str(state)
    }
}

#[derive(Deserialize)]
struct RawDescriptor {
    id: String,
    version: u32,
    root: TypeDesc,
}

impl TryFrom<RawDescriptor> for SchemaDescriptor {
    type Error = DescriptorError;
    fn try_from(raw: RawDescriptor) -> Result<Self, Self::Error> {
        SchemaDescriptor::new(raw.id, raw.version, raw.root)
    }
}

impl PartialEq for SchemaDescriptor {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.version == other.version && self.root == other.root
    }
}
impl Eq for SchemaDescriptor {}

impl SchemaDescriptor {
    /// Builds and validates a descriptor: the id must pass [`validate_schema_id`], the version
    /// must be ≥ 1, the type must pass [`TypeDesc::validate`], and when the root is a struct its
    /// fields' `since` versions must be ≥ 1, non-decreasing and ≤ `version` (fields are only
    /// ever appended).
    pub fn new(
        id: impl Into<String>,
        version: u32,
        root: TypeDesc,
    ) -> Result<SchemaDescriptor, DescriptorError> {
        let desc = SchemaDescriptor::new_unchecked(id.into(), version, root);
        desc.validate()?;
        Ok(desc)
    }

    /// Builds a descriptor without validating it (the derive validates at compile time what it
    /// can; [`SchemaRegistry`](crate::SchemaRegistry) re-validates everything it accepts).
    pub(crate) fn new_unchecked(id: String, version: u32, root: TypeDesc) -> SchemaDescriptor {
        let mut desc = SchemaDescriptor {
            id,
            version,
            root,
            fingerprint: 0,
            plan: PlanCache::default(),
        };
        desc.fingerprint = xxhash_rust::xxh3::xxh3_64(&desc.to_canonical_bytes());
        desc
    }

    /// Runs the checks of [`SchemaDescriptor::new`] again.
    pub fn validate(&self) -> Result<(), DescriptorError> {
        validate_schema_id(&self.id)?;
        if self.version == 0 {
            return Err(DescriptorError::ZeroVersion {
                id: self.id.clone(),
            });
        }
        self.root.validate()?;
        if let TypeDesc::Struct { fields } = &self.root {
            let mut prev = 1;
            for f in fields {
                if f.since < prev || f.since > self.version {
                    return Err(DescriptorError::BadSince {
                        id: self.id.clone(),
                        field: f.name.clone(),
                        since: f.since,
                        version: self.version,
                    });
                }
                prev = f.since;
            }
        }
        Ok(())
    }

    /// The schema id (`"monty.env_interface.step"`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The schema version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The root type.
    pub fn root(&self) -> &TypeDesc {
        &self.root
    }

    /// XXH3-64 of [`to_canonical_bytes`](Self::to_canonical_bytes). Equal descriptors have equal
    /// fingerprints on every platform and in every release that keeps the canonical layout.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The root's [`LayoutPlan`], compiled on the first call and kept.
    pub fn plan(&self) -> &LayoutPlan<'static> {
        self.plan
            .0
            .get_or_init(|| LayoutPlan::compile(&self.root).into_owned())
    }

    /// [`decode`](crate::decode) of a payload of this schema, with the [`plan`](Self::plan)
    /// compiled once (what per-record decoding should call).
    pub fn decode<'a>(&'a self, bytes: &'a [u8]) -> Result<Value<'a>, DecodeError> {
        crate::decode_with(self.plan(), bytes)
    }

    /// The canonical byte form, in the same bincode-1.x-style layout as payloads:
    /// [`DESCRIPTOR_MAGIC`](crate::DESCRIPTOR_MAGIC), the id (`u64` length + UTF-8), the version (`u32`), then the root
    /// node. A node is one tag byte followed by its children:
    ///
    /// | tag | node | then |
    /// |----|------|------|
    /// | 0–12 | bool, u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64 | — |
    /// | 13, 14 | string, bytes | — |
    /// | 15 | option | node |
    /// | 16 | seq | node |
    /// | 17 | array | `u64` len, node |
    /// | 18 | tuple | `u64` n, n nodes |
    /// | 19 | struct | `u64` n, n × (name, `u32` since, node) |
    /// | 20 | enum | `u64` n, n × (name, `u8` kind 0 unit / 1 tuple / 2 struct, then as tuple or struct) |
    /// | 21 | map | key node, value node |
    /// | 22 | tensor | `u8` dtype code (u8, u16, u32, u64, i8, i16, i32, i64, f32, f64 = 0–9) |
    pub fn to_canonical_bytes(&self) -> Vec<u8> {
        canonical::write(&self.id, self.version, &self.root)
    }

    /// Decodes and validates canonical bytes from an untrusted source.
    pub fn from_canonical_bytes(bytes: &[u8]) -> Result<SchemaDescriptor, DescriptorError> {
        let (id, version, root) = canonical::read(bytes)?;
        SchemaDescriptor::new(id, version, root)
    }
}

impl fmt::Display for SchemaDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} v{} [{:016x}] {}",
            self.id, self.version, self.fingerprint, self.root
        )
    }
}

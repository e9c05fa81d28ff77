//! The canonical byte form of a descriptor (see
//! [`SchemaDescriptor::to_canonical_bytes`](crate::SchemaDescriptor::to_canonical_bytes) for
//! the layout), written and read here. Reading treats its input as untrusted: nesting depth,
//! counts and lengths are bounded before anything is allocated.

use crate::cursor::WireReader;
use crate::desc::{
    Field, MAX_DESC_DEPTH, MAX_DESC_WIDTH, MAX_NAME_LEN, TypeDesc, Variant, VariantKind,
};
use crate::dtype::DType;
use crate::error::{DecodeError, DecodeErrorKind, DescriptorError};

/// Magic prefix of a descriptor's canonical bytes (`"SBD"` + layout version 1).
pub const DESCRIPTOR_MAGIC: [u8; 4] = *b"SBD\x01";

/// The canonical bytes of the descriptor `(id, version, root)`.
pub(crate) fn write(id: &str, version: u32, root: &TypeDesc) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&DESCRIPTOR_MAGIC);
    put_str(&mut out, id);
    out.extend_from_slice(&version.to_le_bytes());
    put_node(&mut out, root);
    out
}

/// Reads canonical bytes back into `(id, version, root)`; the whole input must be consumed.
/// The caller validates the result (names, `since` order) when it builds the descriptor.
pub(crate) fn read(bytes: &[u8]) -> Result<(String, u32, TypeDesc), DescriptorError> {
    let mut r = WireReader::new(bytes);
    let magic = r.take(4).map_err(DescriptorError::Decode)?;
    if magic != DESCRIPTOR_MAGIC {
        return Err(DescriptorError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let id = read_name(&mut r)?;
    let version = r.read_u32().map_err(DescriptorError::Decode)?;
    let root = read_node(&mut r, 0)?;
    r.finish().map_err(DescriptorError::Decode)?;
    Ok((id, version, root))
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_fields(out: &mut Vec<u8>, fields: &[Field]) {
    out.extend_from_slice(&(fields.len() as u64).to_le_bytes());
    for f in fields {
        put_str(out, &f.name);
        out.extend_from_slice(&f.since.to_le_bytes());
        put_node(out, &f.ty);
    }
}

fn put_node(out: &mut Vec<u8>, t: &TypeDesc) {
    match t {
        TypeDesc::Bool => out.push(0),
        TypeDesc::U8 => out.push(1),
        TypeDesc::U16 => out.push(2),
        TypeDesc::U32 => out.push(3),
        TypeDesc::U64 => out.push(4),
        TypeDesc::U128 => out.push(5),
        TypeDesc::I8 => out.push(6),
        TypeDesc::I16 => out.push(7),
        TypeDesc::I32 => out.push(8),
        TypeDesc::I64 => out.push(9),
        TypeDesc::I128 => out.push(10),
        TypeDesc::F32 => out.push(11),
        TypeDesc::F64 => out.push(12),
        TypeDesc::String => out.push(13),
        TypeDesc::Bytes => out.push(14),
        TypeDesc::Option { some } => {
            out.push(15);
            put_node(out, some);
        }
        TypeDesc::Seq { elem } => {
            out.push(16);
            put_node(out, elem);
        }
        TypeDesc::Array { len, elem } => {
            out.push(17);
            out.extend_from_slice(&len.to_le_bytes());
            put_node(out, elem);
        }
        TypeDesc::Tuple { elems } => {
            out.push(18);
            out.extend_from_slice(&(elems.len() as u64).to_le_bytes());
            elems.iter().for_each(|e| put_node(out, e));
        }
        TypeDesc::Struct { fields } => {
            out.push(19);
            put_fields(out, fields);
        }
        TypeDesc::Enum { variants } => {
            out.push(20);
            out.extend_from_slice(&(variants.len() as u64).to_le_bytes());
            for v in variants {
                put_str(out, &v.name);
                match &v.kind {
                    VariantKind::Unit => out.push(0),
                    VariantKind::Tuple { elems } => {
                        out.push(1);
                        out.extend_from_slice(&(elems.len() as u64).to_le_bytes());
                        elems.iter().for_each(|e| put_node(out, e));
                    }
                    VariantKind::Struct { fields } => {
                        out.push(2);
                        put_fields(out, fields);
                    }
                }
            }
        }
        TypeDesc::Map { key, value } => {
            out.push(21);
            put_node(out, key);
            put_node(out, value);
        }
        TypeDesc::Tensor { dtype } => {
            out.push(22);
            out.push(dtype.code());
        }
        TypeDesc::Dynamic => out.push(23),
    }
}

fn read_name(r: &mut WireReader<'_>) -> Result<String, DescriptorError> {
    let at = r.offset();
    let len = r.read_len(1).map_err(DescriptorError::Decode)?;
    if len > MAX_NAME_LEN {
        return Err(DescriptorError::Decode(DecodeError::new(
            at,
            DecodeErrorKind::LengthTooLarge {
                len: len as u64,
                remaining: MAX_NAME_LEN,
            },
        )));
    }
    let bytes = r.take(len).map_err(DescriptorError::Decode)?;
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| DescriptorError::Decode(DecodeError::new(at, DecodeErrorKind::InvalidUtf8)))
}

fn read_count(r: &mut WireReader<'_>, min_each: usize) -> Result<usize, DescriptorError> {
    let at = r.offset();
    let n = r.read_len(min_each).map_err(DescriptorError::Decode)?;
    if n > MAX_DESC_WIDTH {
        return Err(DescriptorError::Decode(DecodeError::new(
            at,
            DecodeErrorKind::LengthTooLarge {
                len: n as u64,
                remaining: MAX_DESC_WIDTH,
            },
        )));
    }
    Ok(n)
}

fn read_fields(r: &mut WireReader<'_>, depth: usize) -> Result<Vec<Field>, DescriptorError> {
    // A field is at least a name length (8), since (4) and a tag (1).
    let n = read_count(r, 13)?;
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let name = read_name(r)?;
        let since = r.read_u32().map_err(DescriptorError::Decode)?;
        let ty = read_node(r, depth + 1)?;
        fields.push(Field { name, ty, since });
    }
    Ok(fields)
}

fn read_nodes(r: &mut WireReader<'_>, depth: usize) -> Result<Vec<TypeDesc>, DescriptorError> {
    let n = read_count(r, 1)?;
    (0..n).map(|_| read_node(r, depth + 1)).collect()
}

fn read_variants(r: &mut WireReader<'_>, depth: usize) -> Result<Vec<Variant>, DescriptorError> {
    // A variant is at least a name length (8) and a kind byte (1).
    let n = read_count(r, 9)?;
    let mut variants = Vec::with_capacity(n);
    for _ in 0..n {
        let name = read_name(r)?;
        let kind_at = r.offset();
        let kind = match r.read_u8().map_err(DescriptorError::Decode)? {
            0 => VariantKind::Unit,
            1 => VariantKind::Tuple {
                elems: read_nodes(r, depth)?,
            },
            2 => VariantKind::Struct {
                fields: read_fields(r, depth)?,
            },
            other => {
                return Err(DescriptorError::Decode(DecodeError::new(
                    kind_at,
                    DecodeErrorKind::InvalidTag { tag: other },
                )));
            }
        };
        variants.push(Variant { name, kind });
    }
    Ok(variants)
}

fn read_node(r: &mut WireReader<'_>, depth: usize) -> Result<TypeDesc, DescriptorError> {
    if depth >= MAX_DESC_DEPTH {
        return Err(DescriptorError::TooDeep {
            max: MAX_DESC_DEPTH,
        });
    }
    let at = r.offset();
    let tag = r.read_u8().map_err(DescriptorError::Decode)?;
    let child = |r: &mut WireReader<'_>| read_node(r, depth + 1).map(Box::new);
    Ok(match tag {
        0 => TypeDesc::Bool,
        1 => TypeDesc::U8,
        2 => TypeDesc::U16,
        3 => TypeDesc::U32,
        4 => TypeDesc::U64,
        5 => TypeDesc::U128,
        6 => TypeDesc::I8,
        7 => TypeDesc::I16,
        8 => TypeDesc::I32,
        9 => TypeDesc::I64,
        10 => TypeDesc::I128,
        11 => TypeDesc::F32,
        12 => TypeDesc::F64,
        13 => TypeDesc::String,
        14 => TypeDesc::Bytes,
        15 => TypeDesc::Option { some: child(r)? },
        16 => TypeDesc::Seq { elem: child(r)? },
        17 => {
            let len = r.read_u64().map_err(DescriptorError::Decode)?;
            TypeDesc::Array {
                len,
                elem: child(r)?,
            }
        }
        18 => TypeDesc::Tuple {
            elems: read_nodes(r, depth)?,
        },
        19 => TypeDesc::Struct {
            fields: read_fields(r, depth)?,
        },
        20 => TypeDesc::Enum {
            variants: read_variants(r, depth)?,
        },
        21 => {
            let key = child(r)?;
            let value = child(r)?;
            TypeDesc::Map { key, value }
        }
        22 => {
            let code_at = r.offset();
            let code = r.read_u8().map_err(DescriptorError::Decode)?;
            let dtype = DType::from_code(code).ok_or_else(|| {
                DescriptorError::Decode(DecodeError::new(
                    code_at,
                    DecodeErrorKind::InvalidTag { tag: code },
                ))
            })?;
            TypeDesc::Tensor { dtype }
        }
        23 => TypeDesc::Dynamic,
        other => {
            return Err(DescriptorError::Decode(DecodeError::new(
                at,
                DecodeErrorKind::InvalidTag { tag: other },
            )));
        }
    })
}

//! The one walk of the wire format: a [`TypeDesc`](crate::TypeDesc) compiled once into a [`LayoutPlan`], read
//! from any [`ByteSource`] by [`walk`], which hands what it reads to a [`Visit`]or.
//!
//! Every reader of payloads is a visitor of this walk: [`decode`](crate::decode) builds
//! [`Value`](crate::Value)s, the Python binding builds Python objects, the field extractors
//! read numbers where the payload lies in the ring. The walk owns the wire format's rules —
//! length prefixes checked against what remains before anything is built, tags and variant
//! indices checked, tensor shapes checked against their element counts, nesting depth and the
//! number of values bounded — so a visitor only says what each value becomes.
//!
//! # Guarantees
//!
//! - **Untrusted bytes never panic.** Every failure is a [`DecodeError`] with the byte offset
//!   and (for visitors whose error keeps one, see [`WalkError`]) the field path, exactly as
//!   [`decode`](crate::decode) reports it.
//! - **No dynamic dispatch.** [`walk`] is generic over the source and the visitor, so each
//!   use is compiled for its own types.
//! - **Variable-size data is not copied.** Strings, bytes, packed numbers and tensor elements
//!   reach the visitor as a span (offset and length) in the source, already bounds-checked:
//!   a visitor of a slice borrows them, a visitor of a ring payload reads them a piece at a
//!   time.
//!
//! # Example
//!
//! A plan compiled once knows where the fixed-size fields are; [`skip`] moves past a value
//! using only the framing, [`decode_with`](crate::decode_with) walks it into a
//! [`Value`](crate::Value) (its visitor, in `decode.rs`, is the reference implementation of
//! [`Visit`]).
//!
//! ```
//! use snapbus_schemas::walk::{skip, Kind, LayoutPlan};
//! use snapbus_schemas::{decode_with, DType, Snapshot, Value, Wire, WireReader};
//!
//! #[derive(Snapshot)]
//! #[snapshot(id = "doc.walk", version = 1)]
//! struct Step { step: u32, pos: [f32; 2], name: String }
//!
//! let desc = Step::descriptor();
//! let plan = LayoutPlan::compile(desc.root());
//! let pos = plan.child(LayoutPlan::ROOT, 1);
//! assert_eq!(plan.node(pos).name(), "pos");
//! assert_eq!(plan.node(pos).kind(), Kind::Array { len: 2 });
//! assert_eq!((plan.node(pos).offset(), plan.node(pos).fixed_size()), (Some(4), Some(8)));
//! assert_eq!(plan.node(plan.child(pos, 0)).dtype(), Some(DType::F32));
//!
//! let bytes = Step { step: 3, pos: [0.5, 1.5], name: "x".into() }.encode_to_vec()?;
//! let mut r = WireReader::new(&bytes);
//! skip(&plan, LayoutPlan::ROOT, &mut r)?;
//! assert_eq!(r.remaining(), 0);
//! assert_eq!(decode_with(&plan, &bytes)?.field("step"), Some(&Value::U32(3)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod layout;
mod source;
mod visit;
mod walker;

pub use layout::{Kind, LayoutPlan, Node, NodeId, VariantShape};
pub use source::{ByteSource, Scalar, WalkError};
pub use visit::Visit;
use walker::Walker;
pub(crate) use walker::read_shape;

#[cfg(doc)]
use crate::cursor::WireReader;
use crate::desc::MAX_DESC_DEPTH;
use crate::dtype::DType;
use crate::error::DecodeError;

/// Walks one value of `plan`'s root type from `src` (which may hold more: see
/// [`WireReader::finish`] to check that it is all read), calling `visitor` for each value.
///
/// Bounds the number of values one walk may visit: a value that consumes input bytes is
/// paid for by them, but zero-sized values (`()`, empty structs) cost nothing, so a hostile
/// descriptor (`[[[(); 16]; 16]; …]`) could otherwise make a 100-byte payload visit billions
/// of values. Legitimate payloads visit at most about one value per byte per nesting level.
#[inline]
pub fn walk<'d, S, V>(
    plan: &LayoutPlan<'d>,
    src: &mut S,
    visitor: &mut V,
) -> Result<V::Out, V::Error>
where
    S: ByteSource + ?Sized,
    V: Visit<'d, S>,
{
    walk_node(plan, LayoutPlan::ROOT, src, visitor)
}

/// [`walk`] from node `id` of `plan` (a value of that node's type).
pub fn walk_node<'d, S, V>(
    plan: &LayoutPlan<'d>,
    id: NodeId,
    src: &mut S,
    visitor: &mut V,
) -> Result<V::Out, V::Error>
where
    S: ByteSource + ?Sized,
    V: Visit<'d, S>,
{
    let depth = plan.depth().min(MAX_DESC_DEPTH) as u64;
    let max = (depth + 1)
        .saturating_mul(src.remaining() as u64 + 1)
        .saturating_add(4096);
    let mut w = Walker {
        plan,
        src,
        v: visitor,
        left: max,
        max,
    };
    w.value(id)
}

/// Moves `src` past one value of node `id`'s type, checking its framing (length prefixes,
/// tags, variant indices, tensor shapes) but not its contents; fixed-size values are skipped
/// in one step.
pub fn skip<S: ByteSource + ?Sized>(
    plan: &LayoutPlan<'_>,
    id: NodeId,
    src: &mut S,
) -> Result<(), DecodeError> {
    walk_node(plan, id, src, &mut Skip)
}

/// The visitor of [`skip`].
struct Skip;

impl<'d, S: ByteSource + ?Sized> Visit<'d, S> for Skip {
    type Out = ();
    type Error = DecodeError;
    type Seq = ();
    type Record = ();
    type Map = ();
    const SKIPS_FIXED: bool = true;

    fn scalar(&mut self, _: Scalar) -> Result<(), DecodeError> {
        Ok(())
    }
    fn string(&mut self, _: &S, _: usize, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn bytes(&mut self, _: &S, _: usize, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn packed(&mut self, _: &S, _: DType, _: usize, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn tensor(&mut self, _: &S, _: DType, _: &[u64], _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn option(&mut self, _: Option<()>) -> Result<(), DecodeError> {
        Ok(())
    }
    fn seq_begin(&mut self, _: &Node<'d>, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn seq_end(&mut self, _: &Node<'d>, _: ()) -> Result<(), DecodeError> {
        Ok(())
    }
    fn record_begin(&mut self, _: NodeId, _: &Node<'d>, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn record_end(&mut self, _: NodeId, _: &Node<'d>, _: ()) -> Result<(), DecodeError> {
        Ok(())
    }
    fn variant(
        &mut self,
        _: u32,
        _: NodeId,
        _: &Node<'d>,
        _: Option<()>,
    ) -> Result<(), DecodeError> {
        Ok(())
    }
    fn map_begin(&mut self, _: usize) -> Result<(), DecodeError> {
        Ok(())
    }
    fn map_end(&mut self, _: ()) -> Result<(), DecodeError> {
        Ok(())
    }
}

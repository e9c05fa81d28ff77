//! What a reader of payloads makes of the walk: the [`Visit`] trait.

use super::layout::{Node, NodeId};
use super::source::{ByteSource, Scalar, WalkError};
#[cfg(doc)]
use super::walk;
use crate::dtype::DType;

/// What one reader of payloads makes of what [`walk`] reads.
///
/// The walk calls one method per value, children before their parent's `*_end`, so a
/// visitor that builds a tree builds it bottom up. Only `seq_item`, `field` and `map_entry`
/// have defaults (they drop the value).
pub trait Visit<'d, S: ByteSource + ?Sized> {
    /// What a value becomes.
    type Out;
    /// The visitor's error.
    type Error: WalkError;
    /// A sequence, array or tuple (or tuple variant payload) being built.
    type Seq;
    /// A struct (or struct variant payload) being built.
    type Record;
    /// A map being built.
    type Map;

    /// Whether the walk may move past fixed-size values in one skip instead of visiting
    /// them (for a visitor that only skips; bools are then not checked).
    const SKIPS_FIXED: bool = false;

    /// A scalar.
    fn scalar(&mut self, v: Scalar) -> Result<Self::Out, Self::Error>;

    /// A string of `len` bytes at `at` (not yet checked to be UTF-8).
    fn string(&mut self, src: &S, at: usize, len: usize) -> Result<Self::Out, Self::Error>;

    /// A byte buffer of `len` bytes at `at`.
    fn bytes(&mut self, src: &S, at: usize, len: usize) -> Result<Self::Out, Self::Error>;

    /// A sequence or array of `count` numbers of `dtype` at `at`, packed little-endian.
    fn packed(
        &mut self,
        src: &S,
        dtype: DType,
        at: usize,
        count: usize,
    ) -> Result<Self::Out, Self::Error>;

    /// A tensor of `shape` (its element count checked) whose elements are at `at`.
    fn tensor(
        &mut self,
        src: &S,
        dtype: DType,
        shape: &[u64],
        at: usize,
    ) -> Result<Self::Out, Self::Error>;

    /// An option, with its value if some.
    fn option(&mut self, value: Option<Self::Out>) -> Result<Self::Out, Self::Error>;

    /// Starts a sequence, array, tuple or tuple variant payload (`node` says which) of `len`
    /// items.
    fn seq_begin(&mut self, node: &Node<'d>, len: usize) -> Result<Self::Seq, Self::Error>;

    /// One item of a sequence.
    #[inline]
    fn seq_item(&mut self, seq: &mut Self::Seq, item: Self::Out) -> Result<(), Self::Error> {
        let _ = (seq, item);
        Ok(())
    }

    /// Ends a sequence.
    fn seq_end(&mut self, node: &Node<'d>, seq: Self::Seq) -> Result<Self::Out, Self::Error>;

    /// Starts a struct or struct variant payload (node `id`) of `len` fields.
    fn record_begin(
        &mut self,
        id: NodeId,
        node: &Node<'d>,
        len: usize,
    ) -> Result<Self::Record, Self::Error>;

    /// One field of a struct (node `id`, `field`: its [`Node::name`]).
    #[inline]
    fn field(
        &mut self,
        record: &mut Self::Record,
        id: NodeId,
        field: &Node<'d>,
        value: Self::Out,
    ) -> Result<(), Self::Error> {
        let _ = (record, id, field, value);
        Ok(())
    }

    /// Ends a struct.
    fn record_end(
        &mut self,
        id: NodeId,
        node: &Node<'d>,
        record: Self::Record,
    ) -> Result<Self::Out, Self::Error>;

    /// An enum's variant `index` (node `id`, `variant`), with its payload unless it is a
    /// unit variant.
    fn variant(
        &mut self,
        index: u32,
        id: NodeId,
        variant: &Node<'d>,
        payload: Option<Self::Out>,
    ) -> Result<Self::Out, Self::Error>;

    /// Starts a map of `len` entries.
    fn map_begin(&mut self, len: usize) -> Result<Self::Map, Self::Error>;

    /// One entry of a map.
    #[inline]
    fn map_entry(
        &mut self,
        map: &mut Self::Map,
        key: Self::Out,
        value: Self::Out,
    ) -> Result<(), Self::Error> {
        let _ = (map, key, value);
        Ok(())
    }

    /// Ends a map.
    fn map_end(&mut self, map: Self::Map) -> Result<Self::Out, Self::Error>;
}

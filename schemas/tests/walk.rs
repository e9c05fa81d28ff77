//! The one walk of the wire format: layout plans, the walk over another byte source, skipping,
//! and the dtype names.

use proptest::prelude::*;
use snapbus_schemas::walk::{
    ByteSource, Kind, LayoutPlan, Node, NodeId, Scalar, VariantShape, Visit, skip, walk,
};
use snapbus_schemas::{
    DType, DecodeError, DecodeErrorKind, Snapshot, Wire, WireReader, decode, decode_with,
};

use crate::fixtures::{Everything, sample};

#[derive(Snapshot)]
#[snapshot(id = "test.walk.layout", version = 1)]
struct Layout {
    a: u32,
    b: [f32; 2],
    c: Option<u8>,
    d: u64,
    e: (u8, String),
}

#[test]
fn plans_know_fixed_sizes_offsets_and_names() {
    let desc = Layout::descriptor();
    let plan = LayoutPlan::compile(desc.root());
    let root = plan.node(LayoutPlan::ROOT);
    assert_eq!(root.kind(), Kind::Struct);
    assert_eq!(root.fixed_size(), None);
    assert_eq!(root.min_encoded_len(), desc.root().min_encoded_len());
    let fields: Vec<&Node<'_>> = plan
        .children(LayoutPlan::ROOT)
        .map(|c| plan.node(c))
        .collect();
    let names: Vec<&str> = fields.iter().map(|n| n.name()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    let offsets: Vec<Option<usize>> = fields.iter().map(|n| n.offset()).collect();
    assert_eq!(offsets, [Some(0), Some(4), Some(12), None, None]);
    assert_eq!(fields[1].fixed_size(), Some(8));
    assert_eq!(fields[1].kind(), Kind::Array { len: 2 });
    assert_eq!(fields[0].dtype(), Some(DType::U32));
    assert_eq!(plan.depth(), desc.root().depth());
    // The same descriptor always numbers its nodes the same way.
    assert_eq!(LayoutPlan::compile(desc.root()), plan.clone());
    assert_eq!(plan.clone().into_owned(), plan);
}

#[test]
fn enum_variants_are_named_nodes_with_their_payloads() {
    let desc = Everything::descriptor();
    let plan = LayoutPlan::compile(desc.root());
    let mut shapes = Vec::new();
    for id in 0..plan.len() as NodeId {
        if let Kind::Variant(shape) = plan.node(id).kind() {
            shapes.push((
                plan.node(id).name().to_owned(),
                shape,
                plan.children(id).len(),
            ));
        }
    }
    assert!(
        shapes
            .iter()
            .any(|(_, s, n)| *s == VariantShape::Unit && *n == 0)
    );
    assert!(shapes.iter().any(|(_, s, _)| *s == VariantShape::Tuple));
    assert!(shapes.iter().any(|(_, s, _)| *s == VariantShape::Struct));
}

/// A source that hands out bytes through fixed-width reads only (as a ring payload does).
struct Chunked<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl ByteSource for Chunked<'_> {
    fn offset(&self) -> usize {
        self.pos
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let at = self.skip(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[at..at + N]);
        Ok(out)
    }
    fn skip(&mut self, n: usize) -> Result<usize, DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::new(
                self.pos,
                DecodeErrorKind::UnexpectedEnd {
                    needed: n,
                    remaining: self.remaining(),
                },
            ));
        }
        self.pos += n;
        Ok(self.pos - n)
    }
}

/// Renders every value as text, reading spans from the source.
struct Text;

impl<'d> Visit<'d, Chunked<'_>> for Text {
    type Out = String;
    type Error = DecodeError;
    type Seq = Vec<String>;
    type Record = Vec<String>;
    type Map = Vec<String>;

    fn scalar(&mut self, v: Scalar) -> Result<String, DecodeError> {
        Ok(format!("{v:?}"))
    }
    fn string(&mut self, s: &Chunked<'_>, at: usize, len: usize) -> Result<String, DecodeError> {
        Ok(format!(
            "{:?}",
            String::from_utf8_lossy(&s.buf[at..at + len])
        ))
    }
    fn bytes(&mut self, s: &Chunked<'_>, at: usize, len: usize) -> Result<String, DecodeError> {
        Ok(format!("b{:?}", &s.buf[at..at + len]))
    }
    fn packed(
        &mut self,
        s: &Chunked<'_>,
        d: DType,
        at: usize,
        n: usize,
    ) -> Result<String, DecodeError> {
        let w = d.size_bytes();
        let v: Vec<f64> = s.buf[at..at + n * w]
            .chunks_exact(w)
            .map(|b| d.to_f64(b))
            .collect();
        Ok(format!("{d}{v:?}"))
    }
    fn tensor(
        &mut self,
        s: &Chunked<'_>,
        d: DType,
        shape: &[u64],
        at: usize,
    ) -> Result<String, DecodeError> {
        let n = shape.iter().product::<u64>() as usize;
        Ok(format!("{shape:?}{}", self.packed(s, d, at, n)?))
    }
    fn option(&mut self, v: Option<String>) -> Result<String, DecodeError> {
        Ok(format!("{v:?}"))
    }
    fn seq_begin(&mut self, _: &Node<'d>, _: usize) -> Result<Vec<String>, DecodeError> {
        Ok(Vec::new())
    }
    fn seq_item(&mut self, seq: &mut Vec<String>, item: String) -> Result<(), DecodeError> {
        seq.push(item);
        Ok(())
    }
    fn seq_end(&mut self, n: &Node<'d>, seq: Vec<String>) -> Result<String, DecodeError> {
        Ok(format!("{:?}{seq:?}", n.kind()))
    }
    fn record_begin(
        &mut self,
        _: NodeId,
        _: &Node<'d>,
        _: usize,
    ) -> Result<Vec<String>, DecodeError> {
        Ok(Vec::new())
    }
    fn field(
        &mut self,
        r: &mut Vec<String>,
        _: NodeId,
        f: &Node<'d>,
        v: String,
    ) -> Result<(), DecodeError> {
        r.push(format!("{}={v}", f.name()));
        Ok(())
    }
    fn record_end(
        &mut self,
        id: NodeId,
        _: &Node<'d>,
        r: Vec<String>,
    ) -> Result<String, DecodeError> {
        Ok(format!("#{id}{{{}}}", r.join(",")))
    }
    fn variant(
        &mut self,
        i: u32,
        _: NodeId,
        v: &Node<'d>,
        p: Option<String>,
    ) -> Result<String, DecodeError> {
        Ok(format!("{i}:{}({p:?})", v.name()))
    }
    fn map_begin(&mut self, _: usize) -> Result<Vec<String>, DecodeError> {
        Ok(Vec::new())
    }
    fn map_entry(&mut self, m: &mut Vec<String>, k: String, v: String) -> Result<(), DecodeError> {
        m.push(format!("{k}:{v}"));
        Ok(())
    }
    fn map_end(&mut self, m: Vec<String>) -> Result<String, DecodeError> {
        Ok(format!("map{m:?}"))
    }
}

#[test]
fn the_walk_reads_any_source_and_fills_the_whole_payload() {
    let desc = Everything::descriptor();
    let bytes = sample().encode_to_vec().expect("encode");
    let plan = LayoutPlan::compile(desc.root());
    let mut src = Chunked {
        buf: &bytes,
        pos: 0,
    };
    let text = walk(&plan, &mut src, &mut Text).expect("walk");
    assert_eq!(src.pos, bytes.len());
    assert!(text.starts_with("#0{"), "{text}");
    // The same payload through the slice reader, and the dynamic decode, agree.
    assert_eq!(
        decode_with(&plan, &bytes).expect("decode"),
        decode(desc.root(), &bytes).expect("decode")
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Skipping moves exactly as far as decoding does, and fails where it fails on framing.
    #[test]
    fn skip_moves_as_far_as_decode(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let desc = Everything::descriptor();
        let plan = LayoutPlan::compile(desc.root());
        let mut a = WireReader::new(&bytes);
        let mut b = WireReader::new(&bytes);
        let decoded = snapbus_schemas::decode_from(desc.root(), &mut a);
        let skipped = skip(&plan, LayoutPlan::ROOT, &mut b);
        if decoded.is_ok() {
            prop_assert!(skipped.is_ok());
            prop_assert_eq!(a.offset(), b.offset());
        }
        let mut c = Chunked { buf: &bytes, pos: 0 };
        let text = walk(&plan, &mut c, &mut Text);
        prop_assert_eq!(text.is_ok(), decoded.is_ok());
    }
}

#[test]
fn errors_keep_offsets_and_paths() {
    let desc = Layout::descriptor();
    let mut bytes = Layout {
        a: 1,
        b: [0.0; 2],
        c: Some(3),
        d: 4,
        e: (5, "x".into()),
    }
    .encode_to_vec()
    .expect("encode");
    bytes[12] = 7; // the option's tag
    let err = decode(desc.root(), &bytes).expect_err("bad tag");
    assert_eq!(err.offset, 12);
    assert_eq!(err.path, "c");
    assert!(matches!(
        err.kind,
        DecodeErrorKind::InvalidOptionTag { tag: 7 }
    ));
}

#[test]
fn dtype_names_agree_with_numpy_and_arrow() {
    for d in DType::ALL {
        assert_eq!(DType::from_name(d.name()), Some(d));
        let numpy = d.numpy();
        let width: usize = numpy[2..].parse().expect("numpy width");
        assert_eq!(width, d.size_bytes(), "{d}");
        let kind = if d.is_float() {
            'f'
        } else if d.is_signed_int() {
            'i'
        } else {
            'u'
        };
        assert_eq!(numpy.chars().nth(1), Some(kind), "{d}");
        let bits = (d.size_bytes() * 8).to_string();
        assert!(
            d.arrow().name().ends_with(&bits),
            "{d}: {}",
            d.arrow().name()
        );
        assert_eq!(d.arrow().name().starts_with("Float"), d.is_float());
    }
    assert_eq!(DType::from_name("f16"), None);
    assert_eq!(DType::U64.to_f64(&u64::MAX.to_le_bytes()), u64::MAX as f64);
    assert_eq!(DType::I8.to_f64(&[0xff]), -1.0);
    assert_eq!(Scalar::Bool(true).as_f64(), 1.0);
}

#[test]
fn fixed_sizes_that_overflow_a_usize_are_not_fixed() {
    use snapbus_schemas::TypeDesc;
    use snapbus_schemas::walk::LayoutPlan;

    // Each array's size fits a usize; their sum does not.
    let huge = TypeDesc::Array {
        len: (usize::MAX / 2) as u64,
        elem: Box::new(TypeDesc::U8),
    };
    let desc = TypeDesc::Tuple {
        elems: vec![huge.clone(), huge.clone(), huge],
    };
    let plan = LayoutPlan::compile(&desc);
    assert_eq!(plan.node(LayoutPlan::ROOT).fixed_size(), None);
}

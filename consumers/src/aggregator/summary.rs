//! The summary schemas: how a closed window becomes a snapshot on the bus and a CSV row.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use snapbus_schemas::{
    DType, DescriptorError, Field, SchemaDescriptor, TypeDesc, Value, Wire, encode_value,
};

use super::stats::{QUANTILES, Stat};
use crate::fields::{KeyType, KeyValue};

/// The suffix of summary schema ids: `demo.step` is summarized as `demo.step.summary`.
pub const SUMMARY_SUFFIX: &str = crate::summary_name::SUMMARY_SUFFIX;

/// The `window` value of experiment-level summaries.
pub const EXPERIMENT: &str = "experiment";

/// The statistics of one window of one group.
#[derive(Debug, Clone)]
pub(crate) struct Acc {
    pub(crate) count: u64,
    pub(crate) first_t_nanos: u64,
    pub(crate) last_t_nanos: u64,
    pub(crate) first_seq: u64,
    pub(crate) last_seq: u64,
    pub(crate) stats: Vec<Stat>,
    /// Statistics of the numeric leaves of dynamic fields, by dotted path (at most
    /// [`MAX_DYNAMIC_LEAVES`]).
    pub(crate) dynamic: BTreeMap<String, Stat>,
}

/// Dynamic leaves summarized per window at most: a field whose keys never repeat (an id per
/// record) must not grow a summary without end.
pub(crate) const MAX_DYNAMIC_LEAVES: usize = 1024;

/// One record's numbers: one per leaf of the plan, and the leaves of its dynamic fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Values<'a> {
    pub(crate) leaves: &'a [f64],
    pub(crate) dynamic: &'a [(String, f64)],
}

impl Acc {
    /// Statistics for leaves of which those flagged `true` are bools.
    pub(crate) fn new(binary: &[bool]) -> Acc {
        Acc {
            count: 0,
            first_t_nanos: 0,
            last_t_nanos: 0,
            first_seq: 0,
            last_seq: 0,
            stats: binary
                .iter()
                .map(|b| if *b { Stat::binary() } else { Stat::default() })
                .collect(),
            dynamic: BTreeMap::new(),
        }
    }

    #[inline]
    pub(crate) fn add(&mut self, t_nanos: u64, seq: u64, values: Values<'_>) {
        if self.count == 0 {
            self.first_t_nanos = t_nanos;
            self.first_seq = seq;
        }
        self.count += 1;
        self.last_t_nanos = t_nanos;
        self.last_seq = seq;
        for (s, v) in self.stats.iter_mut().zip(values.leaves) {
            s.add(*v);
        }
        for (path, v) in values.dynamic {
            if let Some(s) = self.dynamic_stat(path) {
                s.add(*v);
            }
        }
    }

    /// The statistics of dynamic leaf `path`, new if it is not yet known (`None` beyond
    /// [`MAX_DYNAMIC_LEAVES`]).
    fn dynamic_stat(&mut self, path: &str) -> Option<&mut Stat> {
        if !self.dynamic.contains_key(path) {
            if self.dynamic.len() >= MAX_DYNAMIC_LEAVES {
                return None;
            }
            self.dynamic.insert(path.to_owned(), Stat::default());
        }
        self.dynamic.get_mut(path)
    }

    /// Folds a later window into this one.
    pub(crate) fn merge(&mut self, later: &Acc) {
        if later.count == 0 {
            return;
        }
        if self.count == 0 {
            self.first_t_nanos = later.first_t_nanos;
            self.first_seq = later.first_seq;
        }
        self.count += later.count;
        self.last_t_nanos = later.last_t_nanos;
        self.last_seq = later.last_seq;
        for (s, l) in self.stats.iter_mut().zip(&later.stats) {
            s.merge(l);
        }
        for (path, l) in &later.dynamic {
            if let Some(s) = self.dynamic_stat(path) {
                s.merge(l);
            }
        }
    }
}

impl Acc {
    /// Folds in the statistics of another producer (whose records may interleave with these
    /// in time). The times span both; record numbers (`first_seq`, `last_seq`) are per lane,
    /// so the result has none (0).
    pub(crate) fn merge_producer(&mut self, other: &Acc) {
        if other.count == 0 {
            return;
        }
        let span = (self.count > 0).then_some((self.first_t_nanos, self.last_t_nanos));
        self.merge(other);
        if let Some((first, last)) = span {
            self.first_t_nanos = first.min(other.first_t_nanos);
            self.last_t_nanos = last.max(other.last_t_nanos);
        }
        self.first_seq = 0;
        self.last_seq = 0;
    }
}

/// Who a summary is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) name: String,
    pub(crate) pid: u32,
    pub(crate) lane_id: u64,
}

/// One summary to emit.
pub(crate) struct Closed<'a> {
    pub(crate) source: &'a Source,
    pub(crate) group: &'a [KeyValue],
    pub(crate) window: &'a str,
    pub(crate) index: u64,
    pub(crate) lost: u64,
    pub(crate) acc: &'a Acc,
}

/// A summary schema and how to fill it.
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) desc: Arc<SchemaDescriptor>,
    group: Vec<(String, KeyType)>,
    leaves: Vec<String>,
    /// Whether the source has dynamic fields: then the summary's `dynamic_stats` field (a
    /// dynamic map from leaf path to its statistics) summarizes their leaves.
    dynamic: bool,
}

const STAT_NAMES: [&str; 6] = ["count", "mean", "std", "min", "max", "last"];

impl Layout {
    /// The summary schema of `source` (`<id>.summary`, grouped `<id>.by_<fields>.summary`:
    /// [`summary_id`](crate::summary_name::summary_id); same version) for these group-by fields
    /// and summarized leaves (and, if `dynamic`, the leaves of its dynamic fields).
    pub(crate) fn new(
        source: &SchemaDescriptor,
        group: &[(String, KeyType)],
        leaves: &[String],
        dynamic: bool,
    ) -> Result<Layout, DescriptorError> {
        let stat_fields: Vec<Field> = STAT_NAMES
            .iter()
            .map(|n| {
                let ty = if *n == "count" {
                    DType::U64
                } else {
                    DType::F64
                };
                Field::new(*n, ty.into())
            })
            .chain(
                QUANTILES
                    .iter()
                    .map(|(n, _)| Field::new(*n, DType::F64.into())),
            )
            .collect();
        let stat_ty: TypeDesc = stat_fields.into();
        let mut stats = Tree::default();
        for leaf in leaves {
            stats.insert(leaf.split('.'), stat_ty.clone());
        }
        let mut fields = vec![
            Field::new("producer", String::type_desc()),
            Field::new("producer_pid", u32::type_desc()),
            Field::new("producer_lane", u64::type_desc()),
        ];
        if !group.is_empty() {
            let group: Vec<Field> = group.iter().map(|(n, t)| Field::new(n, t.desc())).collect();
            fields.push(Field::new("group", group.into()));
        }
        fields.extend([
            Field::new("window", String::type_desc()),
            Field::new("index", u64::type_desc()),
            Field::new("count", u64::type_desc()),
            Field::new("lost", u64::type_desc()),
            Field::new("first_t_nanos", u64::type_desc()),
            Field::new("last_t_nanos", u64::type_desc()),
            Field::new("first_seq", u64::type_desc()),
            Field::new("last_seq", u64::type_desc()),
            Field::new("stats", stats.into_desc()),
        ]);
        if dynamic {
            fields.push(Field::new("dynamic_stats", TypeDesc::Dynamic));
        }
        let names: Vec<String> = group.iter().map(|(n, _)| n.clone()).collect();
        let desc = SchemaDescriptor::new(
            crate::summary_name::summary_id(source.id(), &names),
            source.version(),
            fields.into(),
        )?;
        Ok(Layout {
            desc: Arc::new(desc),
            group: group.to_vec(),
            leaves: leaves.to_vec(),
            dynamic,
        })
    }

    /// The summary's payload.
    pub(crate) fn encode(&self, c: &Closed<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        let mut stats = Tree::default();
        for (leaf, s) in self.leaves.iter().zip(&c.acc.stats) {
            stats.insert(leaf.split('.'), stat_value(s));
        }
        let mut fields: Vec<(Cow<'_, str>, Value<'_>)> = vec![
            ("producer".into(), Value::Str(c.source.name.as_str().into())),
            ("producer_pid".into(), Value::U32(c.source.pid)),
            ("producer_lane".into(), Value::U64(c.source.lane_id)),
        ];
        if !self.group.is_empty() {
            let group = self
                .group
                .iter()
                .zip(c.group)
                .map(|((n, t), v)| (Cow::from(n.as_str()), key_value(*t, v)))
                .collect();
            fields.push(("group".into(), Value::Struct(group)));
        }
        let a = c.acc;
        fields.extend([
            ("window".into(), Value::Str(c.window.into())),
            ("index".into(), Value::U64(c.index)),
            ("count".into(), Value::U64(a.count)),
            ("lost".into(), Value::U64(c.lost)),
            ("first_t_nanos".into(), Value::U64(a.first_t_nanos)),
            ("last_t_nanos".into(), Value::U64(a.last_t_nanos)),
            ("first_seq".into(), Value::U64(a.first_seq)),
            ("last_seq".into(), Value::U64(a.last_seq)),
            ("stats".into(), stats.into_value()),
        ]);
        if self.dynamic {
            fields.push(("dynamic_stats".into(), dynamic_stats(a)));
        }
        out.clear();
        encode_value(self.desc.root(), &Value::Struct(fields), out).map_err(|e| e.to_string())
    }

    /// The CSV header: the scalar fields, `group.<field>`, then `<leaf>.<stat>`.
    pub(crate) fn csv_header(&self) -> Vec<String> {
        let mut h: Vec<String> = ["producer", "producer_pid", "producer_lane"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        h.extend(self.group.iter().map(|(n, _)| format!("group.{n}")));
        h.extend(
            [
                "window",
                "index",
                "count",
                "lost",
                "first_t_nanos",
                "last_t_nanos",
                "first_seq",
                "last_seq",
            ]
            .iter()
            .map(|s| (*s).to_owned()),
        );
        for leaf in &self.leaves {
            for s in STAT_NAMES.iter().chain(QUANTILES.iter().map(|(n, _)| n)) {
                h.push(format!("{leaf}.{s}"));
            }
        }
        if self.dynamic {
            h.push("dynamic_stats".to_owned());
        }
        h
    }

    /// One CSV row (NaN as an empty cell).
    pub(crate) fn csv_row(&self, c: &Closed<'_>) -> Vec<String> {
        let a = c.acc;
        let mut r = vec![
            c.source.name.clone(),
            c.source.pid.to_string(),
            c.source.lane_id.to_string(),
        ];
        r.extend(c.group.iter().map(|v| match v {
            KeyValue::Bool(b) => b.to_string(),
            KeyValue::U64(v) => v.to_string(),
            KeyValue::I64(v) => v.to_string(),
            KeyValue::F64(v) => float(*v),
            KeyValue::Str(s) => s.clone(),
        }));
        r.extend([
            c.window.to_owned(),
            c.index.to_string(),
            a.count.to_string(),
            c.lost.to_string(),
            a.first_t_nanos.to_string(),
            a.last_t_nanos.to_string(),
            a.first_seq.to_string(),
            a.last_seq.to_string(),
        ]);
        for s in &a.stats {
            r.push(s.count.to_string());
            for v in [s.mean(), s.std(), s.min(), s.max(), s.last] {
                r.push(float(v));
            }
            r.extend(s.quantiles().map(float));
        }
        if self.dynamic {
            // One JSON cell: which leaves there are differs from window to window.
            r.push(dynamic_stats(a).to_json().to_string());
        }
        r
    }
}

/// The statistics of a window's dynamic leaves: a map from leaf path to its statistics.
fn dynamic_stats(a: &Acc) -> Value<'_> {
    Value::Map(
        a.dynamic
            .iter()
            .map(|(path, s)| (Value::Str(path.as_str().into()), stat_value(s)))
            .collect(),
    )
}

fn float(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        v.to_string()
    }
}

fn stat_value(s: &Stat) -> Value<'static> {
    let mut f: Vec<(Cow<'static, str>, Value<'static>)> = vec![
        ("count".into(), Value::U64(s.count)),
        ("mean".into(), Value::F64(s.mean())),
        ("std".into(), Value::F64(s.std())),
        ("min".into(), Value::F64(s.min())),
        ("max".into(), Value::F64(s.max())),
        ("last".into(), Value::F64(s.last)),
    ];
    for ((n, _), q) in QUANTILES.iter().zip(s.quantiles()) {
        f.push(((*n).into(), Value::F64(q)));
    }
    Value::Struct(f)
}

fn key_value(t: KeyType, v: &KeyValue) -> Value<'_> {
    match (t, v) {
        (KeyType::Bool, KeyValue::Bool(b)) => Value::Bool(*b),
        (KeyType::U64, KeyValue::U64(v)) => Value::U64(*v),
        (KeyType::I64, KeyValue::I64(v)) => Value::I64(*v),
        (KeyType::F64, KeyValue::F64(v)) => Value::F64(*v),
        (_, KeyValue::Str(s)) => Value::Str(s.as_str().into()),
        // The plan gives every slot values of its own type; anything else would be a bug,
        // and encoding reports the mismatch instead of panicking.
        (_, KeyValue::Bool(b)) => Value::Bool(*b),
        (_, KeyValue::U64(v)) => Value::U64(*v),
        (_, KeyValue::I64(v)) => Value::I64(*v),
        (_, KeyValue::F64(v)) => Value::F64(*v),
    }
}

/// A summary read back from the bus (what a restarted aggregator needs to know).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Emitted {
    /// The summarized schema's id.
    pub(crate) schema: String,
    pub(crate) lane_id: u64,
    pub(crate) group: Vec<KeyValue>,
    pub(crate) window: String,
    pub(crate) index: u64,
    /// Records summarized.
    pub(crate) count: u64,
    pub(crate) last_seq: u64,
}

/// Decodes a summary payload (of a schema named `<id>.summary`); `None` if it is not one of
/// ours.
pub(crate) fn read_emitted(desc: &SchemaDescriptor, payload: &[u8]) -> Option<Emitted> {
    let grouped = desc.root().field("group").is_some();
    let schema = crate::summary_name::summarized_id(desc.id(), grouped)?.to_owned();
    let v = desc.decode(payload).ok()?;
    let u64_of = |name: &str| match v.field(name) {
        Some(Value::U64(x)) => Some(*x),
        _ => None,
    };
    let group = match v.field("group") {
        None => Vec::new(),
        Some(Value::Struct(fields)) => fields
            .iter()
            .map(|(_, v)| match v {
                Value::Bool(b) => Some(KeyValue::Bool(*b)),
                Value::U64(x) => Some(KeyValue::U64(*x)),
                Value::I64(x) => Some(KeyValue::I64(*x)),
                Value::F64(x) => Some(KeyValue::F64(*x)),
                Value::Str(s) => Some(KeyValue::Str(s.to_string())),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?,
        Some(_) => return None,
    };
    let window = match v.field("window") {
        Some(Value::Str(s)) => s.to_string(),
        _ => return None,
    };
    Some(Emitted {
        schema,
        lane_id: u64_of("producer_lane")?,
        group,
        window,
        index: u64_of("index")?,
        count: u64_of("count")?,
        last_seq: u64_of("last_seq")?,
    })
}

/// Dotted names as nested structs, in first-seen order.
struct Tree<T> {
    children: Vec<(String, Tree<T>)>,
    leaf: Option<T>,
}

impl<T> Default for Tree<T> {
    fn default() -> Self {
        Tree {
            children: Vec::new(),
            leaf: None,
        }
    }
}

impl<T> Tree<T> {
    fn insert<'a>(&mut self, mut path: impl Iterator<Item = &'a str>, leaf: T) {
        match path.next() {
            None => self.leaf = Some(leaf),
            Some(name) => {
                let i = match self.children.iter().position(|(n, _)| n == name) {
                    Some(i) => i,
                    None => {
                        self.children.push((name.to_owned(), Tree::default()));
                        self.children.len() - 1
                    }
                };
                self.children[i].1.insert(path, leaf);
            }
        }
    }
}

impl Tree<TypeDesc> {
    fn into_desc(self) -> TypeDesc {
        let children = self
            .children
            .into_iter()
            .map(|(n, t)| Field::new(n, t.into_desc()));
        match self.leaf {
            Some(d) if children.len() == 0 => d,
            // A name that is both a leaf and a parent (`a` and `a.b`): the descriptor refuses
            // the empty field name, and the schema is reported as not summarizable.
            Some(d) => std::iter::once(Field::new("", d))
                .chain(children)
                .collect::<Vec<_>>()
                .into(),
            None => children.collect::<Vec<_>>().into(),
        }
    }
}

impl Tree<Value<'static>> {
    fn into_value(self) -> Value<'static> {
        match self.leaf {
            Some(v) => v,
            None => Value::Struct(
                self.children
                    .into_iter()
                    .map(|(n, t)| (Cow::Owned(n), t.into_value()))
                    .collect(),
            ),
        }
    }
}

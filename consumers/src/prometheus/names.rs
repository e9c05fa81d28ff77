//! How a schema's numeric leaves become metric names and label sets.
//!
//! - A plain schema: one gauge per numeric leaf ([`Plan::numeric`]), named
//!   `<schema id>_<leaf path>` sanitised ([`metric_name`]): `demo.step` `reward` →
//!   `demo_step_reward`, labels `producer`, `schema`, `session_tag`, `perf_tag` (the last two
//!   when the producer has them).
//! - An aggregator summary (`<schema>.summary` with `producer`, `window` and `stats`): one gauge
//!   per summarized field, `<schema id>_<field>` (`demo_step_summary_reward`) with the statistic
//!   as label `stat` (`mean`, `p95`, …), plus `…_count`, `…_lost`, `…_index` of the window; the
//!   producer is the summarized one (the payload's `producer`), `window` is the window kind
//!   (`episode`, `steps:N`, `secs:T`, `experiment`: bounded), and the group-by values, if any,
//!   are labels `group_<field>`.
//! - A data name starting with one of [`RESERVED_PREFIXES`] (the exporter's own families) is
//!   not exported.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use snapbus_schemas::SchemaDescriptor;

use super::table::Labels;
use crate::fields::{KeyValue, Plan};
use crate::summary_name::SUMMARY_SUFFIX;

/// `text` as a Prometheus metric or label name: characters outside `[a-zA-Z0-9_]` become `_`,
/// and a leading digit (or an empty name) gets a `_` in front.
pub fn metric_name(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1);
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(text.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// Name prefixes of the exporter's own families: a data series whose name starts so is not
/// exported (two families of one name would make the whole scrape invalid).
pub const RESERVED_PREFIXES: [&str; 4] = [
    "snapbus_bus_",
    "snapbus_producer_",
    "snapbus_consumer_",
    "snapbus_exporter_",
];

fn reserved(name: &str) -> bool {
    RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Leaves of a summary schema exported besides the statistics.
const SUMMARY_SCALARS: [&str; 3] = ["count", "lost", "index"];

/// What one leaf becomes.
#[derive(Debug, Clone)]
pub(crate) struct LeafMetric {
    pub(crate) family: Arc<str>,
    pub(crate) help: Arc<str>,
    /// The `stat` label (summaries).
    pub(crate) stat: Option<&'static str>,
}

/// How a schema's records are exported.
#[derive(Debug)]
pub(crate) struct SchemaMap {
    pub(crate) plan: Plan,
    /// Per leaf of the plan: its metric, or `None` (not exported).
    pub(crate) leaves: Vec<Option<LeafMetric>>,
    /// For a summary: the group-by field names after `producer`, `producer_lane`, `window`.
    pub(crate) summary_groups: Option<Vec<String>>,
    pub(crate) schema_id: String,
}

/// The names of the statistics a summary reports.
const STATS: [&str; 9] = [
    "count", "mean", "std", "min", "max", "last", "p50", "p95", "p99",
];

impl SchemaMap {
    /// The map of `schema`.
    pub(crate) fn new(schema: &SchemaDescriptor) -> SchemaMap {
        let id = schema.id();
        if let Some(groups) = summary_groups(schema) {
            let mut keys: Vec<String> = ["producer", "producer_lane", "window"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            keys.extend(groups.iter().map(|g| format!("group.{g}")));
            if let Ok(plan) = Plan::compile(schema.root(), &keys, None, &[]) {
                let leaves = plan
                    .leaves()
                    .iter()
                    .map(|leaf| summary_leaf(id, leaf))
                    .collect();
                return SchemaMap {
                    plan,
                    leaves,
                    summary_groups: Some(groups),
                    schema_id: id.to_owned(),
                };
            }
        }
        let plan = Plan::numeric(schema.root());
        let leaves = plan
            .leaves()
            .iter()
            .map(|leaf| {
                let family = metric_name(&format!("{id}_{leaf}"));
                (!reserved(&family)).then(|| LeafMetric {
                    family: family.into(),
                    help: help_text(&format!("Latest value of field {leaf} of schema {id}")),
                    stat: None,
                })
            })
            .collect();
        SchemaMap {
            plan,
            leaves,
            summary_groups: None,
            schema_id: id.to_owned(),
        }
    }

    /// The label set of a plain schema's series.
    pub(crate) fn plain_labels(&self, producer: &str, tags: &Tags) -> Labels {
        let mut l = vec![
            ("producer".into(), producer.to_owned()),
            ("schema".into(), self.schema_id.clone()),
        ];
        tags.push_into(&mut l);
        l.into()
    }

    /// The label sets of a summary's series from its keys (`producer`, `producer_lane`,
    /// `window`, the groups): per `stat` (or none), with the source producer's tags looked up
    /// by its lane. `None` if the keys do not decode.
    pub(crate) fn summary_labels(
        &self,
        keys: &[KeyValue],
        tags: &HashMap<u64, Tags>,
    ) -> Option<HashMap<Option<&'static str>, Labels>> {
        let groups = self.summary_groups.as_ref()?;
        let (KeyValue::Str(producer), KeyValue::U64(lane), KeyValue::Str(window)) =
            (keys.first()?, keys.get(1)?, keys.get(2)?)
        else {
            return None;
        };
        let mut base = vec![
            ("producer".into(), producer.clone()),
            ("schema".into(), self.schema_id.clone()),
        ];
        if let Some(t) = tags.get(lane) {
            t.push_into(&mut base);
        }
        base.push(("window".into(), window.clone()));
        let mut group_labels = Vec::new();
        for (name, v) in groups.iter().zip(keys.get(3..)?) {
            let value = match v {
                KeyValue::Bool(b) => b.to_string(),
                KeyValue::U64(x) => x.to_string(),
                KeyValue::I64(x) => x.to_string(),
                KeyValue::F64(x) => x.to_string(),
                KeyValue::Str(s) => s.clone(),
            };
            group_labels.push((group_label(name), value));
        }
        let mut out = HashMap::new();
        for stat in std::iter::once(None).chain(STATS.iter().map(|s| Some(*s))) {
            let mut l: Vec<(Cow<'static, str>, String)> = base.clone();
            l.extend(group_labels.iter().cloned());
            if let Some(s) = stat {
                l.push(("stat".into(), s.to_owned()));
            }
            out.insert(stat, l.into());
        }
        Some(out)
    }
}

/// `text` as a HELP line may hold it (prometheus-client writes HELP as given): backslashes
/// and line breaks escaped as the exposition formats escape them, other control characters
/// dropped. A field name is any string, and one line break would spoil every scrape.
fn help_text(text: &str) -> Arc<str> {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.into()
}

/// `group_<field>` as a label name.
fn group_label(field: &str) -> Cow<'static, str> {
    metric_name(&format!("group_{field}")).into()
}

/// A producer's run metadata, as labels: its pid (two producers of one name, such as forked
/// workers or two runs, are two series, not one that flips between them), its tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tags {
    pub(crate) pid: Option<u32>,
    pub(crate) session_tag: Option<String>,
    pub(crate) perf_tag: Option<String>,
}

impl Tags {
    fn push_into(&self, l: &mut Vec<(Cow<'static, str>, String)>) {
        if let Some(pid) = self.pid {
            l.push(("pid".into(), pid.to_string()));
        }
        if let Some(s) = &self.session_tag {
            l.push(("session_tag".into(), s.clone()));
        }
        if let Some(p) = &self.perf_tag {
            l.push(("perf_tag".into(), p.clone()));
        }
    }
}

/// The group-by fields of an aggregator summary schema, if `schema` is one.
fn summary_groups(schema: &SchemaDescriptor) -> Option<Vec<String>> {
    if !schema.id().ends_with(SUMMARY_SUFFIX) {
        return None;
    }
    let fields = schema.root().fields();
    let has = |n: &str| fields.iter().any(|f| f.name == n);
    if !(has("producer") && has("producer_lane") && has("window") && has("stats")) {
        return None;
    }
    Some(
        fields
            .iter()
            .find(|f| f.name == "group")
            .map(|g| g.ty.fields().iter().map(|f| f.name.clone()).collect())
            .unwrap_or_default(),
    )
}

/// What leaf `leaf` of summary schema `id` becomes: `stats.<field>.<stat>` → family
/// `<id>_<field>` with label `stat`; `count`, `lost`, `index` → `<id>_<leaf>`; the rest
/// (pids, lanes, times, record numbers) is not exported.
fn summary_leaf(id: &str, leaf: &str) -> Option<LeafMetric> {
    if let Some(rest) = leaf.strip_prefix("stats.") {
        let (field, stat) = rest.rsplit_once('.')?;
        let stat = STATS.iter().find(|s| **s == stat)?;
        let family = metric_name(&format!("{id}_{field}"));
        if reserved(&family) {
            return None;
        }
        return Some(LeafMetric {
            family: family.into(),
            help: help_text(&format!(
                "Statistics of field {field} in the windows of {id}"
            )),
            stat: Some(stat),
        });
    }
    let family = metric_name(&format!("{id}_{leaf}"));
    (SUMMARY_SCALARS.contains(&leaf) && !reserved(&family)).then(|| LeafMetric {
        family: family.into(),
        help: help_text(&format!("The {leaf} of the last window of {id}")),
        stat: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use snapbus_schemas::DType;

    #[test]
    fn help_text_escapes_what_would_break_the_exposition() {
        assert_eq!(
            &*help_text("field a\nb\\c\u{7} of x"),
            "field a\\nb\\\\c of x"
        );
        let map = SchemaMap::new(
            &snapbus_schemas::SchemaDescriptor::new(
                "odd.schema",
                1,
                vec![snapbus_schemas::Field::new(
                    "a\nb",
                    snapbus_schemas::DType::F64.into(),
                )]
                .into(),
            )
            .expect("a field name may hold a line break"),
        );
        let help = &map.leaves[0].as_ref().expect("a leaf").help;
        assert!(!help.contains('\n'), "{help}");
    }

    #[test]
    fn names_are_sanitised() {
        assert_eq!(metric_name("demo.step_reward"), "demo_step_reward");
        assert_eq!(metric_name("a-b.c:d é"), "a_b_c_d__");
        assert_eq!(metric_name("0day.x"), "_0day_x");
        assert_eq!(metric_name(""), "_");
        assert_eq!(metric_name("position.0"), "position_0");
        assert_eq!(group_label("env.id"), "group_env_id");
    }

    #[test]
    fn summary_leaves_map_to_a_family_and_a_stat() {
        let l = summary_leaf("demo.step.summary", "stats.position.0.p95").expect("a metric");
        assert_eq!(&*l.family, "demo_step_summary_position_0");
        assert_eq!(l.stat, Some("p95"));
        let l = summary_leaf("demo.step.summary", "lost").expect("a metric");
        assert_eq!(&*l.family, "demo_step_summary_lost");
        assert_eq!(l.stat, None);
        assert!(summary_leaf("demo.step.summary", "first_t_nanos").is_none());
        assert!(summary_leaf("demo.step.summary", "producer_pid").is_none());
    }

    #[test]
    fn data_never_takes_the_name_of_an_exporter_family() {
        let s = SchemaDescriptor::new(
            "snapbus.producer",
            1,
            vec![
                snapbus_schemas::Field::new("records", DType::F64.into()),
                snapbus_schemas::Field::new("x", DType::F64.into()),
            ]
            .into(),
        )
        .expect("schema");
        let m = SchemaMap::new(&s);
        assert!(m.leaves.iter().all(Option::is_none), "{:?}", m.leaves);
        // Built-in schemas are not reserved: snapbus.duration → snapbus_duration_….
        assert!(!reserved("snapbus_duration_nanos"));
    }
}

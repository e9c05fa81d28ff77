//! `query_recording`: records of a recording filtered by schema, time, episode and field
//! predicates, projected to some fields, optionally one per episode (its first or last
//! record), with statistics of numeric fields over what matched. One pass over the file; only
//! the records of the asked schemas are decoded.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use anyhow::Context;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json, json};
use snapbus_consumers::recording::{Item, Message, RecordingReader};
use snapbus_schemas::Value;

use super::Config;
use super::json::{compact, cursor, page};
use crate::bus::globs;

/// A condition on a field: `{"field": "result", "op": "==", "value": "confused"}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct Condition {
    /// Dotted path of a field, e.g. `result` or `lm.1.evidence`.
    pub(crate) field: String,
    /// One of `==`, `!=`, `<`, `<=`, `>`, `>=`, `in` (value: a list), `contains` (strings).
    pub(crate) op: String,
    /// A number, string, bool, or (for `in`) a list of them.
    pub(crate) value: Json,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct QueryIn {
    /// The recording (an `.mcap` file written by the recorder or `snapbus snapshot`).
    pub(crate) path: String,
    /// Schema-id glob of the records to query, e.g. `monty.step`.
    pub(crate) schema: String,
    /// Only records at or after this time (Unix nanoseconds).
    pub(crate) since_nanos: Option<u64>,
    /// Only records before this time (Unix nanoseconds).
    pub(crate) until_nanos: Option<u64>,
    /// Only these episodes (values of `episode_field`).
    pub(crate) episodes: Option<Vec<i64>>,
    /// The field that numbers episodes (default `episode`).
    pub(crate) episode_field: Option<String>,
    /// Conditions every returned record meets.
    #[serde(rename = "where")]
    pub(crate) conditions: Option<Vec<Condition>>,
    /// Only these fields of each record (dotted paths; default all).
    pub(crate) fields: Option<Vec<String>>,
    /// `first` or `last`: one record per episode (its first or last that matched).
    pub(crate) per_episode: Option<String>,
    /// Numeric fields to give count, mean, min and max of over the matched records.
    pub(crate) stats: Option<Vec<String>>,
    /// Arrays and tensors in full (default: more than 16 elements are summarized).
    pub(crate) full_arrays: Option<bool>,
    /// At most this many records (after `per_episode`).
    pub(crate) limit: Option<usize>,
    /// A cursor from an earlier call, to continue a cut result.
    pub(crate) cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct QueryOut {
    /// The records: t_nanos, producer, seq, and the (projected) fields.
    pub(crate) records: Vec<Json>,
    /// Records that matched (before `limit` and the byte budget).
    pub(crate) matched: u64,
    /// Records of the asked schemas read.
    pub(crate) scanned: u64,
    /// Per `stats` field: count, mean, min, max over the matched records.
    pub(crate) stats: BTreeMap<String, Json>,
    /// Damage, losses and cuts met while reading (the records there are missing).
    pub(crate) warnings: Vec<String>,
    /// Give it back as `cursor` for the rest of the records.
    pub(crate) next_cursor: Option<String>,
}

/// Running count, sum, min and max of one numeric field.
#[derive(Default)]
struct Stat {
    n: u64,
    sum: f64,
    min: f64,
    max: f64,
}

pub(crate) fn query(cfg: &Config, p: QueryIn) -> anyhow::Result<QueryOut> {
    let start = cursor(p.cursor.as_deref()).map_err(anyhow::Error::msg)?;
    let path = super::resolve_recording(cfg, &p.path)?;
    let globs = globs(std::slice::from_ref(&p.schema))?;
    let per_episode = match p.per_episode.as_deref() {
        None => None,
        Some(w @ ("first" | "last")) => Some(w == "last"),
        Some(other) => anyhow::bail!("per_episode: expected first or last, got {other:?}"),
    };
    let conditions = p.conditions.unwrap_or_default();
    for c in &conditions {
        check_op(c)?;
    }
    let episode_field = p.episode_field.unwrap_or_else(|| "episode".to_owned());
    let full = p.full_arrays.unwrap_or(false);
    let file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let reader = RecordingReader::new(BufReader::with_capacity(1 << 20, file)).with_resync();
    let mut out = Collect {
        rows: Vec::new(),
        by_episode: BTreeMap::new(),
        stats: p
            .stats
            .unwrap_or_default()
            .into_iter()
            .map(|f| (f, Stat::default()))
            .collect(),
        scanned: 0,
        matched: 0,
    };
    let mut warnings = Vec::new();
    for item in reader {
        let m = match item {
            Ok(Item::Message(m)) => m,
            Ok(Item::Loss { record, .. }) => {
                warnings.push(format!(
                    "{} records of producer {} lost before they were recorded",
                    record.lost + record.damaged,
                    record.producer_pid
                ));
                continue;
            }
            Ok(Item::Damaged(d)) => {
                warnings.push(format!(
                    "damaged bytes skipped at {}: {}",
                    d.offset, d.error
                ));
                continue;
            }
            Ok(Item::Metadata { .. }) => continue,
            Err(e) => {
                warnings.push(format!("reading stopped: {e}"));
                break;
            }
        };
        if !globs.iter().any(|g| g.matches(m.channel.schema.id())) {
            continue;
        }
        if p.since_nanos.is_some_and(|t| m.t_nanos < t)
            || p.until_nanos.is_some_and(|t| m.t_nanos >= t)
        {
            continue;
        }
        out.scanned += 1;
        let Ok(v) = m.channel.schema.decode(&m.data) else {
            warnings.push(format!(
                "an undecodable record of {}",
                m.channel.schema.id()
            ));
            continue;
        };
        let episode = v.path(&episode_field).and_then(Value::as_f64);
        if let Some(want) = &p.episodes {
            if !episode.is_some_and(|e| want.iter().any(|w| *w as f64 == e)) {
                continue;
            }
        }
        if !conditions.iter().all(|c| holds(c, v.path(&c.field))) {
            continue;
        }
        out.add(&m, &v, episode, per_episode, p.fields.as_deref(), full);
    }
    warnings.truncate(20);
    let mut rows = match per_episode {
        Some(_) => out.by_episode.into_values().collect(),
        None => out.rows,
    };
    if let Some(n) = p.limit {
        rows.truncate(n);
    }
    let (records, next_cursor) = page(rows, start, cfg.max_result_bytes);
    Ok(QueryOut {
        records,
        matched: out.matched,
        scanned: out.scanned,
        stats: out
            .stats
            .into_iter()
            .map(|(f, s)| {
                let v = if s.n == 0 {
                    json!({ "count": 0 })
                } else {
                    json!({ "count": s.n, "mean": s.sum / s.n as f64, "min": s.min, "max": s.max })
                };
                (f, v)
            })
            .collect(),
        warnings,
        next_cursor,
    })
}

/// What matched so far.
struct Collect {
    rows: Vec<Json>,
    /// With `per_episode`: the episode's row (as a sortable key: episodes in order).
    by_episode: BTreeMap<i64, Json>,
    stats: BTreeMap<String, Stat>,
    scanned: u64,
    matched: u64,
}

impl Collect {
    fn add(
        &mut self,
        m: &Message,
        v: &Value<'_>,
        episode: Option<f64>,
        per_episode: Option<bool>,
        fields: Option<&[String]>,
        full: bool,
    ) {
        self.matched += 1;
        for (f, s) in &mut self.stats {
            if let Some(x) = v.path(f).and_then(Value::as_f64).filter(|x| !x.is_nan()) {
                if s.n == 0 {
                    (s.min, s.max) = (x, x);
                }
                s.n += 1;
                s.sum += x;
                s.min = s.min.min(x);
                s.max = s.max.max(x);
            }
        }
        let row = || {
            let mut r = Map::new();
            r.insert("schema".into(), json!(m.channel.schema.id()));
            r.insert("t_nanos".into(), json!(m.t_nanos));
            r.insert(
                "producer".into(),
                json!({ "name": m.channel.producer, "pid": m.channel.pid }),
            );
            r.insert("seq".into(), json!(m.sequence));
            match fields {
                Some(fields) => {
                    for f in fields {
                        r.insert(
                            f.clone(),
                            v.path(f).map_or(Json::Null, |x| compact(x, full)),
                        );
                    }
                }
                None => {
                    r.insert("payload".into(), compact(v, full));
                }
            }
            Json::Object(r)
        };
        match (per_episode, episode) {
            (None, _) => self.rows.push(row()),
            (Some(_), None) => {}
            (Some(last), Some(e)) => {
                let key = e as i64;
                if last || !self.by_episode.contains_key(&key) {
                    self.by_episode.insert(key, row());
                }
            }
        }
    }
}

fn check_op(c: &Condition) -> anyhow::Result<()> {
    match c.op.as_str() {
        "==" | "!=" | "<" | "<=" | ">" | ">=" | "contains" => Ok(()),
        "in" if c.value.is_array() => Ok(()),
        "in" => anyhow::bail!("where {}: `in` takes a list", c.field),
        other => anyhow::bail!(
            "where {}: unknown op {other:?} (==, !=, <, <=, >, >=, in, contains)",
            c.field
        ),
    }
}

/// Whether field value `v` (absent: `None`) meets `c`.
fn holds(c: &Condition, v: Option<&Value<'_>>) -> bool {
    let Some(v) = v else {
        return c.op == "!=";
    };
    let v = match v {
        Value::Option(Some(inner)) => inner.as_ref(),
        v => v,
    };
    match c.op.as_str() {
        "==" => equals(v, &c.value),
        "!=" => !equals(v, &c.value),
        "in" => c
            .value
            .as_array()
            .is_some_and(|a| a.iter().any(|w| equals(v, w))),
        "contains" => match (v, c.value.as_str()) {
            (Value::Str(s), Some(w)) => s.contains(w),
            _ => false,
        },
        op => match (v.as_f64(), c.value.as_f64()) {
            (Some(x), Some(w)) => match op {
                "<" => x < w,
                "<=" => x <= w,
                ">" => x > w,
                ">=" => x >= w,
                _ => false,
            },
            _ => false,
        },
    }
}

fn equals(v: &Value<'_>, w: &Json) -> bool {
    match (v, w) {
        (Value::Str(s), Json::String(t)) => s == t,
        (Value::Variant { name, .. }, Json::String(t)) => name == t,
        (Value::Bool(b), Json::Bool(c)) => b == c,
        (v, Json::Number(n)) => v.as_f64().zip(n.as_f64()).is_some_and(|(a, b)| a == b),
        _ => false,
    }
}

/// The recordings in the configured directories (and one level below), newest first.
pub(crate) fn recordings(cfg: &Config) -> Vec<(PathBuf, std::fs::Metadata)> {
    fn walk(dir: &std::path::Path, depth: u32, found: &mut Vec<(PathBuf, std::fs::Metadata)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() && depth > 0 {
                walk(&path, depth - 1, found);
            } else if meta.is_file() && path.extension().is_some_and(|x| x == "mcap") {
                found.push((path, meta));
            }
        }
    }
    let mut found = Vec::new();
    for d in &cfg.recordings {
        walk(d, 1, &mut found);
    }
    found.sort_by_key(|(_, m)| std::cmp::Reverse(m.modified().ok()));
    found
}

//! The tools over the live bus: `ls`, `describe_schema`, `tail` and `summarize`. Each reads
//! the rings as any consumer does (a producer never waits for it), and is bounded: a count, a
//! time limit, what the rings hold now.

use std::sync::Arc;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use snapbus_bus::client::Census;
use snapbus_bus::lane::StartAt;
use snapbus_bus::subscriber::{Event, SubscribeOptions, Subscriber};
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, Window};
use snapbus_consumers::fields::{Plan, unit_of};
use snapbus_consumers::{RunOptions, run as run_consumer};
use snapbus_schemas::SchemaDescriptor;

use super::Config;
use super::json::{compact, cursor, page};
use crate::bus::{bus_dir, connect, globs};

/// What `ls` returns: the bus as `snapbus ls --json` describes it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct LsOut {
    /// The bus name.
    pub(crate) bus: String,
    /// Producers: info (name, pid, tags), status, records, rate_hz, dropped, history.
    pub(crate) producers: Vec<Json>,
    /// Consumers: info (kind), status, lag, lost records, status board.
    pub(crate) consumers: Vec<Json>,
    /// Schemas: id, version, rate_hz, records in the rings, producers.
    pub(crate) schemas: Vec<Json>,
}

pub(crate) fn ls(cfg: &Config) -> anyhow::Result<LsOut> {
    let dir = bus_dir(&cfg.bus)?;
    let s = connect(&dir)?.state_with(Census::Recent)?;
    let mut v = crate::command::ls::ls_json(&s)?;
    let mut take = |k: &str| match v.get_mut(k).map(Json::take) {
        Some(Json::Array(a)) => a,
        _ => Vec::new(),
    };
    Ok(LsOut {
        producers: take("producers"),
        consumers: take("consumers"),
        schemas: take("schemas"),
        bus: s.bus,
    })
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct DescribeIn {
    /// The schema id, e.g. `demo.step`.
    pub(crate) schema: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct DescribeOut {
    /// Every registered version of the schema on the bus: version, fingerprint, descriptor
    /// (as text), rate_hz, records in the rings, producers, conflict.
    pub(crate) versions: Vec<Json>,
    /// A JSON Schema of the records' JSON form (fields, types, nesting), from a record in the
    /// rings; null if the rings hold none.
    pub(crate) json_schema: Option<Json>,
    /// The numeric leaves (dotted paths, as the aggregator and the exporters name them), with
    /// their unit where the field's name says it (`_nanos`, `_bytes`, `_hz`, …; UCUM).
    pub(crate) numeric_fields: Vec<Json>,
}

pub(crate) fn describe(cfg: &Config, p: DescribeIn) -> anyhow::Result<DescribeOut> {
    let dir = bus_dir(&cfg.bus)?;
    let s = connect(&dir)?.state_with(Census::Recent)?;
    let versions: Vec<Json> = s
        .schemas
        .iter()
        .filter(|x| x.id == p.schema)
        .map(|x| {
            json!({
                "version": x.version, "fingerprint": x.fingerprint, "descriptor": x.descriptor,
                "rate_hz": x.rate_hz, "in_rings": x.in_rings, "producers": x.producers,
                "conflict": x.conflict,
            })
        })
        .collect();
    if versions.is_empty() {
        let ids: Vec<&str> = s.schemas.iter().map(|x| x.id.as_str()).collect();
        anyhow::bail!(
            "no schema {:?} on bus '{}' (it has: {})",
            p.schema,
            s.bus,
            ids.join(", ")
        );
    }
    let desc = first_descriptor(cfg, &p.schema)?;
    let numeric_fields = desc.as_ref().map_or_else(Vec::new, |d| {
        Plan::numeric(d.root())
            .leaves()
            .iter()
            .map(|leaf| json!({ "field": leaf, "unit": unit_of(leaf).map(|u| u.ucum) }))
            .collect()
    });
    Ok(DescribeOut {
        versions,
        json_schema: desc.map(|d| d.to_json_schema()),
        numeric_fields,
    })
}

/// The descriptor of the first record of `id` the rings hold (read up to now, not waited for).
fn first_descriptor(cfg: &Config, id: &str) -> anyhow::Result<Option<Arc<SchemaDescriptor>>> {
    let dir = bus_dir(&cfg.bus)?;
    let mut sub = Subscriber::connect(
        &dir,
        SubscribeOptions {
            kind: "mcp".into(),
            globs: globs(&[id.to_owned()])?,
            start: StartAt::Oldest,
            cut: true,
            skip_lanes: Vec::new(),
            count_history_as_lost: false,
        },
    )?;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) && !sub.all_ended() {
        if let Some(Event::Record(r)) = sub.next(Duration::from_millis(50))? {
            return Ok(Some(Arc::clone(r.schema)));
        }
    }
    Ok(None)
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct TailIn {
    /// Schema-id glob, e.g. `demo.step` or `demo.*`.
    pub(crate) schema: String,
    /// How many records at most (1 to 1000; default 10).
    pub(crate) count: Option<u32>,
    /// How long to wait for them at most, in milliseconds (default 2000, at most 60000).
    pub(crate) timeout_ms: Option<u64>,
    /// `latest` (default: records emitted from now on) or `oldest` (what the rings hold
    /// first).
    pub(crate) from: Option<String>,
    /// Arrays and tensors in full (default: more than 16 elements are summarized as dtype,
    /// shape, min, max, mean).
    pub(crate) full_arrays: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct TailOut {
    /// The records: schema, version, level, t_nanos, producer {name, pid}, seq, payload.
    pub(crate) records: Vec<Json>,
    /// Records overwritten before they could be read meanwhile.
    pub(crate) lost: u64,
    /// Whether records were left out to keep the result within the server's byte budget.
    pub(crate) truncated: bool,
}

pub(crate) fn tail(cfg: &Config, p: TailIn) -> anyhow::Result<TailOut> {
    let count = p.count.unwrap_or(10).clamp(1, 1000) as usize;
    let timeout = Duration::from_millis(p.timeout_ms.unwrap_or(2000).min(60_000));
    let start = match p.from.as_deref() {
        None | Some("latest") => StartAt::Latest,
        Some("oldest") => StartAt::Oldest,
        Some(other) => anyhow::bail!("from: expected latest or oldest, got {other:?}"),
    };
    let dir = bus_dir(&cfg.bus)?;
    let mut sub = Subscriber::connect(
        &dir,
        SubscribeOptions {
            kind: "mcp".into(),
            globs: globs(std::slice::from_ref(&p.schema))?,
            start,
            cut: false,
            skip_lanes: Vec::new(),
            count_history_as_lost: false,
        },
    )?;
    let full = p.full_arrays.unwrap_or(false);
    let (mut records, mut lost) = (Vec::new(), 0);
    let t0 = Instant::now();
    while records.len() < count {
        let Some(left) = timeout.checked_sub(t0.elapsed()) else {
            break;
        };
        match sub.next(left.min(Duration::from_millis(100)))? {
            Some(Event::Record(r)) => {
                let payload = match r.schema.decode(r.payload) {
                    Ok(v) => compact(&v, full),
                    Err(e) => json!({ "decode_error": e.to_string() }),
                };
                records.push(json!({
                    "schema": r.schema.id(), "version": r.schema.version(),
                    "level": crate::bus::level_name(r.meta.level), "t_nanos": r.meta.t_nanos,
                    "producer": { "name": r.producer.name, "pid": r.producer.pid },
                    "seq": r.meta.seq, "payload": payload,
                }));
            }
            Some(Event::Lagged {
                lost: l, damaged, ..
            }) => lost += l + damaged,
            _ => {}
        }
    }
    let n = records.len();
    let (records, _) = page(records, 0, cfg.max_result_bytes);
    Ok(TailOut {
        truncated: records.len() < n,
        records,
        lost,
    })
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SummarizeIn {
    /// Schema-id glob of the step events to summarize, e.g. `demo.step`.
    pub(crate) schema: String,
    /// `episode` (default), `steps:N` or `secs:T`.
    pub(crate) window: Option<String>,
    /// The integer field that numbers episodes (default `episode`).
    pub(crate) episode_field: Option<String>,
    /// Fields whose values split the records into groups (dotted paths).
    pub(crate) group_by: Option<Vec<String>>,
    /// Only these fields (dotted-path globs; default every numeric field).
    pub(crate) fields: Option<Vec<String>>,
    /// One experiment summary per run (producers with the same name and session tag)
    /// rather than per producer.
    pub(crate) combine_producers: Option<bool>,
    /// A cursor from an earlier call, to continue a cut result.
    pub(crate) cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SummarizeOut {
    /// The summaries `snapbus aggregate` emits, as `echo` prints their payloads: producer,
    /// group, window (`episode`, … or `experiment`), index, count, lost, stats {field {count,
    /// mean, std, min, max, last, p50, p95, p99}}.
    pub(crate) summaries: Vec<Json>,
    /// Producers still running: their last window and their experiment are as they stand now
    /// (the rings are read up to now).
    pub(crate) live_producers: Vec<String>,
    /// Give it back as `cursor` for the rest of the summaries.
    pub(crate) next_cursor: Option<String>,
}

/// What `snapbus aggregate --from oldest` would emit for what the rings hold now: the
/// aggregator runs in this process over a consistent cut of the rings (each producer read up
/// to where it had written), so producers still running end at the cut.
pub(crate) fn summarize(cfg: &Config, p: SummarizeIn) -> anyhow::Result<SummarizeOut> {
    let start = cursor(p.cursor.as_deref()).map_err(anyhow::Error::msg)?;
    let window: Window = p
        .window
        .as_deref()
        .unwrap_or("episode")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let mut opts = AggregatorOptions::new(window);
    opts.globs = globs(std::slice::from_ref(&p.schema))?;
    opts.group_by = p.group_by.unwrap_or_default();
    opts.fields = globs(&p.fields.unwrap_or_default())?;
    if let Some(f) = p.episode_field {
        opts.episode_field = f;
    }
    opts.combine_producers = p.combine_producers.unwrap_or(false);
    opts.combine_grace = Duration::ZERO;
    let dir = bus_dir(&cfg.bus)?;
    let live_producers: Vec<String> = connect(&dir)?
        .state_with(Census::Recent)?
        .producers
        .iter()
        .filter(|p| p.status.as_str() == "live")
        .map(|p| format!("{} (pid {})", p.info.name, p.info.pid))
        .collect();
    let mut agg = Aggregator::new(opts.clone(), Vec::new());
    let mut run_opts = RunOptions::new("mcp-summarize");
    run_opts.subscribe.globs = opts.globs.clone();
    run_opts.subscribe.start = StartAt::Oldest;
    run_opts.subscribe.cut = true;
    run_opts.subscribe.count_history_as_lost = true;
    run_opts.until_end = true;
    run_opts.handle_signals = false;
    run_consumer(&dir, &run_opts, &mut agg, None)?;
    agg.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
    let rows: Vec<Json> = agg
        .sink()
        .iter()
        .map(|(desc, payload)| match desc.decode(payload) {
            Ok(v) => compact(&v, true),
            Err(e) => json!({ "decode_error": e.to_string() }),
        })
        .collect();
    let (summaries, next_cursor) = page(rows, start, cfg.max_result_bytes);
    Ok(SummarizeOut {
        summaries,
        live_producers,
        next_cursor,
    })
}

//! The Prometheus exporter: the latest value of every numeric field of the subscribed schemas
//! (and of the aggregator's summaries) as gauges on an HTTP `/metrics` endpoint in OpenMetrics
//! text, with the bus's own health and the exporter's counters.
//!
//! # Guarantees
//!
//! - **Scrapes never slow the reader, and the reader never slows a producer.** The reader
//!   thread ([`Exporter`], a [`Consumer`]) owns the last-value table; about four times a second
//!   ([`PUBLISH_EVERY`]) it publishes a snapshot of it, a pointer swap under a mutex. The HTTP
//!   server runs on its own threads and renders from that snapshot: a stalled or slow scraper
//!   holds nothing the reader needs.
//! - **Bounded.** At most [`PrometheusOptions::max_series`] data series; a new series beyond
//!   that is refused and counted (`snapbus_exporter_series_dropped_total{reason="cardinality"}`,
//!   and `dropped.cardinality` on the status board). Series expire when their producer ends or
//!   dies (once a scrape served their last value) or when not updated for
//!   [`PrometheusOptions::series_ttl`].
//! - **Bounded labels only**: `producer` (its name), `schema`, `session_tag`, `perf_tag`, and
//!   for summaries `window` (the window kind), `stat` and the aggregator's group-by values
//!   (`group_<field>`). Episode and step numbers are values (gauges), never labels. No sample
//!   carries a timestamp (Prometheus stamps the scrape; producer times travel over OTLP).
//! - **Consistent scrapes.** A snapshot is taken between records, so the gauges of one record
//!   (`demo_step_episode`, `demo_step_step`, `demo_step_reward`) always come from the same
//!   record in one scrape.
//!
//! - **Private.** Every request must carry the bus's bearer token ([`auth`]), like the
//!   plotter's: every local user can reach 127.0.0.1.
//!
//! # What `/metrics` holds
//!
//! - Data: see [`names`] for the naming. `demo.step`'s `reward` of producer `demo` is
//!   `demo_step_reward{producer="demo",schema="demo.step",pid="4242"}`.
//! - The bus, asked from the broker every 2 s by a thread of its own (counters only, through
//!   [`BusClient`](snapbus_bus::client::BusClient)):
//!   `snapbus_bus_up`; per producer (`producer`, `pid`, tags) `snapbus_producer_records_total`,
//!   `…_dropped_total`, `…_rate_hz`, `…_lane_bytes`, `…_live`; per consumer (`consumer` id,
//!   `kind`, `pid`) `snapbus_consumer_delivered_total`, `…_lost_total`, `…_lag_bytes` and the
//!   numeric entries of its status board as `snapbus_consumer_status{key=…}`.
//! - The exporter: `snapbus_exporter_scrapes_total`, `…_records_total`,
//!   `…_malformed_records_total`, `…_series`, `…_series_dropped_total{reason}`,
//!   `…_series_expired_total{reason="ttl"|"producer_end"}`.
//!
//! # Example
//!
//! ```no_run
//! use snapbus_consumers::prelude::*;
//! use snapbus_consumers::prometheus::{Exporter, PrometheusOptions};
//!
//! let dir = BusDir::locate(&BusName::resolve(None)?);
//! let mut exporter = Exporter::new(PrometheusOptions::default());
//! let token_file = snapbus_consumers::prometheus::auth::token_path(&dir, None);
//! let token = snapbus_consumers::prometheus::auth::load_or_create(&token_file)?;
//! let server = exporter.serve("127.0.0.1:9464".parse()?, Some(dir.clone()), token)?;
//! println!("scrape {} with the bearer token in {}", server.url(), token_file.display());
//! run(&dir, &exporter.run_options(), &mut exporter, None)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod auth;
mod health;
mod http;
pub mod names;
mod table;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use snapbus_bus::runtime::BusDir;
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::status::StatusBoard;
#[cfg(test)]
use snapbus_bus::status::StatusValue;

pub use http::{
    BROKER_TIMEOUT, BUS_STATE_EVERY, BUS_STATE_MAX_AGE, CONTENT_TYPE, MAX_REQUESTS, Server,
};
pub use table::TableCounters;

use crate::fields::{Extracted, decode_group};
use crate::{BatchReads, Consumer, Extract, Flow, HookError, ProducerChange, Record, RunOptions};
use names::{SchemaMap, Tags};
use table::{Labels, Shared, Slot, Table};

/// How often the reader publishes a snapshot for the scrapes.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(250);
/// The default port (the one OpenTelemetry's Prometheus exporters use).
pub const DEFAULT_PORT: u16 = 9464;

/// How the exporter bounds itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrometheusOptions {
    /// Data series at most (default 10 000).
    pub max_series: usize,
    /// A series not updated for this long is removed (default 5 minutes).
    pub series_ttl: Duration,
}

impl Default for PrometheusOptions {
    fn default() -> Self {
        PrometheusOptions {
            max_series: 10_000,
            series_ttl: Duration::from_secs(300),
        }
    }
}

/// Where a binding's leaves go: per leaf, its table slot (`None`: not exported or refused).
#[derive(Debug)]
struct Binding {
    map: Arc<SchemaMap>,
    slots: Vec<Option<usize>>,
}

/// The exporter's reader: a [`Consumer`] keeping the last value of every series.
#[derive(Debug)]
pub struct Exporter {
    table: Table,
    shared: Arc<Shared>,
    board: StatusBoard,
    /// Schema maps by descriptor fingerprint.
    maps: HashMap<u64, Arc<SchemaMap>>,
    /// Plain schemas: by (lane, schema key).
    plain: HashMap<(u64, u16), Binding>,
    /// Summaries: by (lane, schema key), then the record's keys (producer, window, groups).
    summaries: HashMap<(u64, u16), HashMap<Vec<u8>, Binding>>,
    /// The table epoch the bindings belong to.
    epoch: u64,
    tags: HashMap<u64, Tags>,
    extracted: Extracted,
    records: u64,
    malformed: u64,
}

impl Exporter {
    /// An exporter with nothing read yet.
    pub fn new(opts: PrometheusOptions) -> Exporter {
        let board = StatusBoard::new();
        board.set("state", "ok");
        Exporter {
            table: Table::new(opts.max_series, opts.series_ttl),
            shared: Arc::new(Shared::default()),
            board,
            maps: HashMap::new(),
            plain: HashMap::new(),
            summaries: HashMap::new(),
            epoch: 0,
            tags: HashMap::new(),
            extracted: Extracted::default(),
            records: 0,
            malformed: 0,
        }
    }

    /// Serves `/metrics` on `listen` from a thread (with the health of the bus of `bus`, if
    /// given) to requests that carry `token` (`Authorization: Bearer TOKEN`, see [`auth`]);
    /// returns once the socket is listening (an address in use is an error here).
    pub fn serve(
        &self,
        listen: SocketAddr,
        bus: Option<BusDir>,
        token: String,
    ) -> std::io::Result<Server> {
        http::serve(Arc::clone(&self.shared), listen, bus, token)
    }

    /// Run options for it: kind `prometheus`, its status board, publishing every
    /// [`PUBLISH_EVERY`] (set `globs` and `start` as needed).
    pub fn run_options(&self) -> RunOptions {
        let mut o = RunOptions::new("prometheus");
        o.flush_every = PUBLISH_EVERY;
        o.status = Some(self.board.clone());
        // Scrapes every few seconds need no microseconds: read a batch behind the producers.
        o.batch = Some(BatchReads::default());
        o
    }

    /// Its status board (`state`, `scrapes`, `last_scrape_secs`, `series`,
    /// `dropped.cardinality`, …).
    pub fn board(&self) -> &StatusBoard {
        &self.board
    }

    /// The table's counters as of the last publish.
    pub fn counters(&self) -> TableCounters {
        self.table.counters
    }

    fn map_of(&mut self, r: &Record<'_>) -> Arc<SchemaMap> {
        let fp = r.schema.fingerprint();
        Arc::clone(
            self.maps
                .entry(fp)
                .or_insert_with(|| Arc::new(SchemaMap::new(r.schema))),
        )
    }

    fn bind_plain(&mut self, r: &Record<'_>) -> Binding {
        let map = self.map_of(r);
        let tags = self
            .tags
            .get(&r.producer.lane_id)
            .cloned()
            .unwrap_or_else(|| Tags {
                pid: Some(r.producer.pid),
                session_tag: r.producer.session_tag.map(str::to_owned),
                perf_tag: r.producer.perf_tag.map(str::to_owned),
            });
        let labels = map.plain_labels(r.producer.name, &tags);
        let slots = bind_leaves(&mut self.table, &map, r.producer.lane_id, |_| {
            Some(Arc::clone(&labels))
        });
        Binding { map, slots }
    }

    fn on_summary(&mut self, r: &Record<'_>, map: Arc<SchemaMap>) {
        let key = (r.producer.lane_id, r.header.schema_key);
        if let Err(_e) = map.plan.extract(r.payload, &mut self.extracted) {
            self.malformed += 1;
            return;
        }
        let found = self
            .summaries
            .get(&key)
            .is_some_and(|m| m.contains_key(self.extracted.group.as_slice()));
        if !found {
            let slots = decode_group(&self.extracted.group, map.plan.keys().len())
                .and_then(|keys| map.summary_labels(&keys, &self.tags))
                .map(|sets| {
                    bind_leaves(&mut self.table, &map, r.producer.lane_id, |stat| {
                        sets.get(&stat).cloned()
                    })
                })
                .unwrap_or_else(|| vec![None; map.leaves.len()]);
            let cap = 4 * self.table_cap();
            let per_key = self.summaries.entry(key).or_default();
            if per_key.len() >= cap {
                per_key.clear();
            }
            per_key.insert(self.extracted.group.clone(), Binding { map, slots });
        }
        let b = &self.summaries[&key][self.extracted.group.as_slice()];
        for (slot, v) in b.slots.iter().zip(&self.extracted.values) {
            if let Some(i) = slot {
                self.table.set(*i, *v);
            }
        }
    }

    fn table_cap(&self) -> usize {
        self.table.counters.series as usize + 1024
    }
}

/// Binds each exported leaf of `map` to a table slot, with the label set `labels(stat)`.
fn bind_leaves(
    table: &mut Table,
    map: &SchemaMap,
    lane: u64,
    labels: impl Fn(Option<&'static str>) -> Option<Labels>,
) -> Vec<Option<usize>> {
    map.leaves
        .iter()
        .map(|leaf| {
            let leaf = leaf.as_ref()?;
            let l = labels(leaf.stat)?;
            match table.bind(&leaf.family, &leaf.help, &l, lane) {
                Slot::At(i) => Some(i),
                Slot::Refused => None,
            }
        })
        .collect()
}

impl Exporter {
    /// Bindings are for one table epoch: series removed since, slot numbers may be reused;
    /// bind again.
    fn check_epoch(&mut self) {
        if self.table.epoch != self.epoch {
            self.plain.clear();
            self.summaries.clear();
            self.epoch = self.table.epoch;
        }
    }

    /// Sets the series of a plain (not summary) record from its extracted `values`.
    fn set_plain(&mut self, key: (u64, u16), values: &[f64]) {
        let b = &self.plain[&key];
        for (slot, v) in b.slots.iter().zip(values) {
            if let Some(i) = slot {
                self.table.set(*i, *v);
            }
        }
    }

    /// Binds a plain record's series if it is not yet (the first record of its lane and
    /// schema, or the first after an epoch change).
    fn bind(&mut self, key: (u64, u16), r: &Record<'_>) {
        if !self.plain.contains_key(&key) {
            let b = self.bind_plain(r);
            self.plain.insert(key, b);
        }
    }
}

impl Consumer for Exporter {
    /// Records of a plain schema (not a summary), of
    /// [`IN_PLACE_MIN_BYTES`](crate::fields::IN_PLACE_MIN_BYTES) or more, are
    /// read in place: their numbers are extracted from the ring, one pass over the payload,
    /// no copy of it.
    fn extract(&mut self, schema: &Arc<SchemaDescriptor>) -> Option<Extract> {
        let map = self.maps.get(&schema.fingerprint())?;
        map.summary_groups
            .is_none()
            .then(|| Extract::new(Arc::new(map.plan.clone())))
    }

    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.records += 1;
        self.check_epoch();
        let key = (r.producer.lane_id, r.header.schema_key);
        if let Some(x) = r.extracted {
            // Only plain records are read in place.
            self.bind(key, r);
            self.set_plain(key, &x.values);
            return Ok(Flow::Continue);
        }
        if !self.plain.contains_key(&key) {
            let map = self.map_of(r);
            if map.summary_groups.is_some() {
                self.on_summary(r, map);
                return Ok(Flow::Continue);
            }
            // Bound once a payload decodes: a schema whose records never do has no series.
            if map.plan.extract(r.payload, &mut self.extracted).is_err() {
                self.malformed += 1;
                return Ok(Flow::Continue);
            }
            self.bind(key, r);
        }
        let b = &self.plain[&key];
        if b.map.plan.extract(r.payload, &mut self.extracted).is_err() {
            self.malformed += 1;
            return Ok(Flow::Continue);
        }
        let values = std::mem::take(&mut self.extracted.values);
        self.set_plain(key, &values);
        self.extracted.values = values;
        Ok(Flow::Continue)
    }

    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        match change {
            ProducerChange::Joined(p) => {
                if self.tags.len() >= 65_536 {
                    self.tags.clear();
                }
                self.tags.insert(
                    p.lane_id,
                    Tags {
                        pid: Some(p.pid),
                        session_tag: p.session_tag.map(str::to_owned),
                        perf_tag: p.perf_tag.map(str::to_owned),
                    },
                );
            }
            ProducerChange::Died(p) | ProducerChange::Ended(p) => self.table.lane_ended(p.lane_id),
        }
        Ok(Flow::Continue)
    }

    fn flush(&mut self) -> Result<(), HookError> {
        let sh = &self.shared;
        let snap = self.table.publish(sh.served.load(Ordering::Relaxed));
        sh.records.store(self.records, Ordering::Relaxed);
        sh.malformed.store(self.malformed, Ordering::Relaxed);
        let c = snap.counters;
        sh.put(snap);
        let b = &self.board;
        b.set("scrapes", sh.scrapes.load(Ordering::Relaxed));
        // An SRE's first question when a dashboard goes flat: is anything still scraping?
        match sh.scrape_age() {
            Some(age) => b.set("last_scrape_secs", (age * 10.0).round() / 10.0),
            None => b.remove("last_scrape_secs"),
        }
        b.set("series", c.series);
        b.set("dropped.cardinality", c.dropped_cardinality);
        b.set("expired.ttl", c.expired_ttl);
        b.set("expired.producer_end", c.expired_producer_end);
        b.set("records", self.records);
        if self.malformed > 0 {
            b.set("malformed", self.malformed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

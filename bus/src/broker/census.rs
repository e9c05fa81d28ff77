//! What `snapbus ls` shows: producers with their rates (from readings of their lanes' commit
//! counters), the history their rings hold and their schemas' rates (from a census of the
//! frame headers in their rings, cached), consumers with their lag and loss (from their last
//! cursors and the lanes as they are now), schemas.
//!
//! The census reads every frame header of a ring on the broker's one thread (up to millions),
//! so it runs only when asked for ([`Census::Fresh`], `ls --history`) or when a ring's last one
//! is older than [`CENSUS_MAX_AGE`] ([`Census::Recent`], a plain `ls`); a poll for counters
//! ([`Census::Skip`]) never runs it.

use std::collections::HashMap;

use snapbus_schemas::TypeDesc;
use std::time::{Duration, Instant};

use super::readings::ring_census;
use super::registry::{Consumer, Producer};
use super::{Broker, RATE_WINDOW_NANOS, STALE_AFTER};
use crate::control::{
    BusState, Census, ConsumerState, ConsumerStatus, LaneCursor, ProducerState, Run, SchemaState,
};
use crate::lane::{ShmLane, StartAt, now_realtime_nanos};

/// A ring's census is run again for [`Census::Recent`] once it is this old.
pub(super) const CENSUS_MAX_AGE: Duration = Duration::from_secs(5);

impl Broker {
    /// Consumer `c` as `ls` shows it.
    pub(super) fn consumer_state(&self, c: &Consumer) -> ConsumerState {
        let sup = self.supervised_by_id(c.id);
        // Lag and loss from its last cursors and the lanes as they are now: a consumer that
        // stopped reading (or reporting) is still seen falling behind and being lapped.
        let (mut lag_bytes, mut overwritten) = (0u64, 0u64);
        for cur in &c.cursors {
            let Some(p) = self
                .producers
                .values()
                .find(|p| p.info.lane_id == cur.lane_id)
            else {
                continue;
            };
            let (lag, lost) = behind(&p.lane, cur);
            lag_bytes = lag_bytes.saturating_add(lag);
            overwritten = overwritten.saturating_add(lost);
        }
        let age = c.last_report.elapsed();
        let run = sup.map_or_else(Run::default, |s| s.run());
        let status = if age > STALE_AFTER {
            ConsumerStatus::Stale {
                silent_secs: age.as_secs(),
                run,
            }
        } else {
            ConsumerStatus::Running(run)
        };
        ConsumerState {
            id: c.id,
            info: c.info.clone(),
            delivered: c.delivered,
            lost: c.lost.saturating_add(overwritten),
            damaged: c.damaged,
            garbage: c.garbage,
            unknown_keys: c.unknown_keys,
            lag_bytes,
            report_age_secs: age.as_secs_f64(),
            refused: c
                .refused
                .iter()
                .map(|r| format!("producer {}: {}", r.producer, r.reason))
                .collect(),
            supervised: sup.is_some(),
            status,
            log: sup.map(|s| s.kept.log.display().to_string()),
            board: c.board.clone(),
        }
    }

    /// Every distinct descriptor the producers' catalogs hold under schema `id`, once each, in
    /// canonical bytes (the reply to `Descriptors`).
    pub(super) fn descriptors(&mut self, id: &str) -> Vec<Vec<u8>> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for p in self.producers.values_mut() {
            let Some(cat) = p.catalog.as_mut() else {
                continue;
            };
            cat.refresh();
            for (_, d) in cat.schemas() {
                if d.id() == id && seen.insert(d.fingerprint()) {
                    out.push(d.to_canonical_bytes());
                }
            }
        }
        out
    }

    /// The reply to `Ls`, with each ring's census as fresh as `census` asks.
    pub(super) fn state(&mut self, census: Census) -> BusState {
        let now = Instant::now();
        let now_nanos = now_realtime_nanos();
        let mut schemas: HashMap<(String, u32, u64), SchemaState> = HashMap::new();
        // Each schema's root type, by (id, version, fingerprint as `ls` shows it).
        let mut roots: HashMap<(String, u32, String), TypeDesc> = HashMap::new();
        let mut producers = Vec::new();
        for p in self.producers.values_mut() {
            let run = match census {
                Census::Skip => false,
                Census::Recent => p
                    .census
                    .as_ref()
                    .is_none_or(|c| now.saturating_duration_since(c.at) >= CENSUS_MAX_AGE),
                Census::Fresh => true,
            };
            if run {
                p.census = Some(ring_census(&p.lane, now, now_nanos));
                self.census_runs += 1;
            }
            producers.push(producer_state(p, now));
            count_schemas(p, &mut schemas, &mut roots);
        }
        let mut schemas: Vec<SchemaState> = schemas.into_values().collect();
        schemas.sort_by(|a, b| {
            (&a.id, a.version, &a.fingerprint).cmp(&(&b.id, b.version, &b.fingerprint))
        });
        // Two producers that disagree about (id, version) are reported, not mixed; shapes of
        // one event (a pydantic model's or a dict's extras) are not a disagreement.
        let mut start = 0;
        while start < schemas.len() {
            let key = (&schemas[start].id, schemas[start].version);
            let end = start
                + schemas[start..]
                    .iter()
                    .take_while(|s| (&s.id, s.version) == key)
                    .count();
            for i in start + 1..end {
                for j in start..i {
                    let root = |s: &SchemaState| {
                        roots.get(&(s.id.clone(), s.version, s.fingerprint.clone()))
                    };
                    let shapes = match (root(&schemas[j]), root(&schemas[i])) {
                        (Some(a), Some(b)) => crate::publisher::shapes_of_one_event(a, b),
                        _ => false,
                    };
                    if !shapes {
                        schemas[i].conflict = true;
                        schemas[j].conflict = true;
                    }
                }
            }
            start = end;
        }
        BusState {
            bus: self.dir.name().to_string(),
            broker_pid: std::process::id(),
            filter: self.filter.clone(),
            producers,
            consumers: self
                .consumers
                .values()
                .map(|c| self.consumer_state(c))
                .chain(self.unconnected_supervised())
                .collect(),
            schemas,
            census_runs: self.census_runs,
            refused_producers: self
                .refused
                .iter()
                .map(|r| {
                    format!(
                        "producer '{}' (pid {}): {} (refused {} times)",
                        r.name, r.pid, r.why, r.times
                    )
                })
                .collect(),
        }
    }

    /// Reads every lane's commit counter, for the producers' rates (a load each; most turns
    /// keep nothing).
    pub(super) fn read_counters(&mut self, now: Instant) {
        for p in self.producers.values_mut() {
            p.counter.read(p.lane.lane().stats().frames_committed, now);
        }
    }
}

/// Records per second of `recent` records, the first at `first_recent`, in a census taken at
/// `at_nanos`, for a producer that is `writing` (one that closed its lane or died writes
/// nothing: rate 0). The schemas' rates come from the frame timestamps in the ring.
fn rate_hz(writing: bool, recent: u64, first_recent: u64, at_nanos: u64) -> f64 {
    if !writing || recent == 0 {
        return 0.0;
    }
    // Over the window, or over the part of it the records cover (a producer that started 2 s
    // ago has a 2 s rate, not 2/5 of it).
    let span = at_nanos.saturating_sub(first_recent).max(1_000_000_000);
    let span = span.min(RATE_WINDOW_NANOS);
    recent as f64 / (span as f64 / 1e9)
}

/// Producer `p` as `ls` shows it at `now`: counters read now, the history from its last census.
fn producer_state(p: &Producer, now: Instant) -> ProducerState {
    let stats = p.lane.lane().stats();
    let census = p.census.as_ref();
    let span = census.and_then(|c| c.span);
    ProducerState {
        id: p.id,
        info: p.info.clone(),
        status: p.status,
        frames: stats.frames_committed,
        rate_hz: if p.status.writing() {
            p.counter.rate_hz(stats.frames_committed, now)
        } else {
            0.0
        },
        dropped: stats.dropped_wrap + stats.dropped_oversize + stats.aborted,
        lane_bytes: p.lane.lane().geometry().capacity,
        history_secs: span.map_or(0.0, |s| {
            s.newest_nanos.saturating_sub(s.oldest_nanos) as f64 / 1e9
        }),
        history_start_nanos: span.map(|s| s.oldest_nanos),
        history_first_seq: span.map(|s| s.first_seq),
        history_records: census.map_or(0, |c| c.schemas.values().map(|n| n.in_ring).sum()),
        census_age_secs: census.map(|c| now.saturating_duration_since(c.at).as_secs_f64()),
        filter: p.filters.as_ref().map(|(_, effective)| effective.clone()),
        own_filter: p.filters.as_ref().map(|(own, _)| own.clone()),
    }
}

/// Adds producer `p`'s schemas (from its catalog) to `schemas`, with their records in its
/// ring and their rates as of its last census.
fn count_schemas(
    p: &mut Producer,
    schemas: &mut HashMap<(String, u32, u64), SchemaState>,
    roots: &mut HashMap<(String, u32, String), TypeDesc>,
) {
    let writing = p.status.writing();
    let Some(cat) = p.catalog.as_mut() else {
        return;
    };
    cat.refresh();
    for (key, d) in cat.schemas() {
        let s = schemas
            .entry((d.id().to_owned(), d.version(), d.fingerprint()))
            .or_insert_with(|| {
                roots.insert(
                    (
                        d.id().to_owned(),
                        d.version(),
                        format!("{:016x}", d.fingerprint()),
                    ),
                    d.root().clone(),
                );
                SchemaState {
                    id: d.id().to_owned(),
                    version: d.version(),
                    fingerprint: format!("{:016x}", d.fingerprint()),
                    descriptor: d.root().to_string(),
                    conflict: false,
                    producers: Vec::new(),
                    rate_hz: 0.0,
                    in_rings: 0,
                }
            });
        s.producers.push(p.id);
        let Some(census) = &p.census else { continue };
        if let Some(n) = census.schemas.get(&key) {
            s.in_rings += n.in_ring;
            s.rate_hz += rate_hz(writing, n.recent, n.first_recent_nanos, census.at_nanos);
        }
    }
}

/// How far a consumer whose cursor in `lane` is `cur` is behind: bytes up to the claim tail,
/// and records the ring has overwritten past the cursor (from the sequence number of the
/// oldest record still readable; 0 while the cursor's record is intact or its expected number
/// is unknown).
fn behind(lane: &ShmLane, cur: &LaneCursor) -> (u64, u64) {
    let tail = lane.lane().stats().claim_tail;
    let lag = tail.saturating_sub(cur.position);
    let cap = lane.lane().geometry().capacity;
    let Some(expected) = cur.expected_seq else {
        return (lag, 0);
    };
    if lag <= cap {
        return (lag, 0);
    }
    let mut r = lane.lane().reader(StartAt::Oldest);
    r.set_writer_gone(true);
    for _ in 0..64 {
        match r.read_in_place(|m, _| m.seq) {
            Ok((_, seq)) => return (lag, seq.saturating_sub(expected)),
            Err(crate::lane::NoFrame::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    (lag, 0)
}

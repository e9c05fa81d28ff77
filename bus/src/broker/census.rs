//! What `snapbus ls` shows: producers with their rates (a census of the frame headers in
//! their rings), consumers with their lag and loss (from their last cursors and the lanes as
//! they are now), schemas.

use std::collections::HashMap;

use super::registry::{Consumer, Producer};
use super::{Broker, RATE_WINDOW_NANOS, STALE_AFTER};
use crate::control::{
    BusState, ConsumerState, ConsumerStatus, LaneCursor, ProducerState, Run, SchemaState,
};
use crate::lane::{ShmLane, StartAt, now_realtime_nanos};

/// Per schema key: records in the ring now, those of the last [`RATE_WINDOW_NANOS`], and the
/// time of the first of those.
type Census = HashMap<u16, (u64, u64, u64)>;

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

    /// The reply to `Ls`.
    pub(super) fn state(&mut self) -> BusState {
        let now_nanos = now_realtime_nanos();
        let mut schemas: HashMap<(String, u32, u64), SchemaState> = HashMap::new();
        let mut producers = Vec::new();
        for p in self.producers.values_mut() {
            let (census, span) = ring_census(&p.lane, now_nanos);
            producers.push(producer_state(p, &census, span, now_nanos));
            count_schemas(p, &census, now_nanos, &mut schemas);
        }
        let mut schemas: Vec<SchemaState> = schemas.into_values().collect();
        schemas.sort_by(|a, b| {
            (&a.id, a.version, &a.fingerprint).cmp(&(&b.id, b.version, &b.fingerprint))
        });
        // Two producers that disagree about (id, version) are reported, not mixed.
        for i in 1..schemas.len() {
            if (&schemas[i].id, schemas[i].version) == (&schemas[i - 1].id, schemas[i - 1].version)
            {
                schemas[i].conflict = true;
                schemas[i - 1].conflict = true;
            }
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
        }
    }
}

/// Records per second of `recent` records, the first at `first_recent`, for a producer that
/// is `writing` (one that closed its lane or died writes nothing: rate 0). Rates come from
/// the frame timestamps in the ring, the same for the producer and its schemas.
fn rate_hz(writing: bool, recent: u64, first_recent: u64, now_nanos: u64) -> f64 {
    if !writing || recent == 0 {
        return 0.0;
    }
    // Over the window, or over the part of it the records cover (a producer that started 2 s
    // ago has a 2 s rate, not 2/5 of it).
    let span = now_nanos.saturating_sub(first_recent).max(1_000_000_000);
    let span = span.min(RATE_WINDOW_NANOS);
    recent as f64 / (span as f64 / 1e9)
}

/// Producer `p` as `ls` shows it.
fn producer_state(
    p: &Producer,
    census: &Census,
    span: Option<Span>,
    now_nanos: u64,
) -> ProducerState {
    let stats = p.lane.lane().stats();
    let (recent, first_recent) = census
        .values()
        .fold((0, u64::MAX), |(n, t), &(_, r, f)| (n + r, t.min(f)));
    ProducerState {
        id: p.id,
        info: p.info.clone(),
        status: p.status,
        frames: stats.frames_committed,
        rate_hz: rate_hz(p.status.writing(), recent, first_recent, now_nanos),
        dropped: stats.dropped_wrap + stats.dropped_oversize + stats.aborted,
        lane_bytes: p.lane.lane().geometry().capacity,
        history_secs: span.map_or(0.0, |s| {
            s.newest_nanos.saturating_sub(s.oldest_nanos) as f64 / 1e9
        }),
        history_start_nanos: span.map(|s| s.oldest_nanos),
        history_first_seq: span.map(|s| s.first_seq),
        history_records: census.values().map(|&(n, _, _)| n).sum(),
        filter: p.filters.as_ref().map(|(_, effective)| effective.clone()),
        own_filter: p.filters.as_ref().map(|(own, _)| own.clone()),
    }
}

/// Adds producer `p`'s schemas (from its catalog) to `schemas`, with their records in its
/// ring and their rates.
fn count_schemas(
    p: &mut Producer,
    census: &Census,
    now_nanos: u64,
    schemas: &mut HashMap<(String, u32, u64), SchemaState>,
) {
    let writing = p.status.writing();
    let Some(cat) = p.catalog.as_mut() else {
        return;
    };
    cat.refresh();
    for (key, d) in cat.schemas() {
        let s = schemas
            .entry((d.id().to_owned(), d.version(), d.fingerprint()))
            .or_insert_with(|| SchemaState {
                id: d.id().to_owned(),
                version: d.version(),
                fingerprint: format!("{:016x}", d.fingerprint()),
                descriptor: d.root().to_string(),
                conflict: false,
                producers: Vec::new(),
                rate_hz: 0.0,
                in_rings: 0,
            });
        s.producers.push(p.id);
        if let Some(&(total, recent, first_recent)) = census.get(&key) {
            s.in_rings += total;
            s.rate_hz += rate_hz(writing, recent, first_recent, now_nanos);
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

/// The records a ring holds, for `ls`: the times of the oldest and the newest, and the
/// sequence number of the oldest (above 0 once older records were overwritten).
#[derive(Debug, Clone, Copy)]
struct Span {
    oldest_nanos: u64,
    newest_nanos: u64,
    first_seq: u64,
}

/// Per schema key: records in the ring now, those of the last [`RATE_WINDOW_NANOS`], and the
/// time of the first of those (headers only; no payload is copied); and the span of the
/// records in the ring (the history it holds), if it holds any.
fn ring_census(lane: &ShmLane, now_nanos: u64) -> (Census, Option<Span>) {
    let mut out = Census::new();
    let mut span: Option<Span> = None;
    let mut r = lane.lane().reader(StartAt::Oldest);
    r.set_writer_gone(true);
    let since = now_nanos.saturating_sub(RATE_WINDOW_NANOS);
    // Bounded: a 64 MiB ring holds at most ~1.7 M frames.
    for _ in 0..4_000_000 {
        match r.read_in_place(|m, _| (m.schema_key, m.t_nanos, m.seq)) {
            Ok((_, (key, t, seq))) => {
                span = Some(match span {
                    None => Span {
                        oldest_nanos: t,
                        newest_nanos: t,
                        first_seq: seq,
                    },
                    Some(s) => Span {
                        oldest_nanos: s.oldest_nanos.min(t),
                        newest_nanos: s.newest_nanos.max(t),
                        first_seq: s.first_seq.min(seq),
                    },
                });
                let e = out.entry(key).or_insert((0, 0, u64::MAX));
                e.0 += 1;
                if t >= since {
                    e.1 += 1;
                    e.2 = e.2.min(t);
                }
            }
            Err(crate::lane::NoFrame::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    (out, span)
}

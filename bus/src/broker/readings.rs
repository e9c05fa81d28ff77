//! What the broker reads from a producer's lane for `ls`, kept with the producer: readings of
//! its commit counter (for its rate) and the last census of its ring (for its history and its
//! schemas' rates). A leaf: the registry keeps them, `census.rs` turns them into the state.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::RATE_WINDOW_NANOS;
use crate::lane::{ShmLane, StartAt};

/// The window of the producers' rates.
const RATE_WINDOW: Duration = Duration::from_nanos(RATE_WINDOW_NANOS);
/// How often a lane's commit counter is read for its rate (at most).
const COUNTER_EVERY: Duration = Duration::from_secs(1);

/// Readings of a lane's commit counter (`frames_committed`) and when they were taken: one per
/// [`COUNTER_EVERY`] at most, back to one at least [`RATE_WINDOW`] old. A producer's rate is
/// the change since the oldest over the time since it.
#[derive(Debug)]
pub(super) struct Counter {
    readings: VecDeque<(Instant, u64)>,
}

impl Counter {
    /// Readings starting with `frames` at `now` (when the broker first sees the lane).
    pub(super) fn new(frames: u64, now: Instant) -> Counter {
        Counter {
            readings: VecDeque::from([(now, frames)]),
        }
    }

    /// Keeps the reading `frames` at `now` if the newest is [`COUNTER_EVERY`] old; forgets
    /// those no longer needed for the window.
    pub(super) fn read(&mut self, frames: u64, now: Instant) {
        let due = self
            .readings
            .back()
            .is_none_or(|&(t, _)| now.saturating_duration_since(t) >= COUNTER_EVERY);
        if due {
            self.readings.push_back((now, frames));
        }
        while self
            .readings
            .get(1)
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) >= RATE_WINDOW)
        {
            self.readings.pop_front();
        }
    }

    /// Records per second from the oldest reading kept to `frames` at `now` (0 over no time).
    /// The counter is in shared memory and may go back (a claim taken back): no change then.
    pub(super) fn rate_hz(&self, frames: u64, now: Instant) -> f64 {
        let Some(&(t, base)) = self.readings.front() else {
            return 0.0;
        };
        let secs = now.saturating_duration_since(t).as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        frames.saturating_sub(base) as f64 / secs
    }
}

/// One schema's records in a ring, as a census counted them.
#[derive(Debug, Clone, Copy)]
pub(super) struct SchemaCount {
    /// Records in the ring.
    pub(super) in_ring: u64,
    /// Those of the last [`RATE_WINDOW_NANOS`] before the census.
    pub(super) recent: u64,
    /// The time of the first of those (CLOCK_REALTIME nanoseconds).
    pub(super) first_recent_nanos: u64,
}

/// A census of one ring: what it holds per schema key, and the span of its records.
#[derive(Debug)]
pub(super) struct RingCensus {
    /// When it was taken.
    pub(super) at: Instant,
    /// The same, CLOCK_REALTIME nanoseconds (the rates are as of then).
    pub(super) at_nanos: u64,
    /// Per schema key.
    pub(super) schemas: HashMap<u16, SchemaCount>,
    /// The records in the ring, if any.
    pub(super) span: Option<Span>,
}

/// The records a ring holds, for `ls`: the times of the oldest and the newest, and the
/// sequence number of the oldest (above 0 once older records were overwritten).
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) oldest_nanos: u64,
    pub(super) newest_nanos: u64,
    pub(super) first_seq: u64,
}

/// A census of `lane`'s ring, taken at `at` (`at_nanos`): per schema key, records in the ring
/// and those of the last [`RATE_WINDOW_NANOS`] (headers only; no payload is copied); and the
/// span of the records in the ring (the history it holds), if it holds any.
pub(super) fn ring_census(lane: &ShmLane, at: Instant, at_nanos: u64) -> RingCensus {
    let mut schemas: HashMap<u16, SchemaCount> = HashMap::new();
    let mut span: Option<Span> = None;
    let mut r = lane.lane().reader(StartAt::Oldest);
    r.set_writer_gone(true);
    let since = at_nanos.saturating_sub(RATE_WINDOW_NANOS);
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
                let n = schemas.entry(key).or_insert(SchemaCount {
                    in_ring: 0,
                    recent: 0,
                    first_recent_nanos: u64::MAX,
                });
                n.in_ring += 1;
                if t >= since {
                    n.recent += 1;
                    n.first_recent_nanos = n.first_recent_nanos.min(t);
                }
            }
            Err(crate::lane::NoFrame::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    RingCensus {
        at,
        at_nanos,
        schemas,
        span,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer's rate is the change of its counter over the time since the oldest reading
    /// kept: readings a second apart, back to one the window old.
    #[test]
    fn rates_come_from_counter_readings_over_the_window() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut c = Counter::new(0, t0);
        // 100 records/s for 3 s, read every 250 ms (a reading is kept once a second).
        for k in 1..=12 {
            c.read(k * 25, at(k * 250));
        }
        assert_eq!(c.readings.len(), 4);
        assert!((c.rate_hz(300, at(3000)) - 100.0).abs() < 1e-9);
        // Then 1000/s for 10 s: after the window, the old rate is forgotten.
        for k in 1..=40 {
            c.read(300 + k * 250, at(3000 + k * 250));
        }
        let rate = c.rate_hz(10_300, at(13_000));
        assert!((rate - 1000.0).abs() < 1e-9, "{rate}");
        let oldest = c.readings.front().expect("a reading").0;
        let age = at(13_000) - oldest;
        assert!(
            age >= RATE_WINDOW && age < RATE_WINDOW + COUNTER_EVERY,
            "{age:?}"
        );
        // A counter that goes back (a claim taken back) is no change; no time is no rate.
        assert_eq!(c.rate_hz(0, at(13_000)), 0.0);
        assert_eq!(Counter::new(5, t0).rate_hz(9, t0), 0.0);
    }
}

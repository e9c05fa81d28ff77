//! The bounded last-value table and the snapshots the HTTP thread renders.
//!
//! The reader thread owns the [`Table`]; every publish it builds a [`Snapshot`] (the series
//! grouped into families, sorted) and swaps it into the [`Shared`] slot under a mutex held for
//! one pointer swap. Scrapes clone the `Arc` and render without any lock the reader takes.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A label set: (name, value) pairs in a fixed order.
pub(crate) type Labels = Arc<[(Cow<'static, str>, String)]>;

/// One series of the table.
#[derive(Debug)]
struct Series {
    family: Arc<str>,
    help: Arc<str>,
    labels: Labels,
    value: f64,
    updated: Instant,
    /// The lane that last bound it (its end expires the series).
    owner_lane: u64,
    /// Expire once a scrape has served this snapshot generation (the owner ended).
    expire_after_gen: Option<u64>,
}

/// Why a series was created or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The series' index in the table.
    At(usize),
    /// Refused: the table is at `max_series`.
    Refused,
}

/// Counters of what the table did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableCounters {
    /// Series now in the table.
    pub series: u64,
    /// New series refused because the table was full (`--max-series`).
    pub dropped_cardinality: u64,
    /// Series removed after not being updated for the TTL.
    pub expired_ttl: u64,
    /// Series removed after their producer ended or died (and a scrape served their last
    /// value).
    pub expired_producer_end: u64,
}

/// The fewest refused series remembered before they are forgotten (see `Table::refused`).
const MIN_REFUSED_REMEMBERED: usize = 4096;

/// The last value of every series, at most `max_series` of them.
#[derive(Debug)]
pub(crate) struct Table {
    slots: Vec<Option<Series>>,
    free: Vec<usize>,
    index: HashMap<(Arc<str>, Labels), usize>,
    /// Series refused by the cap (each counted once, however often it is bound again after
    /// an epoch bump; forgotten, all at once, when it holds as many as the cap, or
    /// [`MIN_REFUSED_REMEMBERED`]).
    refused: HashSet<(Arc<str>, Labels)>,
    max_series: usize,
    ttl: Duration,
    /// The reader's coarse clock (refreshed at each publish: no clock read per record).
    pub(crate) now: Instant,
    pub(crate) counters: TableCounters,
    /// Bumped whenever series are removed: bindings holding slot numbers must be rebuilt.
    pub(crate) epoch: u64,
    generation: u64,
}

impl Table {
    pub(crate) fn new(max_series: usize, ttl: Duration) -> Table {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            refused: HashSet::new(),
            max_series,
            ttl,
            now: Instant::now(),
            counters: TableCounters::default(),
            epoch: 0,
            generation: 0,
        }
    }

    /// The slot of series (`family`, `labels`), created if the cap allows (a refusal is
    /// counted).
    pub(crate) fn bind(
        &mut self,
        family: &Arc<str>,
        help: &Arc<str>,
        labels: &Labels,
        lane: u64,
    ) -> Slot {
        if let Some(&i) = self.index.get(&(Arc::clone(family), Arc::clone(labels))) {
            let s = self.slots[i].as_mut().expect("indexed slots are full");
            s.owner_lane = lane;
            s.expire_after_gen = None;
            return Slot::At(i);
        }
        if self.index.len() >= self.max_series {
            if self.refused.len() >= self.max_series.max(MIN_REFUSED_REMEMBERED) {
                self.refused.clear();
            }
            if self
                .refused
                .insert((Arc::clone(family), Arc::clone(labels)))
            {
                self.counters.dropped_cardinality += 1;
            }
            return Slot::Refused;
        }
        let series = Series {
            family: Arc::clone(family),
            help: Arc::clone(help),
            labels: Arc::clone(labels),
            value: f64::NAN,
            updated: self.now,
            owner_lane: lane,
            expire_after_gen: None,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(series);
                i
            }
            None => {
                self.slots.push(Some(series));
                self.slots.len() - 1
            }
        };
        self.index
            .insert((Arc::clone(family), Arc::clone(labels)), i);
        self.counters.series = self.index.len() as u64;
        Slot::At(i)
    }

    /// Sets the value of the series in slot `i` (a slot of the current epoch).
    #[inline]
    pub(crate) fn set(&mut self, i: usize, value: f64) {
        if let Some(s) = self.slots.get_mut(i).and_then(Option::as_mut) {
            s.value = value;
            s.updated = self.now;
        }
    }

    /// The series bound last by `lane` expire once a scrape has served their last values.
    pub(crate) fn lane_ended(&mut self, lane: u64) {
        let after = self.generation + 1;
        for s in self.slots.iter_mut().flatten() {
            if s.owner_lane == lane {
                s.expire_after_gen = Some(after);
            }
        }
    }

    /// Removes what expired (`served` is the newest generation a scrape served), then builds
    /// the next snapshot.
    pub(crate) fn publish(&mut self, served: u64) -> Snapshot {
        self.now = Instant::now();
        let (now, ttl) = (self.now, self.ttl);
        let mut removed = false;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(s) = slot else { continue };
            let ended = s.expire_after_gen.is_some_and(|g| g <= served);
            let stale = now.duration_since(s.updated) > ttl;
            if ended || stale {
                if ended {
                    self.counters.expired_producer_end += 1;
                } else {
                    self.counters.expired_ttl += 1;
                }
                self.index
                    .remove(&(Arc::clone(&s.family), Arc::clone(&s.labels)));
                *slot = None;
                self.free.push(i);
                removed = true;
            }
        }
        if removed {
            self.epoch += 1;
        }
        self.counters.series = self.index.len() as u64;
        self.generation += 1;
        let mut rows: Vec<&Series> = self.slots.iter().flatten().collect();
        rows.sort_by(|a, b| (&a.family, &a.labels).cmp(&(&b.family, &b.labels)));
        let mut families: Vec<Family> = Vec::new();
        for s in rows {
            match families.last_mut() {
                Some(f) if f.name == s.family => f.series.push((Arc::clone(&s.labels), s.value)),
                _ => families.push(Family {
                    name: Arc::clone(&s.family),
                    help: Arc::clone(&s.help),
                    series: vec![(Arc::clone(&s.labels), s.value)],
                }),
            }
        }
        Snapshot {
            generation: self.generation,
            families,
            counters: self.counters,
        }
    }
}

/// The series of one metric name.
#[derive(Debug, Clone)]
pub(crate) struct Family {
    pub(crate) name: Arc<str>,
    pub(crate) help: Arc<str>,
    pub(crate) series: Vec<(Labels, f64)>,
}

/// What a scrape renders: the table as of one publish.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub(crate) generation: u64,
    pub(crate) families: Vec<Family>,
    pub(crate) counters: TableCounters,
}

/// What the reader and the HTTP thread share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    snapshot: Mutex<Arc<Snapshot>>,
    /// The newest snapshot generation a scrape rendered.
    pub(crate) served: AtomicU64,
    /// Scrapes of `/metrics` answered.
    pub(crate) scrapes: AtomicU64,
    /// When the last scrape was answered: milliseconds since `born`, plus one (0: never).
    last_scrape_ms: AtomicU64,
    born: OnceInstant,
    /// Records read, records whose payload did not match its descriptor.
    pub(crate) records: AtomicU64,
    pub(crate) malformed: AtomicU64,
}

impl Shared {
    /// Replaces the snapshot (the lock is held for one pointer swap).
    pub(crate) fn put(&self, s: Snapshot) {
        let s = Arc::new(s);
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    /// The current snapshot, marked as served.
    pub(crate) fn take_for_scrape(&self) -> Arc<Snapshot> {
        let s = Arc::clone(&self.snapshot.lock().unwrap_or_else(|e| e.into_inner()));
        self.served.fetch_max(s.generation, Ordering::Relaxed);
        self.scrapes.fetch_add(1, Ordering::Relaxed);
        let ms = self.born.get().elapsed().as_millis() as u64 + 1;
        self.last_scrape_ms.store(ms, Ordering::Relaxed);
        s
    }

    /// Seconds since the last scrape was answered (`None`: none yet).
    pub(crate) fn scrape_age(&self) -> Option<f64> {
        match self.last_scrape_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => {
                let since_born = self.born.get().elapsed().as_secs_f64();
                Some((since_born - (ms - 1) as f64 / 1000.0).max(0.0))
            }
        }
    }
}

/// An `Instant` fixed when first asked for (so that `Shared` can derive `Default`).
#[derive(Debug, Default)]
pub(crate) struct OnceInstant(std::sync::OnceLock<Instant>);

impl OnceInstant {
    fn get(&self) -> Instant {
        *self.0.get_or_init(Instant::now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(p: &str) -> Labels {
        Arc::from(vec![("producer".into(), p.to_owned())])
    }

    #[test]
    fn the_cap_refuses_new_series_and_counts_them() {
        let mut t = Table::new(2, Duration::from_secs(300));
        let (f, h): (Arc<str>, Arc<str>) = ("m".into(), "h".into());
        assert_eq!(t.bind(&f, &h, &labels("a"), 1), Slot::At(0));
        assert_eq!(t.bind(&f, &h, &labels("b"), 1), Slot::At(1));
        // The same series again is not new.
        assert_eq!(t.bind(&f, &h, &labels("a"), 2), Slot::At(0));
        assert_eq!(t.bind(&f, &h, &labels("c"), 1), Slot::Refused);
        assert_eq!(t.bind(&f, &h, &labels("d"), 1), Slot::Refused);
        // Bound again (as after an epoch bump), a refused series is not counted twice.
        assert_eq!(t.bind(&f, &h, &labels("c"), 1), Slot::Refused);
        t.set(0, 1.5);
        let s = t.publish(0);
        assert_eq!(s.counters.series, 2);
        assert_eq!(s.counters.dropped_cardinality, 2);
        assert_eq!(s.families.len(), 1);
        assert_eq!(s.families[0].series[0].1, 1.5);
        assert!(s.families[0].series[1].1.is_nan());
    }

    #[test]
    fn an_ended_lane_expires_after_a_scrape_served_its_last_values() {
        let mut t = Table::new(10, Duration::from_secs(300));
        let (f, h): (Arc<str>, Arc<str>) = ("m".into(), "h".into());
        let Slot::At(a) = t.bind(&f, &h, &labels("a"), 1) else {
            panic!()
        };
        let Slot::At(_) = t.bind(&f, &h, &labels("b"), 2) else {
            panic!()
        };
        t.set(a, 7.0);
        let g1 = t.publish(0).generation;
        t.lane_ended(1);
        // Not served yet: the last value is still published (once or more).
        let s = t.publish(g1);
        assert_eq!(s.families[0].series.len(), 2);
        let s = t.publish(g1);
        assert_eq!(s.families[0].series.len(), 2);
        // A scrape served a snapshot with the last value: gone.
        let s = t.publish(s.generation);
        assert_eq!(s.families[0].series.len(), 1);
        assert_eq!(&*s.families[0].series[0].0[0].1, "b");
        assert_eq!(s.counters.expired_producer_end, 1);
        assert_eq!(t.epoch, 1);
    }

    #[test]
    fn a_series_not_updated_for_the_ttl_expires() {
        let mut t = Table::new(10, Duration::from_millis(30));
        let (f, h): (Arc<str>, Arc<str>) = ("m".into(), "h".into());
        t.bind(&f, &h, &labels("a"), 1);
        assert_eq!(t.publish(0).counters.series, 1);
        std::thread::sleep(Duration::from_millis(40));
        let s = t.publish(0);
        assert_eq!(s.counters.series, 0);
        assert_eq!(s.counters.expired_ttl, 1);
    }
}

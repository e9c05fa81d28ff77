//! The emit path: four ways in (`emit` for a typed [`Snapshot`], `emit_value` for a schema
//! known only at run time, `emit_with` for a payload the caller encodes itself, `emit_many` for
//! a burst of encoded payloads) and one claim, fill, commit and ring sequence
//! ([`Publisher::write_record`]). Schema keys and the wake state are cached per thread, so an
//! emit takes no lock but the claim's.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, PoisonError};

use snapbus_schemas::{SchemaDescriptor, Snapshot, Value, ValueEncoder};

use super::payload::{FillError, PayloadWriter, copy_part};
use super::{EmitError, EmitManyError, Keys, Publisher};
use crate::doorbell::DoorbellPage;
use crate::lane::{ClaimError, RecordMeta};
use crate::level::Level;
use crate::mem::ShmMem;

/// What a record says about itself besides its payload, as a producer hands it to
/// [`Publisher::emit_with`] and [`Publisher::emit_many`]: which registered schema and version, how severe, which emitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EmitMeta {
    /// The schema's key in this lane ([`Publisher::register_schema`]).
    pub schema_key: u16,
    /// The payload's schema version.
    pub schema_version: u16,
    /// Its severity.
    pub level: Level,
    /// Which emitter (telemetry handle) wrote it ([`Publisher::emitter`]; 0 for none).
    pub emitter: u16,
}

impl EmitMeta {
    /// The lane's frame metadata (the level as its wire byte).
    fn record(self) -> RecordMeta {
        RecordMeta {
            schema_key: self.schema_key,
            schema_version: self.schema_version,
            level: self.level.as_u8(),
            emitter: self.emitter,
        }
    }
}

/// A thread's cached copy of a publisher's wake state.
struct WakeCache {
    publisher: u64,
    generation: u64,
    page: Option<Arc<DoorbellPage>>,
    mask: u64,
}

thread_local! {
    /// (publisher id, descriptor address, key), most recently used first.
    static KEY_CACHE: RefCell<Vec<(u64, usize, u16)>> = const { RefCell::new(Vec::new()) };
    /// (publisher id, descriptor fingerprint, key) of run-time schemas
    /// ([`Publisher::emit_value`]), most recently used first.
    static DYN_KEY_CACHE: RefCell<Vec<(u64, u64, u16)>> = const { RefCell::new(Vec::new()) };
    /// This thread's copy of the wake state, checked against `wake_gen` on every emit.
    static WAKE_CACHE: RefCell<Option<WakeCache>> = const { RefCell::new(None) };
}

impl Publisher {
    /// The schema keys and the catalog, locked. A thread that panicked holding the lock left
    /// them consistent (a key is recorded only once its catalog entry is written), so a
    /// poisoned lock is taken over, not reported as an error.
    pub(super) fn keys(&self) -> MutexGuard<'_, Keys> {
        self.inner
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The schema key of `desc` in this lane, registering it in the catalog the first time.
    fn schema_key(&self, desc: &'static SchemaDescriptor) -> Result<u16, EmitError> {
        let ptr = desc as *const SchemaDescriptor as usize;
        let id = self.inner.id;
        let cached = KEY_CACHE.with(|c| {
            let c = c.borrow();
            c.iter()
                .find(|&&(p, d, _)| p == id && d == ptr)
                .map(|&(_, _, k)| k)
        });
        if let Some(k) = cached {
            return Ok(k);
        }
        let key = self.register(desc)?;
        KEY_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            c.insert(0, (id, ptr, key));
            c.truncate(32);
        });
        Ok(key)
    }

    fn register(&self, desc: &'static SchemaDescriptor) -> Result<u16, EmitError> {
        let ptr = desc as *const SchemaDescriptor as usize;
        let mut keys = self.keys();
        if let Some(&k) = keys.by_ptr.get(&ptr) {
            return Ok(k);
        }
        let key = Self::key_of(&mut keys, desc)?;
        keys.by_ptr.insert(ptr, key);
        Ok(key)
    }

    /// The key of `desc` (by id, version and fingerprint), registering it the first time.
    fn key_of(keys: &mut Keys, desc: &SchemaDescriptor) -> Result<u16, EmitError> {
        let fp = (desc.id().to_owned(), desc.version(), desc.fingerprint());
        let key = match keys.by_fingerprint.get(&fp) {
            Some(&k) => k,
            None => {
                // Key 0 is never used, so a zeroed frame header names no schema.
                let k = u16::try_from(keys.by_fingerprint.len() + 1)
                    .map_err(|_| EmitError::NoKey(desc.id().to_owned()))?;
                if u16::try_from(desc.version()).is_err() {
                    return Err(EmitError::NoKey(desc.id().to_owned()));
                }
                keys.catalog.add_schema(k, desc)?;
                keys.by_fingerprint.insert(fp, k);
                k
            }
        };
        Ok(key)
    }

    /// The key of a schema known only at run time (a language binding's, a replayed
    /// recording's) in this process's lane, registering it in the catalog the first time (a
    /// thread-local cache by fingerprint after that): the `schema_key` of the [`EmitMeta`] of
    /// [`emit_with`](Self::emit_with) and [`emit_many`](Self::emit_many). A schema that cannot
    /// be registered is counted in `catalog_errors`.
    pub fn register_schema(&self, desc: &SchemaDescriptor) -> Result<u16, EmitError> {
        let Some(p) = self.here() else {
            return Err(self.count_no_lane());
        };
        p.dynamic_key(desc).inspect_err(|_| {
            p.inner.catalog_errors.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Emits a payload that the caller encodes itself, straight into the frame claimed for
    /// it: `len` is its exact length, and `fill` writes it through a [`PayloadWriter`] (in the
    /// codec's layout of the schema registered as `meta.schema_key`: a replayed recording's
    /// bytes, a language binding's objects, a camera frame read into the ring). No
    /// intermediate buffer: the writer copies each part once, large parts into a lane larger
    /// than the caches with stores that bypass them. The payload is not checked against the
    /// schema; writing what it describes is the caller's contract.
    ///
    /// Never waits, fork-safe, and counted like [`emit`](Self::emit). A `fill` that fails
    /// with [`FillError::Encode`], or writes other than `len` bytes, leaves an aborted frame
    /// and is counted in `encode_errors`; one that returns [`FillError::Abort`] (a loan given
    /// up) leaves an aborted frame too, counted nowhere ([`EmitError::Aborted`]). Keep `fill`
    /// short: until it returns, readers of the lane wait at this record (past the lane's stall
    /// timeout, 5 s, they skip it as a hole), and other threads' records that would lap it
    /// are dropped.
    ///
    /// ```no_run
    /// # fn demo(p: &snapbus_bus::publisher::Publisher, meta: snapbus_bus::publisher::EmitMeta)
    /// # -> Result<(), snapbus_bus::publisher::EmitError> {
    /// // An encoded payload, as replay has it.
    /// let payload = [7u8, 0, 0, 0];
    /// p.emit_with(meta, payload.len(), |w| Ok(w.put(&payload)?))?;
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn emit_with(
        &self,
        meta: EmitMeta,
        len: usize,
        fill: impl FnOnce(&mut PayloadWriter<'_>) -> Result<(), FillError>,
    ) -> Result<u64, EmitError> {
        let Some(p) = self.here() else {
            return Err(self.count_no_lane());
        };
        let streams = p.inner.streams;
        p.write_record(meta.record(), len, |buf| {
            let mut w = PayloadWriter::new(buf, streams);
            fill(&mut w)?;
            Ok(w.finish()?)
        })
    }

    /// Emits many records of one schema and metadata at once, `payloads` in order, each an
    /// encoded payload as [`emit_with`](Self::emit_with) writes one: the way to emit a burst
    /// of small records (a step's samples, a buffer of events from a device). The records are
    /// claimed in runs of up to [`RUN_RECORDS`](crate::lane::RUN_RECORDS), each with one pass
    /// through the claim lock, one clock read (a run's records share a timestamp) and one tail
    /// intent; the doorbells are rung after each run. A record the lane refuses (too large, a
    /// lap of an in-flight record) is counted as a single emit's would be, and the ones after
    /// it are still tried; on a closed lane, it and every one after it are counted `closed`.
    /// The error then says how many were written. Each payload's `as_ref` is called once.
    pub fn emit_many<P: AsRef<[u8]>>(
        &self,
        meta: EmitMeta,
        payloads: &[P],
    ) -> Result<(), EmitManyError> {
        if payloads.is_empty() {
            return Ok(());
        }
        if !self.is_own() {
            return match self.forked() {
                Some(p) => p.emit_many(meta, payloads),
                None => {
                    let first = self.count_no_lane();
                    self.inner
                        .no_lane_drops
                        .fetch_add(payloads.len() as u64 - 1, Ordering::Relaxed);
                    Err(EmitManyError {
                        written: 0,
                        total: payloads.len(),
                        first,
                    })
                }
            };
        }
        let streams = self.inner.streams;
        let mut rest = payloads;
        let mut written = 0usize;
        let mut first = None;
        while !rest.is_empty() {
            let run = self.inner.writer.write_run_with(
                meta.record(),
                rest,
                |lane, start, payload: &[u8]| {
                    // SAFETY: `write_run` calls this once per frame it claimed at `start`, with
                    // the very slice whose length it reserved (each `as_ref` is called once,
                    // before the claim), before committing it, and makes no other slice of it.
                    let dst = unsafe { lane.claimed_payload_mut(start, payload.len()) };
                    copy_part(dst, payload, streams);
                },
            );
            written += run.written;
            if run.written > 0 {
                // Per run: a sleeping consumer wakes before a long call could lap it.
                self.ring();
            }
            let mut taken = run.written;
            if let Some(e) = run.refused {
                if e == ClaimError::Closed {
                    // Nothing after it can be written either: all of them are counted.
                    let n = rest.len() - taken;
                    self.inner
                        .closed_drops
                        .fetch_add(n as u64, Ordering::Relaxed);
                    first.get_or_insert(EmitError::Claim(e));
                    break;
                }
                first.get_or_insert(EmitError::Claim(e));
                taken += 1;
            }
            // A run of a non-empty slice writes its first record or refuses it (`write_run`):
            // every pass takes at least one.
            debug_assert!(taken > 0);
            rest = &rest[taken..];
        }
        match first {
            None => Ok(()),
            Some(first) => Err(EmitManyError {
                written,
                total: payloads.len(),
                first,
            }),
        }
    }

    /// Encodes `value` straight into the lane and commits it, then wakes sleeping subscribers.
    /// Never waits for a consumer; failures are counted and returned.
    #[inline]
    pub fn emit<T: Snapshot>(
        &self,
        level: Level,
        emitter: u16,
        value: &T,
    ) -> Result<u64, EmitError> {
        if !self.is_own() {
            return self.emit_forked(level, emitter, value);
        }
        let key = match self.schema_key(T::descriptor()) {
            Ok(k) => k,
            Err(e) => {
                self.inner.catalog_errors.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        let meta = RecordMeta {
            schema_key: key,
            schema_version: T::VERSION as u16,
            level: level.as_u8(),
            emitter,
        };
        self.write_record(meta, value.encoded_len(), |buf| {
            value.encode_into(buf)?;
            Ok(())
        })
    }

    /// Encodes a dynamic `value` of the schema `desc` (known only at run time: language
    /// bindings, replay) straight into the lane with the codec's own writer: its exact length
    /// first, then in place in the claimed frame, with no intermediate buffer. The schema is
    /// registered on first use ([`register_schema`](Self::register_schema)). Same guarantees
    /// and counters as [`emit`](Self::emit): never waits, fork-safe, and a value that does not
    /// match `desc` is an [`EmitError::Encode`], counted in `encode_errors`, with nothing
    /// written to the lane.
    pub fn emit_value(
        &self,
        level: Level,
        emitter: u16,
        desc: &SchemaDescriptor,
        value: &Value<'_>,
    ) -> Result<u64, EmitError> {
        let Some(p) = self.here() else {
            return Err(self.count_no_lane());
        };
        let encoder = match ValueEncoder::new(desc.root(), value) {
            Ok(e) => e,
            Err(e) => {
                p.inner.encode_errors.fetch_add(1, Ordering::Relaxed);
                return Err(e.into());
            }
        };
        let meta = RecordMeta {
            schema_key: p.register_schema(desc)?,
            // `key_of` refuses versions above `u16::MAX`.
            schema_version: desc.version() as u16,
            level: level.as_u8(),
            emitter,
        };
        p.write_record(meta, encoder.encoded_len(), |buf| {
            encoder.encode_into(buf).map(|_| ())?;
            Ok(())
        })
    }

    /// Makes every consumer of this lane count `lost` records as lost here, exactly as ring
    /// overwrites (their `Lagged`, `snapbus ls`, a recording's loss records): for a producer
    /// that re-emits records from elsewhere and knows that some never reached it (a bridge
    /// from another machine). Call it from the thread that emits.
    pub fn mark_lost(&self, lost: u64) -> Result<(), EmitError> {
        let Some(p) = self.here() else {
            return Err(self.count_no_lane());
        };
        let meta = RecordMeta {
            schema_key: 0,
            schema_version: 0,
            level: Level::INFO.as_u8(),
            emitter: 0,
        };
        if let Err(e) = p.inner.writer.mark_lost(lost, meta) {
            if e == ClaimError::Closed {
                p.inner.closed_drops.fetch_add(1, Ordering::Relaxed);
            }
            return Err(e.into());
        }
        p.ring();
        Ok(())
    }

    /// Makes sure this process has its own lane: a no-op in the process that started the
    /// publisher; in a `fork()`ed child, creates the child's own lane and broker connection
    /// now, as its first emit would (so that a child can wait for its connection before
    /// emitting). Returns whether this process has its lane.
    pub fn prepare_here(&self) -> bool {
        self.here().is_some()
    }

    /// The key of a run-time schema in this (own) publisher's lane: a thread-local cache by
    /// fingerprint, else [`Self::key_of`] under the lock.
    fn dynamic_key(&self, desc: &SchemaDescriptor) -> Result<u16, EmitError> {
        let (id, fp) = (self.inner.id, desc.fingerprint());
        let cached = DYN_KEY_CACHE.with(|c| {
            c.borrow()
                .iter()
                .find(|&&(p, f, _)| p == id && f == fp)
                .map(|&(_, _, k)| k)
        });
        if let Some(k) = cached {
            return Ok(k);
        }
        let key = Self::key_of(&mut self.keys(), desc)?;
        DYN_KEY_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            c.insert(0, (id, fp, key));
            c.truncate(32);
        });
        Ok(key)
    }

    /// Claims `payload_len` bytes, lets `fill` write the payload in place, and commits (then
    /// rings the doorbells). A `fill` that fails leaves an aborted frame (the claim is
    /// dropped), counted in `encode_errors` unless it was given up on purpose.
    #[inline]
    fn write_record(
        &self,
        meta: RecordMeta,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), FillError>,
    ) -> Result<u64, EmitError> {
        let mut claim = self.claim(payload_len, meta)?;
        if let Err(e) = fill(claim.payload_mut()) {
            // Dropping the claim turns it into an aborted frame.
            return Err(match e {
                FillError::Encode(e) => {
                    self.inner.encode_errors.fetch_add(1, Ordering::Relaxed);
                    e.into()
                }
                FillError::Abort => EmitError::Aborted,
            });
        }
        let seq = claim.seq();
        claim.commit();
        self.ring();
        Ok(seq)
    }

    /// [`emit`](Self::emit) in a forked child: through the child's own publisher (out of line,
    /// so the parent's emit stays small; a child pays a call and a `OnceLock` load more).
    #[cold]
    #[inline(never)]
    fn emit_forked<T: Snapshot>(
        &self,
        level: Level,
        emitter: u16,
        value: &T,
    ) -> Result<u64, EmitError> {
        match self.forked() {
            Some(p) => p.emit(level, emitter, value),
            None => Err(self.count_no_lane()),
        }
    }

    #[cold]
    fn count_no_lane(&self) -> EmitError {
        self.inner.no_lane_drops.fetch_add(1, Ordering::Relaxed);
        no_own_lane()
    }

    /// Claims room in the lane, counting a claim refused because the lane is closed (the lane
    /// counts the other refusals itself).
    #[inline]
    fn claim(
        &self,
        payload_len: usize,
        meta: RecordMeta,
    ) -> Result<crate::lane::Claim<'_, ShmMem>, ClaimError> {
        let claim = self.inner.writer.claim(payload_len, meta);
        if let Err(ClaimError::Closed) = claim {
            self.inner.closed_drops.fetch_add(1, Ordering::Relaxed);
        }
        claim
    }

    /// Rings the doorbells of sleeping subscribers (a thread-local cached page and mask).
    #[inline]
    pub(super) fn ring(&self) {
        let generation = self.inner.wake_gen.load(Ordering::Acquire);
        let id = self.inner.id;
        WAKE_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            let fresh = c
                .as_ref()
                .is_some_and(|w| w.publisher == id && w.generation == generation);
            if !fresh {
                let (page, mask) = {
                    // A thread that panicked holding the lock left a whole value (`set_wake`
                    // assigns fields), so a poisoned lock is read as is.
                    let w = self
                        .inner
                        .wake
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    (w.page.clone(), w.mask)
                };
                *c = Some(WakeCache {
                    publisher: id,
                    generation,
                    page,
                    mask,
                });
            }
            if let Some(WakeCache {
                page: Some(page),
                mask,
                ..
            }) = &*c
            {
                page.ring_mask(*mask);
            }
        });
    }
}

fn no_own_lane() -> EmitError {
    EmitError::NoLane("this forked process could not create a lane of its own")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane::LaneConfig;
    use crate::publisher::PublisherConfig;
    use crate::runtime::{BusDir, BusName};
    use snapbus_schemas::TypeDesc;
    use snapbus_schemas::builtin::DurationSample;

    /// A publisher of a bus that has no broker (its connection thread keeps looking).
    fn publisher() -> Publisher {
        let root = std::env::temp_dir().join(format!("snapbus-emit-{}", std::process::id()));
        let dir = BusDir::locate_in(&root, &BusName::new("emit-unit").expect("name"));
        Publisher::start(
            dir,
            PublisherConfig {
                name: "emit-unit".into(),
                // The default lane: a sparse memfd, only its first pages touched here.
                lane: LaneConfig::default(),
                session_tag: None,
                perf_tag: None,
                relayed: false,
            },
        )
        .expect("publisher")
    }

    #[test]
    fn a_poisoned_schema_lock_is_taken_over_not_reported_as_no_key() {
        let p = publisher();
        // A thread that panics holding the lock poisons it.
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _keys = p.inner.keys.lock();
                panic!("poisoning the schema lock on purpose");
            })
            .join()
        });
        assert!(panicked.is_err() && p.inner.keys.is_poisoned());

        // Every path that takes the lock still works: a typed schema, a run-time one, an
        // emitter name.
        let emitter = p.emitter("unit");
        assert_ne!(emitter, 0, "an emitter id despite the poisoned lock");
        let sample = DurationSample {
            label: "x".into(),
            duration_nanos: 1,
            ..Default::default()
        };
        p.emit(Level::INFO, emitter, &sample).expect("a typed emit");
        let desc = SchemaDescriptor::new("unit.word", 1, TypeDesc::U32).expect("schema");
        let key = p.register_schema(&desc).expect("a run-time schema");
        let meta = EmitMeta {
            schema_key: key,
            schema_version: 1,
            level: Level::INFO,
            emitter,
        };
        p.emit_with(meta, 4, |w| Ok(w.put(&7u32.to_le_bytes())?))
            .expect("an emit of it");
        let stats = p.stats();
        assert_eq!((stats.written, stats.catalog_errors), (2, 0), "{stats:?}");
    }

    #[test]
    fn a_payload_written_short_or_given_up_is_not_committed() {
        let p = publisher();
        let desc = SchemaDescriptor::new("unit.word", 1, TypeDesc::U32).expect("schema");
        let meta = EmitMeta {
            schema_key: p.register_schema(&desc).expect("key"),
            schema_version: 1,
            level: Level::INFO,
            emitter: 0,
        };
        let short = p.emit_with(meta, 4, |w| Ok(w.put(&[1, 2])?));
        assert!(
            matches!(
                short,
                Err(EmitError::Encode(
                    snapbus_schemas::EncodeError::LengthMismatch {
                        promised: 4,
                        written: 2
                    }
                ))
            ),
            "{short:?}"
        );
        let given_up = p.emit_with(meta, 4, |_| Err(FillError::Abort));
        assert!(matches!(given_up, Err(EmitError::Aborted)), "{given_up:?}");
        let stats = p.stats();
        assert_eq!((stats.written, stats.encode_errors), (0, 1), "{stats:?}");
        assert_eq!(p.lane().lane().stats().aborted, 2);
    }
}

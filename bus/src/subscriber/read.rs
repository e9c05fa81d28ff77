//! Reading: the wait for a notice or a record, the round over the lanes, one lane's validated
//! loop (every record, copied or not, is read in place first: [`read_record`]), and the
//! drain of one lane for [`Subscriber::drain_in_place`].

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use super::Glob;
use super::lanes::{KeyClass, SubLane, lane_event, visit};
use super::{
    Event, Found, InPlaceEvent, InPlaceRecord, Next, Notice, PUMP_EVERY, PUMP_EVERY_RECORDS,
    RecordRef, SubscribeError, Subscriber, SubscriberStats,
};
use crate::lane::{FrameMeta, NoFrame, RunEnd, Visit};

impl Subscriber {
    /// The in-place event of what a wait found.
    #[inline]
    pub(super) fn in_place_event<R>(&self, next: Next<R>) -> InPlaceEvent<'_, R> {
        match next {
            Next::Found(Found::Record(k, meta, value)) => {
                InPlaceEvent::Record(self.lanes[k].record(meta, value))
            }
            other => InPlaceEvent::Other(self.other_event(other)),
        }
    }

    /// The event of anything but a record.
    pub(super) fn other_event<R>(&self, next: Next<R>) -> Event<'_> {
        match next {
            Next::Notice(Notice::Joined(k)) => Event::Joined(&self.lanes[k].info),
            Next::Notice(Notice::Died(k)) => Event::Died(&self.lanes[k].info),
            Next::Found(f) => lane_event(&self.lanes[found_lane(&f)], f),
        }
    }

    /// Waits up to `timeout` for a notice or a record (`read` makes the latter's value, `None`
    /// to skip it).
    pub(super) fn wait<R>(
        &mut self,
        timeout: Duration,
        read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
    ) -> Option<Next<R>> {
        let mut deadline = None;
        loop {
            // The control socket (new lanes, deaths) and the counters for `ls` are served when
            // idle, and while busy every few records (a syscall per record would halve the
            // rate of a fast consumer).
            self.since_pump += 1;
            if self.since_pump >= PUMP_EVERY_RECORDS
                || (self.since_pump % 128 == 0 && self.last_pump.elapsed() >= PUMP_EVERY)
            {
                self.pump_control();
            }
            if let Some(n) = self.notices.pop_front() {
                return Some(Next::Notice(n));
            }
            if let Some(f) = self.poll_lanes(read) {
                if let Found::Record(..) = f {
                    self.stats.delivered += 1;
                }
                return Some(Next::Found(f));
            }
            if timeout.is_zero() {
                // A caller that spins: no clock read, no system call per empty poll (the
                // periodic pump above still serves the control socket).
                return None;
            }
            self.pump_control();
            if !self.notices.is_empty() {
                continue;
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + timeout);
            if now >= deadline {
                return None;
            }
            self.sleep((deadline - now).min(Duration::from_millis(100)));
        }
    }

    /// Sleeps up to `nap` until a lane holds bytes to read: on the doorbell, or (reading in
    /// batches, with bytes there but not a batch yet) for a slice of the batch's longest wait.
    fn sleep(&self, nap: Duration) {
        if self.nap_for_batch(nap) {
            return;
        }
        match &self.page {
            Some(page) => {
                if let Some(bell) = page.bell(self.bell as usize) {
                    bell.wait_until(|| self.any_pending(), 64, nap);
                }
            }
            None => std::thread::sleep(nap.min(Duration::from_millis(10))),
        }
    }

    /// One round over the lanes, starting after the last one that gave something.
    fn poll_lanes<R>(
        &mut self,
        read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
    ) -> Option<Found<R>> {
        let n = self.lanes.len();
        for i in 0..n {
            let k = (self.next_lane + i) % n;
            if let Some(f) = self.poll_lane(k, read) {
                self.next_lane = k + 1;
                return Some(f);
            }
        }
        None
    }

    fn poll_lane<R>(
        &mut self,
        k: usize,
        read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
    ) -> Option<Found<R>> {
        let globs = &self.opts.globs;
        let lane = &mut self.lanes[k];
        if lane.ended {
            return None;
        }
        if let Some(b) = self.batch
            && lane.holds_back_for_batch(&b)
        {
            return None;
        }
        // Bounded work per call, so one busy lane cannot starve the others.
        for _ in 0..4096 {
            // At the cut (checked before every frame: skipped records must not carry the
            // reader past it).
            if lane.cut_at.is_some_and(|cut| lane.reader.position() >= cut) {
                lane.ended = true;
                if lane.cut_silently {
                    return None;
                }
                return Some(Found::Ended(k));
            }
            match read_record(lane, globs, read) {
                Ok((meta, Some(value))) => return Some(Found::Record(k, meta, value)),
                Ok((meta, None)) => lane.count_skipped(&meta, &mut self.stats),
                Err(no) => return no_frame(lane, &mut self.stats, k, no),
            }
        }
        None
    }

    /// Reads records in place, like [`next_in_place`](Self::next_in_place), but hands `on`
    /// every event it finds in one call, up to `max`: it waits up to `timeout` for the first,
    /// then goes on reading that record's lane, record after record, until the lane has
    /// nothing more to give now (its end, a lap, a record being written), `max` events, or the
    /// subscriber's periodic service of the control socket is due (every 1,024 records, or
    /// 20 ms: the next call serves it). Records come straight from
    /// the lane's reader to `on`, without the per-call work of `next_in_place` (the wait, the
    /// round over the lanes): the way to read many small records, as the batch mode's
    /// consumers do. `on` returning [`ControlFlow::Break`] ends the call after that event.
    /// Returns how many events `on` got (0: nothing within the timeout). `read` may run more
    /// than once per record, as with `next_in_place`.
    ///
    /// **Speed.** The subscriber's side of the loop is inlined; keep `read` and `on` so too
    /// (`#[inline(always)]` on the closures, and on what they call per record). A value `read`
    /// returns from a call that is not inlined comes back through the stack when it is larger
    /// than two words, and copying it on right away waits for the stores that just wrote it,
    /// which costs a small-record consumer a large part of its rate.
    ///
    /// ```no_run
    /// # use std::ops::ControlFlow;
    /// # use std::time::Duration;
    /// # use snapbus_bus::subscriber::{InPlaceEvent, Subscriber};
    /// # fn f(sub: &mut Subscriber) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut seqs = Vec::new();
    /// sub.drain_in_place(Duration::from_millis(100), 4096, |r| r.payload.word(0), |ev| {
    ///     if let InPlaceEvent::Record(r) = ev {
    ///         seqs.push(r.meta.seq);
    ///     }
    ///     ControlFlow::Continue(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn drain_in_place<R>(
        &mut self,
        timeout: Duration,
        max: usize,
        mut read: impl FnMut(&InPlaceRecord<'_>) -> R,
        mut on: impl FnMut(InPlaceEvent<'_, R>) -> ControlFlow<()>,
    ) -> Result<usize, SubscribeError> {
        if max == 0 {
            return Ok(0);
        }
        // Inlined wherever it is called, as `read_record`'s closure is, so the caller's value
        // does not come back through the stack ("Speed") — in the loop below, that is; `wait`
        // (the first record of a call) is not inlined, and its one record a call pays it.
        let mut read = std::convert::identity(
            #[inline(always)]
            |r: &InPlaceRecord<'_>| Some(read(r)),
        );
        let Some(first) = self.wait(timeout, &mut read) else {
            return Ok(0);
        };
        let lane_k = match first {
            Next::Found(Found::Record(k, ..)) => Some(k),
            _ => None,
        };
        if on(self.in_place_event(first)).is_break() {
            return Ok(1);
        }
        Ok(match lane_k {
            Some(k) => 1 + self.drain_lane(k, max - 1, &mut read, &mut on),
            None => 1,
        })
    }

    /// [`Subscriber::drain_in_place`] after a record of lane `k`: that lane's next records, up
    /// to `max` events; how many `on` got.
    #[inline(always)]
    fn drain_lane<R>(
        &mut self,
        k: usize,
        max: usize,
        read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
        on: &mut impl FnMut(InPlaceEvent<'_, R>) -> ControlFlow<()>,
    ) -> usize {
        let Subscriber {
            lanes,
            stats,
            opts,
            since_pump,
            last_pump,
            ..
        } = self;
        let globs = &opts.globs;
        let lane = &mut lanes[k];
        // A cut is checked before every frame by the general path: leave cut lanes to it. (A
        // lane ends only where the loop below stops.)
        if lane.cut_at.is_some() || lane.ended {
            return 0;
        }
        // The control socket is due as `wait` says: every 1,024 records, or 20 ms (the clock
        // read every 128 records: `on` may be slow). Counted here, stored when the loop ends.
        let mut since = *since_pump;
        let mut n = 0;
        while n < max {
            // The plain records first, in one run up to the next clock check (every 128
            // records, below); then one step of the general loop, which reads whatever ended
            // the run (and does the check).
            let budget = (max - n).min((127 - since % 128) as usize);
            if budget > 0 {
                let end = run(lane, stats, &mut n, budget, read, on);
                since += end.read as u32;
                if end.broke || n >= max {
                    break;
                }
            }
            since += 1;
            if since >= PUMP_EVERY_RECORDS
                || (since % 128 == 0 && last_pump.elapsed() >= PUMP_EVERY)
            {
                // The caller's next wait serves it (its first step counts to the limit).
                since = PUMP_EVERY_RECORDS - 1;
                break;
            }
            match read_record(lane, globs, read) {
                Ok((meta, Some(value))) => {
                    stats.delivered += 1;
                    n += 1;
                    if on(InPlaceEvent::Record(lane.record(meta, value))).is_break() {
                        break;
                    }
                }
                Ok((meta, None)) => lane.count_skipped(&meta, stats),
                Err(no) => {
                    if let Some(f) = no_frame::<R>(lane, stats, k, no) {
                        n += 1;
                        // The last event of this call either way.
                        let _ = on(InPlaceEvent::Other(lane_event(lane, f)));
                    }
                    break;
                }
            }
        }
        *since_pump = since;
        n
    }
}

/// The plain records at a lane's cursor, up to `budget` ([`LaneReader::read_run_in_place`]):
/// each one `read` takes goes to `on` (counted in `n` and the stats) once it is validated. A
/// record of a key not classified yet ends the run: the general loop classifies it.
#[inline(always)]
fn run<R>(
    lane: &mut SubLane,
    stats: &mut SubscriberStats,
    n: &mut usize,
    budget: usize,
    read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
    on: &mut impl FnMut(InPlaceEvent<'_, R>) -> ControlFlow<()>,
) -> RunEnd {
    let SubLane {
        reader,
        matches,
        catalog,
        info,
        producer_id,
        ..
    } = lane;
    let (matches, catalog, info, producer_id) = (&*matches, &*catalog, &*info, *producer_id);
    reader.read_run_in_place(
        budget,
        #[inline(always)]
        |m, view| {
            let schema = match matches.get(m.schema_key) {
                KeyClass::Match(schema) => schema,
                KeyClass::Skip => return Visit::Pass,
                KeyClass::Unknown => return Visit::Stop,
            };
            let emitter = catalog.emitter(m.emitter).map(|e| &**e);
            let record = RecordRef {
                producer_id,
                producer: info,
                schema,
                emitter,
                meta: *m,
                payload: view,
            };
            match read(&record) {
                Some(r) => Visit::Take((r, schema, emitter)),
                None => Visit::Pass,
            }
        },
        #[inline(always)]
        |meta, (payload, schema, emitter)| {
            stats.delivered += 1;
            *n += 1;
            on(InPlaceEvent::Record(RecordRef {
                producer_id,
                producer: info,
                schema,
                emitter,
                meta,
                payload,
            }))
        },
    )
}

/// The lane a find is of.
fn found_lane<R>(f: &Found<R>) -> usize {
    match f {
        Found::Record(k, ..) | Found::Lagged(k, ..) | Found::Ended(k) => *k,
    }
}

/// Reads a lane's next record in place ([`visit`] makes what `read` says of it): the reader's
/// outcome, for [`Subscriber::poll_lane`] and [`Subscriber::drain_in_place`].
#[inline(always)]
fn read_record<R>(
    lane: &mut SubLane,
    globs: &[Glob],
    read: &mut impl FnMut(&InPlaceRecord<'_>) -> Option<R>,
) -> Result<(FrameMeta, Option<R>), NoFrame> {
    let SubLane {
        reader,
        matches,
        catalog,
        info,
        producer_id,
        ..
    } = lane;
    // Inlined (so are `visit` and `read_in_place`): out of line, the closure's result (the
    // caller's value, of any size) came back through the stack, and copying it on stalled on
    // the stores that had just written it (`Subscriber::drain_in_place`, "Speed").
    reader.read_in_place(
        #[inline(always)]
        |m, view| visit(globs, matches, catalog, info, *producer_id, m, view, read),
    )
}

/// What a lane's reader said other than a record: counted, and what it makes the subscriber
/// report, if anything. `Empty` ends a batch being read (and, of a dead producer's lane read
/// to its end, the lane). Inlined: a spinning reader meets `Empty` at every poll.
#[inline(always)]
fn no_frame<R>(
    lane: &mut SubLane,
    stats: &mut SubscriberStats,
    k: usize,
    no: NoFrame,
) -> Option<Found<R>> {
    match no {
        NoFrame::Lagged(lost) => {
            // Split what the reader counted as damage from overwrite loss.
            let damaged = lane.reader.stats().damaged;
            let new_damage = damaged.saturating_sub(lane.damaged_seen).min(lost);
            lane.damaged_seen = damaged;
            stats.damaged += new_damage;
            stats.lost += lost - new_damage;
            Some(Found::Lagged(k, lost - new_damage, new_damage))
        }
        NoFrame::Closed => {
            lane.ended = true;
            Some(Found::Ended(k))
        }
        NoFrame::Empty => {
            // A batch read to the end of what was there.
            lane.in_batch = false;
            lane.pending_since = None;
            if lane.dead && !lane.reader.has_pending_bytes() {
                lane.ended = true;
                return Some(Found::Ended(k));
            }
            None
        }
        NoFrame::Pending => None,
    }
}

//! [`run`]: a [`Reader`]'s items handed to a [`Consumer`]'s hooks.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use snapbus_bus::runtime::BusDir;
use snapbus_bus::schemas::SchemaDescriptor;

use super::options::{RunError, RunOptions, RunSummary};
use super::reader::{Item, Reader};
use super::record::Record;
use super::{Consumer, Flow, HookError};

/// Subscribes to the bus of `dir` and feeds `consumer` until it, a signal, `until_end` or
/// `stop` says to stop; flushes before returning (also on a hook error). Idle consumers sleep
/// on their doorbell: no CPU is used while nothing arrives.
pub fn run<C: Consumer + ?Sized>(
    dir: &BusDir,
    opts: &RunOptions,
    consumer: &mut C,
    stop: Option<&AtomicBool>,
) -> Result<RunSummary, RunError> {
    let mut reader = Reader::open(dir, opts)?;
    let result = loop {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            reader.stop();
        }
        match step(&mut reader, consumer) {
            Ok(None) => {}
            Ok(Some(summary)) => break Ok(summary),
            Err(e) => break Err(e),
        }
    };
    let flushed = consumer.flush();
    match (result, flushed) {
        (Ok(_), Err(e)) => Err(RunError::Hook(e)),
        (r, _) => r,
    }
}

/// What one batch of items did to the run.
#[derive(Default)]
struct Step {
    /// The first record of a schema was handed over: ask the consumer what to extract.
    new_schema: Option<Arc<SchemaDescriptor>>,
    /// The run is over.
    end: Option<RunSummary>,
    /// A hook said to stop.
    stop: bool,
    error: Option<HookError>,
}

/// Hands the items of what a lane holds now to the consumer: `Some` when the run is over.
fn step<C: Consumer + ?Sized>(
    reader: &mut Reader,
    consumer: &mut C,
) -> Result<Option<RunSummary>, RunError> {
    let mut st = Step::default();
    reader.drain(Duration::from_millis(100), usize::MAX, |item| {
        match hand(consumer, item, &mut st) {
            Ok(Flow::Continue) if st.new_schema.is_none() && st.end.is_none() => {
                return ControlFlow::Continue(());
            }
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => st.stop = true,
            Err(e) => st.error = Some(e),
        }
        ControlFlow::Break(())
    })?;
    if let Some(e) = st.error {
        return Err(RunError::Hook(e));
    }
    consumer.caught_up().map_err(RunError::Hook)?;
    if let Some(schema) = st.new_schema {
        reader.set_extract(&schema, consumer.extract(&schema));
    }
    Ok(match (st.end, st.stop) {
        (Some(summary), _) => Some(summary),
        (None, true) => Some(reader.end()),
        (None, false) => None,
    })
}

/// Hands one item to the consumer's hook.
fn hand<C: Consumer + ?Sized>(
    consumer: &mut C,
    item: Item<'_>,
    st: &mut Step,
) -> Result<Flow, HookError> {
    match item {
        Item::Record(r) => consumer.on_event(&r),
        Item::NewSchema(r) => {
            st.new_schema = Some(Arc::clone(r.schema));
            first_record(consumer, &r)
        }
        Item::Lag(lag) => consumer.on_lag(lag),
        Item::Producer(change) => consumer.on_producer(change),
        Item::Flush => consumer.flush().map(|()| Flow::Continue),
        Item::End(summary) => {
            st.end = Some(summary);
            Ok(Flow::Continue)
        }
    }
}

/// The first record of a schema: the schema announced, then the record.
fn first_record<C: Consumer + ?Sized>(consumer: &mut C, r: &Record<'_>) -> Result<Flow, HookError> {
    if consumer.on_schema(r.schema)? == Flow::Stop {
        return Ok(Flow::Stop);
    }
    consumer.on_event(r)
}

//! [`run`]: a [`Reader`]'s items handed to a [`Consumer`]'s hooks.

use std::sync::atomic::{AtomicBool, Ordering};

use snapbus_bus::runtime::BusDir;

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

/// Hands the reader's next item to the consumer: `Some` when the run is over.
fn step<C: Consumer + ?Sized>(
    reader: &mut Reader,
    consumer: &mut C,
) -> Result<Option<RunSummary>, RunError> {
    let hook = RunError::Hook;
    let (flow, new_schema) = match reader.next()? {
        None => (Flow::Continue, None),
        Some(Item::Record(r)) => (consumer.on_event(&r).map_err(hook)?, None),
        Some(Item::NewSchema(r)) => (
            first_record(consumer, &r).map_err(hook)?,
            Some(r.schema.clone()),
        ),
        Some(Item::Lag {
            producer_id,
            producer,
            lost,
        }) => (
            consumer.on_lag(producer_id, producer, lost).map_err(hook)?,
            None,
        ),
        Some(Item::Producer(change)) => (consumer.on_producer(change).map_err(hook)?, None),
        Some(Item::Flush) => {
            consumer.flush().map_err(hook)?;
            (Flow::Continue, None)
        }
        Some(Item::End(summary)) => return Ok(Some(summary)),
    };
    if let Some(schema) = new_schema {
        reader.set_extract(&schema, consumer.extract(&schema));
    }
    Ok(match flow {
        Flow::Continue => None,
        Flow::Stop => Some(reader.end()),
    })
}

/// The first record of a schema: the schema announced, then the record.
fn first_record<C: Consumer + ?Sized>(consumer: &mut C, r: &Record<'_>) -> Result<Flow, HookError> {
    if consumer.on_schema(r.schema)? == Flow::Stop {
        return Ok(Flow::Stop);
    }
    consumer.on_event(r)
}

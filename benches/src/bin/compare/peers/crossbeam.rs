//! crossbeam-channel between two threads of one process: the upper bound of what any
//! cross-process transport could reach with a channel's semantics.
//!
//! 64-byte messages travel by value (`[u8; 64]`); larger ones as `Vec<u8>` buffers that the
//! consumer sends back for reuse, so neither side allocates in the loop (the producer copies
//! the message into a recycled buffer, as the other peers copy it into their transport).

use std::time::Duration;

use anyhow::{Result, anyhow};
use crossbeam_channel::{Receiver, Sender, bounded};

use crate::common::{RunArgs, Tally, Wait, pin, run_producer, say};

pub(crate) const HOW: &str = "`crossbeam_channel::bounded(1024)` between two threads pinned \
    to the two CPUs; 64-byte messages by value, larger ones in recycled `Vec<u8>` buffers \
    (returned on a second channel); spinning consumer: `try_recv` in a loop, sleeping: `recv`.";

/// Channel capacity in messages.
const CAPACITY: usize = 1024;

pub(crate) fn both(args: &RunArgs) -> Result<()> {
    if args.size == 64 {
        run::<[u8; 64]>(
            args,
            |m| m.as_slice(),
            |buf, _| {
                let mut a = [0u8; 64];
                a.copy_from_slice(buf);
                Some(a)
            },
            |_| {},
        )
    } else {
        let (back_tx, back_rx) = bounded::<Vec<u8>>(CAPACITY + 2);
        for _ in 0..CAPACITY + 2 {
            back_tx
                .send(vec![0u8; args.size])
                .map_err(|_| anyhow!("pool"))?;
        }
        run::<Vec<u8>>(
            args,
            |m| m.as_slice(),
            move |buf, wait| {
                let mut v = match wait {
                    Wait::Spin => loop {
                        if let Ok(v) = back_rx.try_recv() {
                            break v;
                        }
                        std::hint::spin_loop();
                    },
                    Wait::Sleep => back_rx.recv().ok()?,
                };
                v.copy_from_slice(buf);
                Some(v)
            },
            move |v| {
                let _ = back_tx.send(v);
            },
        )
    }
}

/// Runs the producer on this thread and the consumer on a second one.
fn run<M: Send + 'static>(
    args: &RunArgs,
    view: fn(&M) -> &[u8],
    mut make: impl FnMut(&[u8], Wait) -> Option<M>,
    recycle: impl FnMut(M) + Send + 'static,
) -> Result<()> {
    let (tx, rx): (Sender<M>, Receiver<M>) = bounded(CAPACITY);
    let consumer = {
        let args = args.clone();
        std::thread::spawn(move || consume(&args, rx, view, recycle))
    };
    pin(args.cpu)?;
    let wait = args.wait;
    let report = run_producer(
        args,
        &[],
        |buf| {
            let m = make(buf, wait).ok_or_else(|| anyhow!("buffer pool closed"))?;
            tx.send(m).map_err(|_| anyhow!("consumer gone"))
        },
        || Ok(()),
    );
    let tally = consumer
        .join()
        .map_err(|_| anyhow!("consumer thread panicked"))??;
    let producer = report?;
    let mut result = tally.report();
    // One process: its CPU time covers both threads; the producer's share is not separable.
    result.cpu_nanos = result.cpu_nanos.max(producer.cpu_nanos);
    say(&format!("result {}", serde_json::to_string(&result)?))
}

fn consume<M>(
    args: &RunArgs,
    rx: Receiver<M>,
    view: fn(&M) -> &[u8],
    mut recycle: impl FnMut(M),
) -> Result<Tally> {
    pin(args.other_cpu)?;
    let mut tally = Tally::new(args);
    loop {
        let m = match args.wait {
            Wait::Spin => match rx.try_recv() {
                Ok(m) => m,
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    std::hint::spin_loop();
                    continue;
                }
                Err(e) => return Err(anyhow!("producer gone: {e}")),
            },
            Wait::Sleep => rx
                .recv_timeout(Duration::from_secs(60))
                .map_err(|e| anyhow!("producer gone: {e}"))?,
        };
        let more = tally.on_message(view(&m));
        recycle(m);
        if !more {
            return Ok(tally);
        }
    }
}

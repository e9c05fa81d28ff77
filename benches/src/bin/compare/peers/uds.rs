//! A Unix domain stream socket: messages framed by a `u32` length, written with one `write`
//! per message or through a 64 KiB `BufWriter`; the consumer reads through a 64 KiB
//! `BufReader` and blocks in `read` when the socket is empty.

use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};

use anyhow::{Context, Result, bail};

use crate::common::{RunArgs, Tally, finish_consumer, run_producer, say};

pub(crate) const HOW: &str = "`UnixStream` (SOCK_STREAM), default socket buffers; each message \
    is a `u32` length then the bytes, sent with one `write_all` of a prebuilt buffer (one \
    syscall); the consumer reads through a 64 KiB `BufReader` and blocks in `read`.";
pub(crate) const HOW_BATCHED: &str = "as above, but the producer writes through a 64 KiB \
    `BufWriter` (a syscall per ~64 KiB), flushed at the end; no latency row (batching holds \
    messages back by design).";

/// Read buffer and batch size.
const BUF_BYTES: usize = 64 << 10;

pub(crate) fn consumer(args: &RunArgs) -> Result<()> {
    let path = args.scratch.join("uds.sock");
    let listener = UnixListener::bind(&path).with_context(|| format!("bind {}", path.display()))?;
    say(&format!("ready {}", path.display()))?;
    let (stream, _) = listener.accept()?;
    let mut reader = BufReader::with_capacity(BUF_BYTES, stream);
    let mut tally = Tally::new(args);
    let mut msg = vec![0u8; args.size];
    loop {
        let mut len = [0u8; 4];
        reader
            .read_exact(&mut len)
            .context("the producer hung up early")?;
        let len = u32::from_le_bytes(len) as usize;
        if len != args.size {
            bail!("frame of {len} bytes, expected {}", args.size);
        }
        reader.read_exact(&mut msg)?;
        if !tally.on_message(&msg) {
            break;
        }
    }
    finish_consumer(tally)
}

pub(crate) fn producer(args: &RunArgs, batched: bool) -> Result<()> {
    let stream = UnixStream::connect(&args.rendezvous)
        .with_context(|| format!("connect {}", args.rendezvous))?;
    let prefix = (args.size as u32).to_le_bytes();
    let report = if batched {
        let mut w = BufWriter::with_capacity(BUF_BYTES, stream);
        let w = std::cell::RefCell::new(&mut w);
        run_producer(
            args,
            &prefix,
            |frame| Ok(w.borrow_mut().write_all(frame)?),
            || Ok(w.borrow_mut().flush()?),
        )?
    } else {
        let mut s = &stream;
        run_producer(args, &prefix, |frame| Ok(s.write_all(frame)?), || Ok(()))?
    };
    say(&format!("done {}", serde_json::to_string(&report)?))
}

//! ipc-channel (servo): its untyped bytes channel, a `SOCK_SEQPACKET` socket pair on Linux.
//!
//! The handshake: the consumer opens an `IpcOneShotServer<IpcBytesReceiver>` and prints its
//! name; the producer makes a `bytes_channel`, connects to the server and sends it the
//! receiving end (the file descriptor travels as `SCM_RIGHTS`), keeping the sending end. Once
//! `accept` returns that receiver the consumer prints `joined`; the one-shot connection
//! itself carries nothing more.

use anyhow::{Context, Result, bail};
use ipc_channel::IpcError;
use ipc_channel::ipc::{self, IpcBytesReceiver, IpcOneShotServer, IpcSender};

use crate::common::{RunArgs, Tally, finish_consumer, run_producer, say};

pub(crate) const HOW: &str = "`ipc::bytes_channel()` (raw bytes, no serde: a SOCK_SEQPACKET \
    socket pair, default buffers), its receiving end handed to the consumer through an \
    `IpcOneShotServer`; one `IpcBytesSender::send(&[u8])` per message (one `sendmsg`; messages \
    above the ~208 KiB socket buffer go in fragments over a side channel made per message); \
    the consumer blocks in `IpcBytesReceiver::recv`, which returns a new `Vec<u8>` each time.";

/// The consumer has its receiver only once the producer sent it: it says `joined` then.
pub(crate) const NEEDS_JOIN: bool = true;

pub(crate) fn consumer(args: &RunArgs) -> Result<()> {
    let (server, name) =
        IpcOneShotServer::<IpcBytesReceiver>::new().context("ipc-channel: one-shot server")?;
    say(&format!("ready {name}"))?;
    let (_bootstrap, rx) = server
        .accept()
        .context("ipc-channel: accept the producer")?;
    say("joined")?;
    let mut tally = Tally::new(args);
    loop {
        let msg = match rx.recv() {
            Ok(msg) => msg,
            Err(IpcError::Disconnected) => bail!("the producer hung up early"),
            Err(e) => return Err(e).context("ipc-channel: recv"),
        };
        if !tally.on_message(&msg) {
            break;
        }
    }
    finish_consumer(tally)
}

pub(crate) fn producer(args: &RunArgs) -> Result<()> {
    let (tx, rx) = ipc::bytes_channel().context("ipc-channel: bytes channel")?;
    let bootstrap = IpcSender::<IpcBytesReceiver>::connect(args.rendezvous.clone())
        .with_context(|| format!("ipc-channel: connect to {}", args.rendezvous))?;
    bootstrap
        .send(rx)
        .context("ipc-channel: hand over the receiver")?;
    let report = run_producer(
        args,
        &[],
        |msg| tx.send(msg).context("ipc-channel: send"),
        || Ok(()),
    )?;
    say(&format!("done {}", serde_json::to_string(&report)?))
}

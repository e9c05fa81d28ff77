//! `snapbus attach KIND [ARGS…]`: starts a consumer (one of
//! [`KINDS`](crate::consumer_kinds::KINDS)) as a process the broker supervises, and returns once
//! it is subscribed and reading — nothing emitted after `attach` returns is missed. Prints the
//! consumer's id on stdout (for `snapbus detach ID`); `--foreground` runs the consumer in this
//! terminal instead.
//!
//! The arguments are the consumer's own (those of its foreground verb), parsed here with its
//! own parser and checked ([`BuiltinConsumer::check`]) before anything starts, then forwarded
//! to it ([`BuiltinConsumer::argv`]: by default what the user gave,
//! [`forward`](crate::consumer_kinds::kind::forward)).

use anyhow::Context;
use clap::{ArgMatches, FromArgMatches};
use snapbus_bus::client::{AttachRequest, Attached, ClientError};
use snapbus_bus::runtime::BusDir;

use crate::bus::{bus_dir, connect};
use crate::cli::{Restart, SuperviseArgs};
use crate::consumer_kinds::kind::BuiltinConsumer;

/// `snapbus attach KIND …` for consumer `T`, with `m` its parsed arguments.
pub(crate) fn attach_kind<T: BuiltinConsumer>(m: &ArgMatches) -> anyhow::Result<()> {
    let supervise = SuperviseArgs::from_arg_matches(m)?;
    let args = T::from_arg_matches(m)?;
    let dir = bus_dir(args.bus())?;
    // Waits for the bus before asking it (or, with --foreground, before the consumer reads).
    crate::bus::wait_for_bus(&dir, &supervise.wait, "snapbus attach")?;
    if supervise.foreground {
        return args.run();
    }
    args.check(&dir, "snapbus attach")?;
    let argv = args.argv(m, &dir, &[])?;
    let started = start(&dir, T::KIND, argv, supervise.restart == Restart::OnFailure)?;
    args.announce(&dir, &started)
}

/// Asks the broker to start `snapbus <argv>`; returns once the consumer is subscribed. Prints
/// nothing.
pub(crate) fn start(
    dir: &BusDir,
    kind: &str,
    argv: Vec<String>,
    restart: bool,
) -> anyhow::Result<Attached> {
    let client = connect(dir)?;
    let cwd = std::env::current_dir().context("finding the working directory")?;
    let request = AttachRequest {
        kind: kind.to_owned(),
        args: argv,
        cwd: cwd.display().to_string(),
        restart,
    };
    match client.attach(request) {
        Ok(attached) => Ok(attached),
        // The broker's reason is the message (the consumer's exit, its log).
        Err(e @ ClientError::Refused { .. }) => Err(e.into()),
        Err(e) => Err(e).with_context(|| format!("waiting for the {kind} to subscribe")),
    }
}

//! `snapbus`: the command-line tool. Thin: parses arguments, runs one verb, maps errors to a
//! message and a non-zero exit code. A closed stdout (`snapbus demo | head`) is success,
//! never a panic, unless what it lost was what the verb was asked for (`snapbus attach … |
//! tail -0`: the consumer's id; said, exit 1).
//!
//! # Guarantees
//!
//! - **No verb can slow or stop an experiment.** Verbs that read (`ls`, `echo`, `record`,
//!   `attach` …) map the producers' lanes read-only; `filter` changes levels, nothing else.
//! - **A failed `attach` leaves nothing behind**: the consumer's arguments, files and the bus
//!   are checked in the caller before the broker starts anything.
//! - **Exit codes say what happened**: 0 on success, 1 with a message on stderr on failure, and
//!   78 (`EXIT_NO_RESTART`) when a consumer meets a permanent write error (a full disk, a
//!   read-only file system), so its supervisor does not restart it into the same error.
//!
//! # Example
//!
//! ```sh
//! snapbus demo                                # a bus, a simulated experiment, an echo
//! snapbus up && snapbus ls                    # a bus of your own, and what is on it
//! ID=$(snapbus attach recorder -o run.mcap)   # a supervised recorder; `snapbus detach $ID`
//! snapbus down
//! ```
//!
//! `docs/cli.md` in the repository describes every verb.

// The CLI needs Rust 1.88 (rmcp), the libraries 1.85, which has no `if let` chains: the CLI
// keeps the libraries' style (nested `if let`, `%` over `is_multiple_of`) rather than being
// the one crate written otherwise.
#![allow(clippy::collapsible_if, clippy::manual_is_multiple_of)]

mod announce;
mod bus;
mod cli;
mod command;
mod consumer_kinds;
mod demo;
#[cfg(feature = "mcp")]
mod mcp;
mod negative;
mod stdout;
mod unbuilt;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

fn main() -> ExitCode {
    let cli = match command::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let args: Vec<String> = std::env::args().collect();
            let message = unbuilt::unbuilt_verb_error(&err)
                .or_else(|| negative::negative_value_error(&command::Cli::command(), &err, &args));
            match message {
                Some(message) => {
                    snapbus_bus::say!("snapbus: error: {message}");
                    return ExitCode::from(2);
                }
                None => err.exit(),
            }
        }
    };
    let code: u8 = match command::run(cli) {
        Ok(()) => 0,
        Err(err) if err.downcast_ref::<stdout::Lost>().is_some() => {
            snapbus_bus::say!("snapbus: error: {err}");
            1
        }
        Err(err) if is_broken_pipe(&err) => 0,
        Err(err) => {
            snapbus_bus::say!("snapbus: error: {}", bus::error_chain(&err));
            if restart_cannot_help(&err)
                || command::record::is_permanent_write_error(&err)
                || command::python::restart_cannot_help(&err)
            {
                // A full disk or an unwritable place: a supervised consumer must not be
                // restarted into it.
                snapbus_bus::runtime::EXIT_NO_RESTART as u8
            } else {
                1
            }
        }
    };
    // A consumer the broker supervises says how it exits (a broker that re-adopted it after a
    // restart is not its parent and could not know).
    snapbus_bus::broker::report_exit(i32::from(code));
    ExitCode::from(code)
}

/// A full disk or quota, or a read-only filesystem: a supervised consumer that failed so exits
/// `EXIT_NO_RESTART`, and the broker does not restart it into the same failure.
fn restart_cannot_help(err: &anyhow::Error) -> bool {
    use std::io::ErrorKind;
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::ReadOnlyFilesystem
            )
        })
    })
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

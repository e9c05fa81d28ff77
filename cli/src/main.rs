//! `snapbus`: the command-line tool. Thin: parses arguments, runs one verb, maps errors to a
//! message and a non-zero exit code. A closed stdout (`snapbus demo | head`) is success.

mod bus;
mod cli;
mod command;
mod demo;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match command::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("snapbus: error: {err:#}");
            if command::record::is_permanent_write_error(&err) {
                // A full disk or an unwritable place: a supervised recorder must not be
                // restarted into it.
                ExitCode::from(snapbus_bus::runtime::EXIT_NO_RESTART as u8)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

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
            eprintln!("snapbus: error: {}", bus::error_chain(&err));
            ExitCode::FAILURE
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

//! One module per verb.

mod demo;
mod schemas;

use crate::cli::{Cli, Command};

/// Runs the verb the user asked for.
pub(crate) fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Schemas(args) => schemas::run(&args),
    }
}

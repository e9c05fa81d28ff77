//! One module per verb.

mod demo;
mod down;
mod echo;
mod filter;
mod hz;
mod ls;
mod schemas;
mod up;

use crate::cli::{Cli, Command};

/// Runs the verb the user asked for.
pub(crate) fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Up(args) => up::run(&args),
        Command::Down(args) => down::run(&args),
        Command::Ls(args) => ls::run(&args),
        Command::Echo(args) => echo::run(&args),
        Command::Hz(args) => hz::run(&args),
        Command::Filter(args) => filter::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Schemas(args) => schemas::run(&args),
    }
}

//! One module per verb (the built-in consumers' verbs are listed in
//! [`KINDS`](crate::consumer_kinds::KINDS)).

#[cfg(feature = "aggregator")]
pub(crate) mod aggregate;
pub(crate) mod attach;
mod demo;
pub(crate) mod detach;
mod down;
mod echo;
mod export;
mod filter;
mod hz;
mod inspect;
mod ls;
#[cfg(feature = "otlp")]
pub(crate) mod otlp;
#[cfg(feature = "plotter")]
pub(crate) mod plot;
#[cfg(feature = "prometheus")]
pub(crate) mod prometheus;
pub(crate) mod python;
pub(crate) mod record;
mod replay;
pub(crate) mod rerun;
mod schemas;
mod snapshot;
pub(crate) mod spawn;
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
        Command::Snapshot(args) => snapshot::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Export(args) => export::run(&args),
        Command::Consumer(verb) => verb.run(),
        Command::Attach(args) => args.run(),
        Command::Detach(args) => detach::run(&args),
        Command::Spawn(args) => args.run(),
    }
}

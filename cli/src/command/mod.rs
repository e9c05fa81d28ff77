//! One module per verb (the built-in consumers' verbs are listed in
//! [`KINDS`](crate::consumer_kinds::KINDS)), and the command line they make up: [`Cli`], the
//! top of the module graph (the verbs' options are in `cli.rs`, a leaf).

#[cfg(feature = "aggregator")]
pub(crate) mod aggregate;
pub(crate) mod attach;
#[cfg(feature = "bridge")]
pub(crate) mod bridge;
mod demo;
pub(crate) mod detach;
mod down;
mod echo;
mod export;
mod filter;
#[cfg(feature = "foxglove")]
pub(crate) mod foxglove;
mod hz;
mod inspect;
pub(crate) mod ls;
#[cfg(feature = "mcp")]
mod mcp;
pub(crate) mod monty;
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

use clap::{Parser, Subcommand};

use crate::cli::{
    DemoArgs, DetachArgs, DownArgs, EchoArgs, ExportArgs, FilterArgs, HzArgs, InspectArgs, LsArgs,
    ReplayArgs, SchemasArgs, SnapshotArgs, UpArgs,
};
use crate::consumer_kinds::{AttachArgs, ConsumerVerb, SpawnArgs};

/// snapbus: a shared-memory event bus for scientific telemetry.
#[derive(Debug, Parser)]
#[command(name = "snapbus", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Start the broker of a bus (detached, unless --foreground).
    Up(UpArgs),
    /// Stop the broker of a bus, and the consumers it supervises (they finish their files).
    ///
    /// Supervised consumers (`attach`, `spawn`) get SIGTERM and are waited for, unless
    /// --keep-consumers. Producers and unsupervised consumers (`echo`, `record` in a terminal)
    /// keep running and rejoin when the bus is started again, with the same ids. Logs stay in
    /// the bus's runtime directory (`broker.log`, `consumer-<id>.log`).
    Down(DownArgs),
    /// List producers, consumers and schemas on a bus, with rates, lag and losses.
    Ls(LsArgs),
    /// Print events from a bus as JSON lines.
    Echo(EchoArgs),
    /// Print per-schema rates and bandwidth, like `ros2 topic hz`.
    Hz(HzArgs),
    /// Set the bus filter: the level filter of every producer, running or started later,
    /// e.g. 'info,monty.models=debug'; `--reset` gives producers back their own.
    ///
    /// The rule: while the bus has a filter, it is in force in every producer on the bus,
    /// present and future, in place of the producer's own `SNAPBUS_FILTER`; `snapbus filter
    /// --reset` removes it and every producer goes back to its own. `snapbus ls` shows the
    /// bus filter and each producer's filter in force. The bus filter outlives a broker crash
    /// and `down --keep-consumers`; a plain `down` ends it.
    Filter(FilterArgs),
    /// Run a simulated experiment with deterministic values on a bus.
    Demo(DemoArgs),
    /// List the schemas this build knows (built-in and demo) with descriptors and fingerprints.
    Schemas(SchemasArgs),
    /// The consumers' foreground verbs: `record`, `plot`, `aggregate`, `python`, `prometheus`,
    /// `otlp`, `foxglove`, `rerun`, `monty`.
    #[command(flatten)]
    Consumer(ConsumerVerb),
    /// Write what the rings hold now (including recently dead producers) into an MCAP file.
    Snapshot(SnapshotArgs),
    /// Republish recordings into the running bus with their original timing (or print them).
    Replay(ReplayArgs),
    /// Describe a recording: schemas, counts, time range, producers, losses, damage.
    Inspect(InspectArgs),
    /// Convert a recording to JSON lines, CSV, Parquet, or MCAP with JSON messages; or send it
    /// to an OTLP receiver with its original timestamps.
    Export(ExportArgs),
    /// Start a consumer (built-in, or Python) as a process supervised by the broker; prints its
    /// id once it is subscribed and reading.
    Attach(AttachArgs),
    /// Stop a consumer by id (it flushes first); waits until it has exited. Ids stay the same
    /// across broker restarts; an id of no running consumer is refused.
    Detach(DetachArgs),
    /// Start N supervised workers of a built-in consumer that split the work between them.
    Spawn(SpawnArgs),
    /// Serve MCP (Model Context Protocol) on stdin/stdout: an assistant asks the live bus and
    /// the recordings (read-only unless --allow-write).
    #[cfg(feature = "mcp")]
    Mcp(mcp::McpArgs),
}

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
        #[cfg(feature = "mcp")]
        Command::Mcp(args) => mcp::run(&args),
    }
}

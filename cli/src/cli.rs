//! Argument definitions (clap derive). One struct of options per verb; the verbs themselves
//! live in `command/<verb>.rs`.

use clap::{Args, Parser, Subcommand};

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
    /// Stop the broker of a bus and remove its socket.
    Down(BusArgs),
    /// List producers, consumers and schemas on a bus, with rates, lag and losses.
    Ls(LsArgs),
    /// Print events from a bus as JSON lines.
    Echo(EchoArgs),
    /// Print per-schema rates and bandwidth, like `ros2 topic hz`.
    Hz(HzArgs),
    /// Change the level filter of every running producer, e.g. 'info,monty.models=debug'.
    Filter(FilterArgs),
    /// Run a simulated experiment with deterministic values on a bus.
    Demo(DemoArgs),
    /// List the schemas this build knows (built-in and demo) with descriptors and fingerprints.
    Schemas(SchemasArgs),
}

/// Which bus.
#[derive(Debug, Args)]
pub(crate) struct BusArgs {
    /// The bus name (default: $SNAPBUS_BUS, else 'default').
    #[arg(long)]
    pub(crate) bus: Option<String>,
}

/// Options of `snapbus up`.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Run in this terminal instead of detaching.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// Seconds a dead producer's lane stays readable (for snapshots).
    #[arg(long, default_value_t = 300)]
    pub(crate) retention_secs: u64,
}

/// Options of `snapbus ls`.
#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Print the state as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Where a new consumer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum From {
    /// The oldest records still in the rings (history).
    Oldest,
    /// Only records written from now on.
    Latest,
}

/// Options of `snapbus echo`.
#[derive(Debug, Args)]
pub(crate) struct EchoArgs {
    /// Schema-id globs to subscribe to (default: all), e.g. 'demo.*'.
    pub(crate) globs: Vec<String>,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Start at the oldest records still in the rings, or at new ones.
    #[arg(long, value_enum, default_value_t = From::Latest)]
    pub(crate) from: From,
    /// Exit after this many events.
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Exit once every producer on the bus has ended (closed its lane, or died and was read
    /// to the end); at once if there is none.
    #[arg(long)]
    pub(crate) until_end: bool,
}

/// Options of `snapbus hz`.
#[derive(Debug, Args)]
pub(crate) struct HzArgs {
    /// Schema-id globs (default: all).
    pub(crate) globs: Vec<String>,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Seconds between reports.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) period_secs: f64,
    /// Exit after this many reports.
    #[arg(long)]
    pub(crate) reports: Option<u64>,
}

/// Options of `snapbus filter`.
#[derive(Debug, Args)]
pub(crate) struct FilterArgs {
    /// Directives: a default level and/or TARGET=LEVEL items, comma-separated (levels: trace,
    /// debug, info, warn, error, off), e.g. 'info,monty.models=debug'.
    pub(crate) directives: String,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

/// Image size `WxH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageSize {
    pub(crate) width: u32,
    pub(crate) height: u32,
}

impl std::str::FromStr for ImageSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("expected WIDTHxHEIGHT with both in 1..=4096 (e.g. 32x24), got {s:?}");
        let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let width: u32 = w.trim().parse().map_err(|_| bad())?;
        let height: u32 = h.trim().parse().map_err(|_| bad())?;
        if !(1..=4096).contains(&width) || !(1..=4096).contains(&height) {
            return Err(bad());
        }
        Ok(ImageSize { width, height })
    }
}

/// Options of `snapbus demo`.
#[derive(Debug, Args)]
#[command(after_long_help = crate::demo::VALUES_HELP)]
pub(crate) struct DemoArgs {
    /// Number of episodes.
    #[arg(long, default_value_t = 3)]
    pub(crate) episodes: u32,
    /// Steps per episode.
    #[arg(long, default_value_t = 5)]
    pub(crate) steps: u32,
    /// Steps per second (0: as fast as possible).
    #[arg(long, default_value_t = 20.0)]
    pub(crate) rate: f64,
    /// Size of the observation image, WIDTHxHEIGHT.
    #[arg(long, default_value = "8x6")]
    pub(crate) image: ImageSize,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// Don't start a `snapbus echo` that prints the events; only emit them.
    #[arg(long)]
    pub(crate) no_echo: bool,
}

/// Options of `snapbus schemas`.
#[derive(Debug, Args)]
pub(crate) struct SchemasArgs {
    /// Print JSON (one object per schema, with the full descriptor) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

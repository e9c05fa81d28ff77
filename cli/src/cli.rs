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
    /// Run a simulated experiment with deterministic values.
    Demo(DemoArgs),
    /// List the schemas this build knows (built-in and demo) with descriptors and fingerprints.
    Schemas(SchemasArgs),
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
}

/// Options of `snapbus schemas`.
#[derive(Debug, Args)]
pub(crate) struct SchemasArgs {
    /// Print JSON (one object per schema, with the full descriptor) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

//! `snapbus foxglove`: the Foxglove bridge in this terminal (`attach foxglove` runs it under the
//! broker). Serves Foxglove's WebSocket protocol on 127.0.0.1 first, prints its URL (open it
//! in Foxglove: Open connection → Foxglove WebSocket), then reads the bus from the history
//! still in the rings. Ctrl-C (or SIGTERM, which `detach` sends) stops it; the producers never
//! notice.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use snapbus_bus::client::Attached;
use snapbus_bus::runtime::BusDir;
use snapbus_consumers::foxglove::{Bridge, BridgeOptions, serve};
use snapbus_consumers::{RunOptions, run as run_consumer};

use crate::announce::{announce_url, publish_url};
use crate::bus::{bus_dir, connect, globs};
use crate::cli::{BusArgs, From};
use crate::consumer_kinds::kind::{BuiltinConsumer, bus_and_run};

/// Options of `snapbus foxglove` (and `attach foxglove`).
#[derive(Debug, Clone, Args)]
pub(crate) struct FoxgloveArgs {
    /// Schema-id globs to serve (default: all); repeatable.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// The port on 127.0.0.1 (Foxglove's default 8765; 0: a free one).
    #[arg(long, default_value_t = 8765)]
    pub(crate) port: u16,
    /// Messages kept per channel for a client that connects later (at most 64 MiB each, 512 MiB
    /// over all channels).
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub(crate) history: u64,
    /// Start with the history still in the rings, or with new records only.
    #[arg(long, value_enum, default_value_t = From::Oldest)]
    pub(crate) from: From,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

impl BuiltinConsumer for FoxgloveArgs {
    const KIND: &'static str = "foxglove";
    const VERB: &'static str = "foxglove";
    const VERB_ABOUT: &'static str = "Serve the bus live to Foxglove (its WebSocket protocol on \
        127.0.0.1: a channel per schema with its JSON Schema, images and point clouds as \
        Foxglove's own types), in this terminal; prints its URL";
    const ATTACH_ABOUT: &'static str = "A live Foxglove WebSocket server (see `snapbus foxglove \
        --help`); prints its URL once it is served and the bridge is reading";

    bus_and_run!();

    fn check(&self, _dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        globs(&self.schemas).map(drop)
    }

    fn what(&self) -> String {
        "a Foxglove WebSocket".to_owned()
    }

    /// Prints the server's URL on stdout (the bridge wrote it before it subscribed, and it has
    /// subscribed).
    fn announce(&self, dir: &BusDir, started: &Attached) -> anyhow::Result<()> {
        announce_url(dir, "foxglove", started, &url_path(dir, started.pid))
    }
}

pub(crate) fn run(args: &FoxgloveArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    drop(connect(&dir)?);
    let mut bridge = Bridge::new(&BridgeOptions {
        history: usize::try_from(args.history).unwrap_or(usize::MAX),
        ..BridgeOptions::default()
    });
    let server = serve(bridge.hub(), args.port).with_context(|| {
        format!(
            "serving Foxglove's WebSocket on 127.0.0.1:{} (is the port in use? --port 0 picks \
             a free one)",
            args.port
        )
    })?;
    let url_file = url_path(&dir, std::process::id());
    publish_url(&dir, "foxglove", &server.url(), &url_file)?;
    let mut opts = RunOptions::new("foxglove");
    opts.subscribe.globs = globs;
    opts.status = Some(bridge.board());
    opts.subscribe.start = args.from.start();
    let result = run_consumer(&dir, &opts, &mut bridge, None);
    let _ = std::fs::remove_file(&url_file);
    result?;
    Ok(())
}

/// Where bridge process `pid` of the bus of `dir` leaves its URL.
pub(crate) fn url_path(dir: &BusDir, pid: u32) -> PathBuf {
    dir.path().join(format!("foxglove-{pid}.url"))
}

//! `snapbus plot`: the live plotter in this terminal (`attach plotter` runs it under the
//! broker). Serves the page on 127.0.0.1 first, prints its URL on stdout, then reads the bus
//! (from the history still in the rings, by default). Ctrl-C (or SIGTERM, which `detach`
//! sends) stops it; the producers never notice.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use snapbus_bus::client::Attached;
use snapbus_bus::runtime::BusDir;
use snapbus_consumers::plotter::{Plotter, PlotterOptions, serve};
use snapbus_consumers::{RunOptions, run as run_consumer};

use crate::announce::{announce_url, publish_url};
use crate::bus::{bus_dir, connect, globs};
use crate::cli::{BusArgs, From};
use crate::consumer_kinds::kind::{BuiltinConsumer, bus_and_run};

/// Options of `snapbus plot` (and `attach plotter`).
#[derive(Debug, Clone, Args)]
pub(crate) struct PlotArgs {
    /// Schema-id globs to plot (default: all); repeatable.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// The port on 127.0.0.1 (0: a free one).
    #[arg(long, default_value_t = 0)]
    pub(crate) port: u16,
    /// Points kept per series (the oldest go first).
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(10..=100_000_000))]
    pub(crate) history: u64,
    /// Start with the history still in the rings, or with new records only.
    #[arg(long, value_enum, default_value_t = From::Oldest)]
    pub(crate) from: From,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

impl BuiltinConsumer for PlotArgs {
    const KIND: &'static str = "plotter";
    const VERB: &'static str = "plot";
    const VERB_ABOUT: &'static str = "Serve a live web page with plots of the numeric fields \
        (and images of the tensors) of the subscribed schemas, in this terminal; prints its URL";
    const ATTACH_ABOUT: &'static str = "A live web page plotting the subscribed schemas (see \
        `snapbus plot --help`); prints its URL once the page is served and the plotter is \
        reading";

    bus_and_run!();

    fn check(&self, _dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        globs(&self.schemas).map(drop)
    }

    fn what(&self) -> String {
        "a web page".to_owned()
    }

    /// Prints the page's URL on stdout (the plotter wrote it before it subscribed, and it has
    /// subscribed).
    fn announce(&self, dir: &BusDir, started: &Attached) -> anyhow::Result<()> {
        announce_url(dir, "plotter", started, &url_path(dir, started.pid))
    }
}

pub(crate) fn run(args: &PlotArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    drop(connect(&dir)?);
    let mut plotter = Plotter::new(PlotterOptions {
        history_points: usize::try_from(args.history).unwrap_or(usize::MAX),
        ..PlotterOptions::default()
    });
    let server = serve(plotter.store(), args.port).with_context(|| {
        format!(
            "serving the page on 127.0.0.1:{} (is the port in use? --port 0 picks a free one)",
            args.port
        )
    })?;
    let url_file = url_path(&dir, std::process::id());
    publish_url(&dir, "plot", &server.url(), &url_file)?;
    let mut opts = RunOptions::new("plotter");
    // Flushing turns the newest image records into frames: five times a second.
    opts.flush_every = std::time::Duration::from_millis(200);
    opts.subscribe.globs = globs;
    opts.status = Some(plotter.board());
    opts.subscribe.start = args.from.start();
    let result = run_consumer(&dir, &opts, &mut plotter, None);
    let _ = std::fs::remove_file(&url_file);
    result?;
    Ok(())
}

/// Where plotter process `pid` of the bus of `dir` leaves its URL.
pub(crate) fn url_path(dir: &BusDir, pid: u32) -> PathBuf {
    dir.path().join(format!("plotter-{pid}.url"))
}

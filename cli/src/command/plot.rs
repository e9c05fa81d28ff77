//! `snapbus plot`: the live plotter in this terminal (`attach plotter` runs it under the
//! broker). Serves the page on 127.0.0.1 first, prints its URL on stdout, then reads the bus
//! (from the history still in the rings, by default). Ctrl-C (or SIGTERM, which `detach`
//! sends) stops it; the producers never notice.

use std::path::PathBuf;

use anyhow::Context;
use snapbus_bus::lane::StartAt;
use snapbus_bus::runtime::BusDir;
use snapbus_consumers::plotter::{Plotter, PlotterOptions, serve};
use snapbus_consumers::{RunOptions, run as run_consumer};

use crate::bus::{bus_dir, connect, globs};
use crate::cli::{From, PlotArgs};

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
    let url = server.url();
    // For `attach plotter`, which prints the URL of the process it started.
    let url_file = url_path(&dir, std::process::id());
    let _ = crate::bus::create_file(&url_file).and_then(|mut f| {
        use std::io::Write;
        f.write_all(url.as_bytes())
    });
    println!("{url}");
    eprintln!(
        "snapbus plot: serving {url} for bus '{}' (Ctrl-C to stop)",
        dir.name()
    );
    let mut opts = RunOptions::new("plotter");
    // Flushing turns the newest image records into frames: five times a second.
    opts.flush_every = std::time::Duration::from_millis(200);
    opts.globs = globs;
    opts.start = StartAt::from(args.from);
    let result = run_consumer(&dir, &opts, &mut plotter, None);
    let _ = std::fs::remove_file(&url_file);
    result?;
    Ok(())
}

/// Where plotter process `pid` of the bus of `dir` leaves its URL.
pub(crate) fn url_path(dir: &BusDir, pid: u32) -> PathBuf {
    dir.path().join(format!("plotter-{pid}.url"))
}

/// The `snapbus plot` command line a supervised plotter runs.
pub(crate) fn argv(args: &PlotArgs) -> anyhow::Result<Vec<String>> {
    globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    // `--bus=NAME`: a name can never be read as an option.
    let mut argv = vec!["plot".to_owned(), format!("--bus={}", dir.name())];
    for g in &args.schemas {
        argv.push(format!("--schema={g}"));
    }
    argv.extend([
        "--port".to_owned(),
        args.port.to_string(),
        "--history".to_owned(),
        args.history.to_string(),
        "--from".to_owned(),
        match args.from {
            From::Oldest => "oldest",
            From::Latest => "latest",
        }
        .to_owned(),
    ]);
    Ok(argv)
}

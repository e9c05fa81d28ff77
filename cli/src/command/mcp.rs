//! `snapbus mcp`: a Model Context Protocol server over the live bus and its recordings, for an
//! assistant to ask the experiment (see [`crate::mcp`] for the tools).
//!
//! It speaks MCP over stdin/stdout (what MCP clients launch), logs to stderr, and stops when
//! the client closes its stdin. Read-only unless `--allow-write`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::cli::BusArgs;
use crate::mcp::{Config, serve_http, serve_stdio};

/// Options of `snapbus mcp`.
#[derive(Debug, Args)]
#[command(after_long_help = MCP_HELP)]
pub(crate) struct McpArgs {
    /// Also offer the tools that write files or start consumers (`snapshot`, `attach`);
    /// without it they are listed but refused.
    #[arg(long)]
    pub(crate) allow_write: bool,
    /// A directory of recordings to offer as resources and to `list_recordings` (e.g. the
    /// `up --record` directory); repeatable. Default: the working directory.
    #[arg(long = "recordings", value_name = "DIR")]
    pub(crate) recordings: Vec<PathBuf>,
    /// The most bytes of JSON one tool result holds; longer results are cut, with a cursor to
    /// continue from.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 10,
          value_parser = clap::value_parser!(u64).range(1024..=16 << 20))]
    pub(crate) max_result_bytes: u64,
    /// Serve MCP's streamable HTTP transport on this address (e.g. 127.0.0.1:8765; port 0:
    /// any free one) instead of stdin/stdout; prints the URL, which carries the server's
    /// token (every request needs it).
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<std::net::SocketAddr>,
    /// Let --http listen on an address other machines can reach.
    #[arg(long, requires = "http")]
    pub(crate) allow_remote: bool,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

const MCP_HELP: &str = "\
Add it to an MCP client as a stdio server, e.g. for Claude Code:
  claude mcp add snapbus -- snapbus mcp --recordings runs/
Tools: ls, describe_schema, tail, summarize, list_recordings, query_recording,
episode_reports; with --allow-write also snapshot and attach. Resources: the schemas on the
bus (snapbus://schema/<id>) and the recordings (file://...). Prompts: summarise_last_run,
compare_runs.";

pub(crate) fn run(args: &McpArgs) -> anyhow::Result<()> {
    let recordings = if args.recordings.is_empty() {
        vec![std::env::current_dir().context("the working directory")?]
    } else {
        args.recordings
            .iter()
            .map(|d| std::path::absolute(d).with_context(|| format!("resolving {}", d.display())))
            .collect::<anyhow::Result<_>>()?
    };
    for d in &recordings {
        anyhow::ensure!(d.is_dir(), "--recordings {}: not a directory", d.display());
    }
    let config = Config {
        bus: args.bus.clone(),
        allow_write: args.allow_write,
        recordings,
        max_result_bytes: args.max_result_bytes as usize,
        exe: std::env::current_exe().context("finding the snapbus binary")?,
    };
    snapbus_bus::say!(
        "snapbus mcp: {}{} (recordings in {})",
        if args.http.is_some() {
            "starting"
        } else {
            "serving MCP on stdin/stdout"
        },
        if args.allow_write {
            ", write tools allowed"
        } else {
            ", read-only"
        },
        config
            .recordings
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match args.http {
        Some(addr) => rt.block_on(serve_http(config, addr, args.allow_remote)),
        None => rt.block_on(serve_stdio(config)),
    }
}

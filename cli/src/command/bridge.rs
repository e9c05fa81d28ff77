//! `snapbus bridge`: the bus carried between machines over Zenoh (`attach bridge` runs it under
//! the broker). `--send` on a node publishes every record of the subscribed schemas and
//! answers history queries; `--receive` on a workstation re-emits what every node sends into
//! the local bus, each remote producer as `<name>@<host>`, with what never arrived counted as
//! lost by every consumer. Both on one machine relay both ways (records it re-emitted are never
//! sent back). Ctrl-C (or SIGTERM, which `detach` sends) stops it.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};
use clap::Args;
use snapbus_bus::runtime::BusDir;
use snapbus_bus::status::StatusBoard;
use snapbus_consumers::bridge::{NodeOptions, Station, ZenohOptions, bus_root, run_node};
use snapbus_consumers::{Consumer, RunOptions, run as run_consumer};

use crate::bus::{bus_dir, connect, globs, interrupted};
use crate::cli::{BusArgs, From};
use crate::consumer_kinds::kind::{BuiltinConsumer, bus_and_run};

/// Options of `snapbus bridge` (and `attach bridge`).
#[derive(Debug, Clone, Args)]
pub(crate) struct BridgeArgs {
    /// Publish this bus's records to the other machines (on a node).
    #[arg(long)]
    pub(crate) send: bool,
    /// Re-emit the records other machines publish into this bus (on a workstation).
    #[arg(long)]
    pub(crate) receive: bool,
    /// Schema-id globs to carry (default: all); repeatable.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// This machine's name in keys and in re-emitted producers' names (default: the host name).
    #[arg(long)]
    pub(crate) host: Option<String>,
    /// Where `--send`'s live stream starts in lanes that exist (a receiver asks for the
    /// history still in the rings anyway).
    #[arg(long, value_enum, default_value_t = From::Latest)]
    pub(crate) from: From,
    /// A Zenoh config file (JSON5): mode, endpoints, TLS, scouting.
    #[arg(long, value_name = "FILE")]
    pub(crate) zenoh_config: Option<PathBuf>,
    /// Zenoh's mode: peer (default; finds peers on the LAN, no router) or client (through a
    /// router).
    #[arg(long, value_parser = ["peer", "client"])]
    pub(crate) mode: Option<String>,
    /// A Zenoh endpoint to connect to, e.g. tcp/10.0.0.2:7447 or tls/host:7447; repeatable.
    #[arg(long, value_name = "ENDPOINT")]
    pub(crate) connect: Vec<String>,
    /// A Zenoh endpoint to listen on, e.g. tcp/0.0.0.0:7447; repeatable.
    #[arg(long, value_name = "ENDPOINT")]
    pub(crate) listen: Vec<String>,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

impl BuiltinConsumer for BridgeArgs {
    const KIND: &'static str = "bridge";
    const VERB: &'static str = "bridge";
    const VERB_ABOUT: &'static str = "Carry the bus between machines over Zenoh, in this \
        terminal: --send on a node, --receive on the workstation (remote producers appear as \
        NAME@HOST; records that never arrived count as lost)";
    const ATTACH_ABOUT: &'static str = "The bus carried between machines over Zenoh (see \
        `snapbus bridge --help`)";
    const PATH_FLAGS: &'static [&'static str] = &["zenoh_config"];

    bus_and_run!();

    fn check(&self, _dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        self.directions()?;
        globs(&self.schemas).map(drop)
    }

    fn what(&self) -> String {
        match (self.send, self.receive) {
            (true, true) => "Zenoh, both ways".to_owned(),
            (true, false) => "Zenoh".to_owned(),
            _ => "this bus, from Zenoh".to_owned(),
        }
    }
}

impl BridgeArgs {
    fn directions(&self) -> anyhow::Result<()> {
        if !self.send && !self.receive {
            bail!(
                "say which way: --send (on a node: publish this bus), --receive (on the \
                 workstation: re-emit the nodes' records here), or both"
            );
        }
        Ok(())
    }
}

/// A consumer that reads nothing: a receive-only bridge's presence in `snapbus ls`, with its
/// status board.
struct Presence;

impl Consumer for Presence {}

pub(crate) fn run(args: &BridgeArgs) -> anyhow::Result<()> {
    args.directions()?;
    let globs = globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    drop(connect(&dir)?);
    let host = match &args.host {
        Some(h) => h.clone(),
        // The UTS namespace's name (what `hostname` prints).
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .context("reading the host name (give one with --host)")?
            .trim()
            .to_owned(),
    };
    let zenoh = ZenohOptions {
        config: args.zenoh_config.clone(),
        mode: args.mode.clone(),
        connect: args.connect.clone(),
        listen: args.listen.clone(),
    };
    let session = zenoh
        .open()
        .context("opening the Zenoh session (see --zenoh-config, --connect, --listen)")?;
    let stop = interrupted()?;
    let board = StatusBoard::new();
    board.set("host", host.as_str());
    let station = args.receive.then(|| {
        let mut station = Station::new(
            dir.clone(),
            session.clone(),
            bus_root(dir.name().as_str()),
            globs.clone(),
            board.clone(),
        );
        let stop = stop.clone();
        std::thread::spawn(move || {
            let r = station.run(&stop);
            stop.store(true, Ordering::Relaxed);
            r
        })
    });
    let result = if args.send {
        let opts = NodeOptions {
            host,
            globs,
            start: args.from.start(),
        };
        run_node(&dir, &session, &opts, board, &stop).map_err(anyhow::Error::from)
    } else {
        let mut opts = RunOptions::new("bridge");
        // Reads nothing (a cut at the latest record, and later lanes are not read): only there
        // to be listed, with the station's counters.
        opts.subscribe.cut = true;
        opts.status = Some(board);
        opts.handle_signals = false;
        run_consumer(&dir, &opts, &mut Presence, Some(&stop))
            .map(drop)
            .map_err(anyhow::Error::from)
    };
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = station {
        match t.join() {
            Ok(r) => r.context("receiving")?,
            Err(_) => bail!("the receiving thread panicked"),
        }
    }
    drop(session);
    result
}

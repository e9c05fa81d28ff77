//! `snapbus bridge`: a bus carried between machines over [Zenoh](https://zenoh.io).
//!
//! On a node ([`run_node`]) every record of the subscribed schemas is published under
//! `snapbus/<bus>/<host>/<lane>/<schema>` with what a station needs to re-emit it (the
//! producer's name and pid, the schema's descriptor the first time, the lane's sequence number,
//! the pass's own count and what the node's reader lost: [`wire`]), and the node answers
//! queries for what its rings still hold. On a workstation ([`Station`]) every remote lane is
//! re-emitted into the local bus by a producer named `<producer>@<host>`, so every consumer
//! works on remote data unchanged; records that never arrived are marked lost in that lane
//! ([`gaps`]), so consumers count them exactly as ring overwrites. Those producers are marked
//! relayed (`ProducerInfo::relayed`), and no node side sends a relayed lane out again, so
//! bridges on one bus never relay each other's records in a loop; nor does a station re-emit
//! its own bus's lanes, which reach it when a sending bridge runs beside it. A lane's messages
//! leave in its order across its keys ([`Publish`]): the station's books rely on it.
//!
//! The key layout: the bus first, so that one workstation follows one bus of every node
//! (`snapbus/<bus>/**`) and buses of one node do not mix; the host next, to pick nodes
//! (`snapbus/<bus>/gpu3/**`); then the lane id (hex), not the producer's name, which is not
//! unique (two `python` processes) while a lane id is, and survives a broker restart; the
//! schema id last (its characters are all valid in a key), so that a Zenoh subscriber can pick
//! schemas (`snapbus/<bus>/*/*/demo.step`). Loss reports go under the lane's
//! [`LANE_CHUNK`]; descriptors are answered under `<host>/@schema/<fingerprint>` and each
//! node's liveness under `<host>/@bridge/<pass>` (`@` chunks match only themselves, never
//! `**`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use snapbus_bus::lane::StartAt;
use snapbus_bus::publisher::{EmitError, PublisherError};
use snapbus_bus::runtime::BusDir;
use snapbus_bus::status::StatusBoard;
use snapbus_bus::subscriber::Glob;
use thiserror::Error;
use zenoh::Wait;

pub mod gaps;
pub mod node;
pub mod station;
pub mod wire;

pub use node::{NodeShared, NodeSide, Publish, Reply, Shared};
pub use station::Station;

use crate::runtime::{RunError, RunOptions, run};

/// The last chunk of a lane's own messages, loss reports and its end (a schema id cannot be
/// it: ids have no `~`; not an `@` chunk, which `**` would not match).
pub const LANE_CHUNK: &str = "lane~";
/// The chunk under a host of the descriptors it answers for.
pub const SCHEMA_CHUNK: &str = "@schema";
/// The chunk under a host of its bridges' liveliness tokens.
pub const TOKEN_CHUNK: &str = "@bridge";
/// How long a station waits for a node's history or a descriptor.
pub const HISTORY_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the bridge stopped.
#[derive(Debug, Error)]
pub enum BridgeError {
    /// Zenoh refused (the config, an endpoint, a declaration).
    #[error("zenoh: {0}")]
    Zenoh(zenoh::Error),
    /// The local bus refused the re-emitting producer.
    #[error(transparent)]
    Publisher(#[from] PublisherError),
    /// Re-emitting failed.
    #[error(transparent)]
    Emit(#[from] EmitError),
    /// Reading the local bus failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The local bus's broker did not answer.
    #[error(transparent)]
    Bus(#[from] snapbus_bus::client::ClientError),
    /// Zenoh's callbacks went away.
    #[error("the zenoh session closed")]
    Closed,
}

impl From<zenoh::Error> for BridgeError {
    fn from(e: zenoh::Error) -> BridgeError {
        BridgeError::Zenoh(e)
    }
}

/// How to reach the other machines: Zenoh's own config, passed through.
#[derive(Debug, Clone, Default)]
pub struct ZenohOptions {
    /// A Zenoh config file (JSON5): mode, endpoints, TLS, scouting, …
    pub config: Option<PathBuf>,
    /// `peer` or `client` (default: the file's, else `peer`).
    pub mode: Option<String>,
    /// Endpoints to connect to (`tcp/10.0.0.2:7447`), beside the file's.
    pub connect: Vec<String>,
    /// Endpoints to listen on (`tcp/0.0.0.0:7447`), beside the file's.
    pub listen: Vec<String>,
}

impl ZenohOptions {
    /// Opens a session. With nothing given: a peer that finds the others on its LAN by
    /// multicast scouting, no router needed (Zenoh's defaults).
    pub fn open(&self) -> Result<zenoh::Session, BridgeError> {
        let mut config = match &self.config {
            Some(f) => zenoh::Config::from_file(f)?,
            None => zenoh::Config::default(),
        };
        if let Some(mode) = &self.mode {
            config.insert_json5("mode", &json_string(mode))?;
        }
        for (key, endpoints) in [
            ("connect/endpoints", &self.connect),
            ("listen/endpoints", &self.listen),
        ] {
            if !endpoints.is_empty() {
                let list: Vec<String> = endpoints.iter().map(|e| json_string(e)).collect();
                config.insert_json5(key, &format!("[{}]", list.join(",")))?;
            }
        }
        Ok(zenoh::open(config).wait()?)
    }
}

fn json_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `snapbus/<bus>/<host>`, with characters a key cannot hold in `host` made `_`.
pub fn host_prefix(bus: &str, host: &str) -> String {
    format!("{}/{}", bus_root(bus), key_chunk(host))
}

/// `snapbus/<bus>`.
pub fn bus_root(bus: &str) -> String {
    format!("snapbus/{}", key_chunk(bus))
}

fn key_chunk(s: &str) -> String {
    let c: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if c.is_empty() { "_".into() } else { c }
}

/// The key of a lane under `prefix`.
pub(crate) fn lane_key(prefix: &str, lane_id: u64) -> String {
    format!("{prefix}/{lane_id:016x}")
}

/// A pass id: the clock and the pid, distinct per run and per query.
pub(crate) fn new_pass() -> u64 {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = snapbus_bus::lane::now_realtime_nanos();
    t ^ (u64::from(std::process::id()) << 40) ^ COUNT.fetch_add(1, Ordering::Relaxed)
}

/// What the node side reads and where it publishes.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The host name in keys.
    pub host: String,
    /// Schema-id globs (empty: every schema).
    pub globs: Vec<Glob>,
    /// Where the live stream starts in lanes that exist (a station asks for the history
    /// anyway).
    pub start: StartAt,
}

/// The node side: publishes the bus of `dir` and answers history queries until `stop`
/// (or a signal, when `handle_signals`).
pub fn run_node(
    dir: &BusDir,
    session: &zenoh::Session,
    opts: &NodeOptions,
    board: StatusBoard,
    stop: &AtomicBool,
) -> Result<(), BridgeError> {
    let prefix = host_prefix(dir.name().as_str(), &opts.host);
    let shared: Shared = Arc::default();
    let live = NodeSide::new(
        prefix.clone(),
        Publish::new(session.clone()),
        Arc::clone(&shared),
        Some(board.clone()),
    );
    let _history = {
        let (dir, prefix, globs) = (dir.clone(), prefix.clone(), opts.globs.clone());
        let shared = Arc::clone(&shared);
        let board = board.clone();
        session
            .declare_queryable(format!("{prefix}/**"))
            .callback(move |q| {
                let (dir, prefix, globs) = (dir.clone(), prefix.clone(), globs.clone());
                let (shared, board) = (Arc::clone(&shared), board.clone());
                std::thread::spawn(move || {
                    if let Err(e) = answer_history(&dir, prefix, globs, q, shared) {
                        snapbus_bus::say!("snapbus bridge: a history query failed: {e}");
                    }
                    board.add("out.history_queries", 1);
                });
            })
            .wait()?
    };
    let _schemas = {
        let shared = Arc::clone(&shared);
        session
            .declare_queryable(format!("{prefix}/{SCHEMA_CHUNK}/*"))
            .callback(move |q| {
                let fp = q.key_expr().as_str().rsplit('/').next().unwrap_or("");
                let fp = u64::from_str_radix(fp, 16).unwrap_or(0);
                let d = shared
                    .descriptors
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&fp)
                    .cloned();
                if let Some(d) = d {
                    let _ = q.reply(q.key_expr().clone(), d).wait();
                }
            })
            .wait()?
    };
    let _token = session
        .liveliness()
        .declare_token(format!("{prefix}/{TOKEN_CHUNK}/{:016x}", live.pass()))
        .wait()?;
    let mut run_opts = RunOptions::new("bridge");
    run_opts.subscribe.globs = opts.globs.clone();
    run_opts.subscribe.start = opts.start;
    run_opts.status = Some(board.clone());
    run_opts.handle_signals = false;
    board.set("out.state", "publishing");
    snapbus_bus::say!(
        "snapbus bridge: sending bus '{}' under {prefix}/** (history answered)",
        dir.name()
    );
    let mut live = live;
    run(dir, &run_opts, &mut live, Some(stop))?;
    Ok(())
}

/// One history query: the rings of `dir` from their oldest record up to now, as replies.
fn answer_history(
    dir: &BusDir,
    prefix: String,
    globs: Vec<Glob>,
    query: zenoh::query::Query,
    shared: Shared,
) -> Result<(), BridgeError> {
    let mut opts = RunOptions::new("bridge-history");
    opts.subscribe.globs = globs;
    opts.subscribe.start = StartAt::Oldest;
    opts.subscribe.cut = true;
    opts.until_end = true;
    opts.handle_signals = false;
    opts.drain_on_stop = Duration::ZERO;
    let mut side = NodeSide::new(prefix, Reply(query), shared, None).history();
    run(dir, &opts, &mut side, None)?;
    Ok(())
}

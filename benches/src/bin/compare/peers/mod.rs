//! The transports compared, each configured as fairly as we know how (the `how` text of each
//! is printed in the report).

use anyhow::{Result, bail};

use crate::common::{RunArgs, Wait};

mod crossbeam;
mod iceoryx2;
mod ipc;
mod python;
pub(crate) mod snapbus;
mod uds;

/// How a peer's two sides are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// A consumer process and a producer process (`compare child consumer|producer`).
    TwoProcesses,
    /// Both sides as threads of one process (`compare child both`).
    OneProcess,
    /// A Python script that runs both sides (`benches/src/bin/compare/mp_queue.py`).
    Python,
}

/// One transport.
#[derive(Debug)]
pub(crate) struct PeerDef {
    /// Its id on the command line.
    pub(crate) name: &'static str,
    /// Its row label.
    pub(crate) label: &'static str,
    /// Process layout.
    pub(crate) layout: Layout,
    /// Measured for throughput.
    pub(crate) throughput: bool,
    /// Latency runs, one per way of waiting.
    pub(crate) latency_waits: &'static [Wait],
    /// The consumer prints `joined` once the producer is connected (else it is connected when
    /// the producer prints `armed`).
    pub(crate) needs_join: bool,
    /// snapbus itself (the rows the ratios are taken for).
    pub(crate) is_snapbus: bool,
    /// In one process: an upper bound, not a peer for the ratios.
    pub(crate) upper_bound: bool,
    /// Pays a system call (or more) per message: the "per-message peers".
    pub(crate) per_message: bool,
    /// How it is configured (for the report).
    pub(crate) how: &'static str,
    /// `Err(why)` if it cannot run in this build or on this machine.
    pub(crate) available: fn() -> Result<(), String>,
}

fn always() -> Result<(), String> {
    Ok(())
}

impl PeerDef {
    /// A peer of two processes, measured for throughput only, that the consumer needs no
    /// `joined` for, paying no system call per message and available everywhere; the rows
    /// below change what differs.
    const fn new(name: &'static str, label: &'static str, how: &'static str) -> Self {
        PeerDef {
            name,
            label,
            layout: Layout::TwoProcesses,
            throughput: true,
            latency_waits: &[],
            needs_join: false,
            is_snapbus: false,
            upper_bound: false,
            per_message: false,
            how,
            available: always,
        }
    }

    /// One of snapbus's own rows (its consumer says `joined`).
    const fn snapbus(
        name: &'static str,
        label: &'static str,
        how: &'static str,
        latency_waits: &'static [Wait],
    ) -> Self {
        PeerDef {
            latency_waits,
            needs_join: true,
            is_snapbus: true,
            ..PeerDef::new(name, label, how)
        }
    }
}

/// Every peer, in report order.
pub(crate) const PEERS: &[PeerDef] = &[
    PeerDef::snapbus(
        "snapbus",
        "snapbus",
        snapbus::HOW,
        &[Wait::Spin, Wait::Sleep],
    ),
    PeerDef::snapbus(
        "snapbus-in-place",
        "snapbus, reading in place",
        snapbus::HOW_IN_PLACE,
        &[Wait::Spin, Wait::Sleep],
    ),
    PeerDef::snapbus(
        "snapbus-small-ring",
        "snapbus, 8 MiB ring, reading in place",
        snapbus::HOW_SMALL_RING,
        &[Wait::Spin, Wait::Sleep],
    ),
    PeerDef::snapbus(
        "snapbus-batch",
        "snapbus, batch reads, in place",
        snapbus::HOW_BATCH,
        &[],
    ),
    PeerDef::snapbus(
        "snapbus-emit-many",
        "snapbus, emit_many, batch reads, in place",
        snapbus::HOW_EMIT_MANY,
        &[],
    ),
    PeerDef {
        latency_waits: iceoryx2::LATENCY_WAITS,
        needs_join: iceoryx2::NEEDS_JOIN,
        available: iceoryx2::available,
        ..PeerDef::new("iceoryx2", "iceoryx2 pub-sub", iceoryx2::HOW)
    },
    PeerDef {
        latency_waits: &[Wait::Sleep],
        needs_join: ipc::NEEDS_JOIN,
        per_message: true,
        ..PeerDef::new("ipc-channel", "ipc-channel", ipc::HOW)
    },
    PeerDef {
        latency_waits: &[Wait::Sleep],
        per_message: true,
        ..PeerDef::new("uds", "Unix socket, a write per message", uds::HOW)
    },
    PeerDef::new(
        "uds-batched",
        "Unix socket, batched (64 KiB)",
        uds::HOW_BATCHED,
    ),
    PeerDef {
        layout: Layout::Python,
        latency_waits: &[Wait::Sleep],
        per_message: true,
        available: python::available,
        ..PeerDef::new(
            "python-mp-queue",
            "Python multiprocessing.Queue",
            python::HOW,
        )
    },
    PeerDef {
        layout: Layout::OneProcess,
        latency_waits: &[Wait::Spin, Wait::Sleep],
        upper_bound: true,
        ..PeerDef::new(
            "crossbeam",
            "crossbeam-channel, one process",
            crossbeam::HOW,
        )
    },
];

/// The peer called `name`.
pub(crate) fn find(name: &str) -> Result<&'static PeerDef> {
    match PEERS.iter().find(|p| p.name == name) {
        Some(p) => Ok(p),
        None => bail!(
            "unknown peer {name:?}; known: {}",
            PEERS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// One side of a two-process peer, run in this process.
type Side = fn(&RunArgs) -> Result<()>;

/// The consumer and producer sides of two-process peer `peer` (`None`: it has none).
fn sides(peer: &str) -> Option<(Side, Side)> {
    Some(match peer {
        "snapbus" | "snapbus-in-place" | "snapbus-small-ring" | "snapbus-batch"
        | "snapbus-emit-many" => (snapbus::consumer, snapbus::producer),
        "iceoryx2" => (iceoryx2::consumer, iceoryx2::producer),
        "ipc-channel" => (ipc::consumer, ipc::producer),
        "uds" => (uds::consumer, |args| uds::producer(args, false)),
        "uds-batched" => (uds::consumer, |args| uds::producer(args, true)),
        _ => return None,
    })
}

/// Runs the consumer side of `args.peer` in this process.
pub(crate) fn consumer(args: &RunArgs) -> Result<()> {
    match sides(&args.peer) {
        Some((consumer, _)) => consumer(args),
        None => bail!("{:?} has no consumer process", args.peer),
    }
}

/// Runs the producer side of `args.peer` in this process.
pub(crate) fn producer(args: &RunArgs) -> Result<()> {
    match sides(&args.peer) {
        Some((_, producer)) => producer(args),
        None => bail!("{:?} has no producer process", args.peer),
    }
}

/// Runs both sides of a one-process peer.
pub(crate) fn both(args: &RunArgs) -> Result<()> {
    match args.peer.as_str() {
        "crossbeam" => crossbeam::both(args),
        other => bail!("{other:?} is not a one-process peer"),
    }
}

/// The bus the snapbus runs share, under the harness's scratch directory.
pub(crate) fn snapbus_bus_dir(root: &std::path::Path) -> Result<snapbus_bus::runtime::BusDir> {
    snapbus::bus_dir(root)
}

/// The command line of the Python peer's script (`python3 <script> <args>`).
pub(crate) fn python_command(args: &RunArgs) -> Result<std::process::Command> {
    python::command(args)
}

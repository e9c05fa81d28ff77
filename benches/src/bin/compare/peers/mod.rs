//! The transports compared, each configured as fairly as we know how (the `how` text of each
//! is printed in the report).

use anyhow::{Result, bail};

use crate::common::{RunArgs, Wait};

mod crossbeam;
mod iceoryx2;
mod ipc;
mod python;
mod snapbus;
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

/// Every peer, in report order.
pub(crate) const PEERS: &[PeerDef] = &[
    PeerDef {
        name: "snapbus",
        label: "snapbus",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: &[Wait::Spin, Wait::Sleep],
        needs_join: true,
        is_snapbus: true,
        upper_bound: false,
        per_message: false,
        how: snapbus::HOW,
        available: always,
    },
    PeerDef {
        name: "snapbus-in-place",
        label: "snapbus, reading in place",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: &[Wait::Spin, Wait::Sleep],
        needs_join: true,
        is_snapbus: true,
        upper_bound: false,
        per_message: false,
        how: snapbus::HOW_IN_PLACE,
        available: always,
    },
    PeerDef {
        name: "snapbus-small-ring",
        label: "snapbus, 8 MiB ring, reading in place",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: &[Wait::Spin, Wait::Sleep],
        needs_join: true,
        is_snapbus: true,
        upper_bound: false,
        per_message: false,
        how: snapbus::HOW_SMALL_RING,
        available: always,
    },
    PeerDef {
        name: "snapbus-batch",
        label: "snapbus, batch reads, in place",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: &[],
        needs_join: true,
        is_snapbus: true,
        upper_bound: false,
        per_message: false,
        how: snapbus::HOW_BATCH,
        available: always,
    },
    PeerDef {
        name: "snapbus-emit-many",
        label: "snapbus, emit_many, batch reads, in place",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: &[],
        needs_join: true,
        is_snapbus: true,
        upper_bound: false,
        per_message: false,
        how: snapbus::HOW_EMIT_MANY,
        available: always,
    },
    PeerDef {
        name: "iceoryx2",
        label: "iceoryx2 pub-sub",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: iceoryx2::LATENCY_WAITS,
        needs_join: iceoryx2::NEEDS_JOIN,
        is_snapbus: false,
        upper_bound: false,
        per_message: false,
        how: iceoryx2::HOW,
        available: iceoryx2::available,
    },
    PeerDef {
        name: "ipc-channel",
        label: "ipc-channel",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: &[Wait::Sleep],
        needs_join: ipc::NEEDS_JOIN,
        is_snapbus: false,
        upper_bound: false,
        per_message: true,
        how: ipc::HOW,
        available: always,
    },
    PeerDef {
        name: "uds",
        label: "Unix socket, a write per message",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: &[Wait::Sleep],
        needs_join: false,
        is_snapbus: false,
        upper_bound: false,
        per_message: true,
        how: uds::HOW,
        available: always,
    },
    PeerDef {
        name: "uds-batched",
        label: "Unix socket, batched (64 KiB)",
        layout: Layout::TwoProcesses,
        throughput: true,
        latency_waits: &[],
        needs_join: false,
        is_snapbus: false,
        upper_bound: false,
        per_message: false,
        how: uds::HOW_BATCHED,
        available: always,
    },
    PeerDef {
        name: "python-mp-queue",
        label: "Python multiprocessing.Queue",
        layout: Layout::Python,
        throughput: true,
        latency_waits: &[Wait::Sleep],
        needs_join: false,
        is_snapbus: false,
        upper_bound: false,
        per_message: true,
        how: python::HOW,
        available: python::available,
    },
    PeerDef {
        name: "crossbeam",
        label: "crossbeam-channel, one process",
        layout: Layout::OneProcess,
        throughput: true,
        latency_waits: &[Wait::Spin, Wait::Sleep],
        needs_join: false,
        is_snapbus: false,
        upper_bound: true,
        per_message: false,
        how: crossbeam::HOW,
        available: always,
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

/// Runs the consumer side of `args.peer` in this process.
pub(crate) fn consumer(args: &RunArgs) -> Result<()> {
    match args.peer.as_str() {
        "snapbus" | "snapbus-in-place" | "snapbus-small-ring" | "snapbus-batch"
        | "snapbus-emit-many" => snapbus::consumer(args),
        "iceoryx2" => iceoryx2::consumer(args),
        "ipc-channel" => ipc::consumer(args),
        "uds" | "uds-batched" => uds::consumer(args),
        other => bail!("{other:?} has no consumer process"),
    }
}

/// Runs the producer side of `args.peer` in this process.
pub(crate) fn producer(args: &RunArgs) -> Result<()> {
    match args.peer.as_str() {
        "snapbus" | "snapbus-in-place" | "snapbus-small-ring" | "snapbus-batch"
        | "snapbus-emit-many" => snapbus::producer(args),
        "iceoryx2" => iceoryx2::producer(args),
        "ipc-channel" => ipc::producer(args),
        "uds" => uds::producer(args, false),
        "uds-batched" => uds::producer(args, true),
        other => bail!("{other:?} has no producer process"),
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

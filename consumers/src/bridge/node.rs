//! The node's side: every record of the subscribed schemas published on Zenoh
//! ([`NodeSide`], a [`Consumer`]), and the history the node's rings still hold, read anew
//! for each query ([`Reply`], run by [`run_node`](super::run_node)'s queryable).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::status::StatusBoard;
use zenoh::Wait;
use zenoh::qos::CongestionControl;

use super::wire::{Header, KIND_END, KIND_LOSS, KIND_RECORD};
use super::{LANE_CHUNK, lane_key, new_pass};
use crate::runtime::{Consumer, Flow, HookError, Lag, Producer, ProducerChange, Record};

/// What the passes of one node share: the descriptors sent, by fingerprint (answered to a
/// station that missed one), and the lanes the live pass saw end (a history answer ends them
/// too, for a station that joins late).
#[derive(Debug, Default)]
pub struct NodeShared {
    pub(crate) descriptors: Mutex<HashMap<u64, Vec<u8>>>,
    pub(crate) ended: Mutex<HashSet<u64>>,
}

/// [`NodeShared`], shared.
pub type Shared = Arc<NodeShared>;

/// Where a pass's messages go: a Zenoh publisher per key (live), or a query's replies
/// (history).
pub trait Outlet {
    /// Sends `message` under the key of `slot` (a lane and a schema key, 0 for the lane's own
    /// messages), which `key` makes when it is new.
    fn send(
        &mut self,
        slot: (u64, u16),
        key: impl FnOnce() -> String,
        message: Vec<u8>,
    ) -> Result<(), HookError>;
}

/// The live outlet: one declared publisher per key, blocking when the link is congested
/// (the bridge then falls behind in the ring, and what it loses there is counted and sent).
pub struct Publish {
    session: zenoh::Session,
    publishers: HashMap<(u64, u16), zenoh::pubsub::Publisher<'static>>,
}

impl Publish {
    /// Publishes through `session`.
    pub fn new(session: zenoh::Session) -> Publish {
        Publish {
            session,
            publishers: HashMap::new(),
        }
    }
}

impl Outlet for Publish {
    fn send(
        &mut self,
        slot: (u64, u16),
        key: impl FnOnce() -> String,
        message: Vec<u8>,
    ) -> Result<(), HookError> {
        let p = match self.publishers.entry(slot) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(
                self.session
                    .declare_publisher(key())
                    .congestion_control(CongestionControl::Block)
                    .wait()?,
            ),
        };
        p.put(message).wait()?;
        Ok(())
    }
}

/// A history query's outlet: each message a reply.
pub struct Reply(pub zenoh::query::Query);

impl Outlet for Reply {
    fn send(
        &mut self,
        _slot: (u64, u16),
        key: impl FnOnce() -> String,
        message: Vec<u8>,
    ) -> Result<(), HookError> {
        self.0.reply(key(), message).wait()?;
        Ok(())
    }
}

/// What the pass knows of one lane.
#[derive(Default)]
struct LaneBooks {
    n: u64,
    ring_lost: u64,
    /// Fingerprints whose descriptor this pass has sent.
    described: Vec<u64>,
}

/// The node's consumer: each record as a message of [`wire`](super::wire) under
/// `snapbus/<bus>/<host>/<lane>/<schema>`.
pub struct NodeSide<O: Outlet> {
    prefix: String,
    pass: u64,
    own_pid: u32,
    lanes: HashMap<u64, LaneBooks>,
    outlet: O,
    shared: Shared,
    board: Option<StatusBoard>,
    /// A history answer: lanes reaching the cut are not ended.
    history: bool,
}

impl<O: Outlet> NodeSide<O> {
    /// A pass sending under `prefix` (`snapbus/<bus>/<host>`) through `outlet`; `board`, the
    /// consumer's status board (counts `sent` and `lost`).
    pub fn new(
        prefix: String,
        outlet: O,
        shared: Shared,
        board: Option<StatusBoard>,
    ) -> NodeSide<O> {
        NodeSide {
            prefix,
            pass: new_pass(),
            own_pid: std::process::id(),
            lanes: HashMap::new(),
            outlet,
            shared,
            board,
            history: false,
        }
    }

    /// This pass answers a history query (lanes it reads to the cut have not ended).
    pub fn history(mut self) -> NodeSide<O> {
        self.history = true;
        self
    }

    /// Sends a lane message (`kind`: [`KIND_LOSS`] or [`KIND_END`]) of `producer`.
    fn lane_message(&mut self, kind: u8, producer: &Producer<'_>) -> Result<(), HookError> {
        let lane = self.lanes.entry(producer.lane_id).or_default();
        let h = Header {
            kind,
            pass: self.pass,
            n: lane.n,
            seq: 0,
            ring_lost: lane.ring_lost,
            t_nanos: 0,
            pid: producer.pid,
            level: 0,
            schema_version: 0,
            fingerprint: 0,
            producer: producer.name,
            emitter: "",
            descriptor: &[],
        };
        let prefix = &self.prefix;
        let key = || format!("{}/{LANE_CHUNK}", lane_key(prefix, producer.lane_id));
        self.outlet.send((producer.lane_id, 0), key, h.encode(&[]))
    }

    /// The pass's id.
    pub fn pass(&self) -> u64 {
        self.pass
    }

    fn describe(&self, schema: &SchemaDescriptor) -> Vec<u8> {
        let bytes = schema.to_canonical_bytes();
        self.shared
            .descriptors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(schema.fingerprint(), bytes.clone());
        bytes
    }
}

impl<O: Outlet> Consumer for NodeSide<O> {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        if r.producer.pid == self.own_pid {
            // Records this process re-emitted from elsewhere never go back out.
            return Ok(Flow::Continue);
        }
        let fp = r.schema.fingerprint();
        let lane = self.lanes.entry(r.producer.lane_id).or_default();
        let first = !lane.described.contains(&fp);
        let (n, ring_lost) = (lane.n, lane.ring_lost);
        let descriptor = if first {
            self.describe(r.schema)
        } else {
            Vec::new()
        };
        let h = Header {
            kind: KIND_RECORD,
            pass: self.pass,
            n,
            seq: r.header.seq,
            ring_lost,
            t_nanos: r.header.t_nanos,
            pid: r.producer.pid,
            level: r.header.level.as_u8(),
            schema_version: r.header.schema_version,
            fingerprint: fp,
            producer: r.producer.name,
            emitter: r.emitter.unwrap_or(""),
            descriptor: &descriptor,
        };
        let prefix = &self.prefix;
        let key = || format!("{}/{}", lane_key(prefix, r.producer.lane_id), r.schema.id());
        let slot = (r.producer.lane_id, r.header.schema_key);
        self.outlet.send(slot, key, h.encode(r.payload))?;
        let lane = self.lanes.entry(r.producer.lane_id).or_default();
        lane.n += 1;
        if first {
            lane.described.push(fp);
        }
        if let Some(b) = &self.board {
            b.add("out.sent", 1);
        }
        Ok(Flow::Continue)
    }

    fn on_lag(&mut self, lag: Lag<'_>) -> Result<Flow, HookError> {
        if lag.producer.pid == self.own_pid {
            return Ok(Flow::Continue);
        }
        let lost = lag.lost + lag.damaged;
        self.lanes
            .entry(lag.producer.lane_id)
            .or_default()
            .ring_lost += lost;
        self.lane_message(KIND_LOSS, &lag.producer)?;
        if let Some(b) = &self.board {
            b.add("out.lost", lost);
        }
        Ok(Flow::Continue)
    }

    fn on_producer(&mut self, change: ProducerChange<'_>) -> Result<Flow, HookError> {
        if let ProducerChange::Ended(p) = change {
            let mut ended = self
                .shared
                .ended
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // A history answer reads every lane to the cut: only those that ended, end.
            let end = if self.history {
                ended.contains(&p.lane_id)
            } else {
                ended.insert(p.lane_id);
                true
            };
            drop(ended);
            if end && p.pid != self.own_pid {
                self.lane_message(KIND_END, &p)?;
            }
        }
        Ok(Flow::Continue)
    }
}

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
    /// messages), which `key` makes when it is new; it may hold it back until [`flush`].
    ///
    /// [`flush`]: Outlet::flush
    fn send(
        &mut self,
        slot: (u64, u16),
        key: impl FnOnce() -> String,
        message: Vec<u8>,
    ) -> Result<(), HookError>;

    /// Sends what [`send`](Outlet::send) held back.
    fn flush(&mut self) -> Result<(), HookError> {
        Ok(())
    }
}

/// A key's messages are held back until they make this many bytes (or the reader has caught
/// up): one Zenoh sample costs several times a small record's own work, so small records
/// travel a batch to a sample. A message this large goes alone, at once. Just under Zenoh's
/// own transport batch (64 KiB by default), so a sample is not cut in fragments; against
/// 32 KiB, `compare --bridge` measured 64 B records at 1.69–1.74 M msg/s instead of 1.40–1.54.
pub const BATCH_BYTES: usize = 60 << 10;

/// The live outlet: one declared publisher per key, blocking when the link is congested
/// (the bridge then falls behind in the ring, and what it loses there is counted and sent).
/// Messages of a key are batched into one sample ([`BATCH_BYTES`]), and a lane's messages
/// leave in the lane's order even across its keys (one per schema): a station tells loss and
/// duplicates apart by the order of a pass's numbers (`gaps`), so a batch of one schema held
/// back while another schema's went first would make records lost that were not.
pub struct Publish {
    session: zenoh::Session,
    publishers: HashMap<(u64, u16), (zenoh::pubsub::Publisher<'static>, Vec<u8>)>,
    /// The key of each lane whose batch holds messages (at most one a lane).
    holding: HashMap<u64, u16>,
}

impl Publish {
    /// Publishes through `session`.
    pub fn new(session: zenoh::Session) -> Publish {
        Publish {
            session,
            publishers: HashMap::new(),
            holding: HashMap::new(),
        }
    }
}

/// Puts a key's batch, if it holds anything.
fn put_batch(
    publisher: &zenoh::pubsub::Publisher<'static>,
    batch: &mut Vec<u8>,
) -> Result<(), HookError> {
    if !batch.is_empty() {
        let sample = std::mem::replace(batch, Vec::with_capacity(BATCH_BYTES));
        publisher.put(sample).wait()?;
    }
    Ok(())
}

impl Outlet for Publish {
    fn send(
        &mut self,
        slot: (u64, u16),
        key: impl FnOnce() -> String,
        message: Vec<u8>,
    ) -> Result<(), HookError> {
        // Another key of this lane holds messages that came before this one: they go first.
        if let Some(&held) = self.holding.get(&slot.0) {
            if held != slot.1 {
                if let Some((p, batch)) = self.publishers.get_mut(&(slot.0, held)) {
                    put_batch(p, batch)?;
                }
                self.holding.remove(&slot.0);
            }
        }
        let (p, batch) = match self.publishers.entry(slot) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert((
                self.session
                    .declare_publisher(key())
                    .congestion_control(CongestionControl::Block)
                    .wait()?,
                Vec::new(),
            )),
        };
        if message.len() >= BATCH_BYTES {
            // After the smaller ones before it, in a sample of its own (no copy).
            put_batch(p, batch)?;
            p.put(message).wait()?;
            self.holding.remove(&slot.0);
            return Ok(());
        }
        batch.extend_from_slice(&message);
        if batch.len() >= BATCH_BYTES {
            put_batch(p, batch)?;
            self.holding.remove(&slot.0);
        } else {
            self.holding.insert(slot.0, slot.1);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), HookError> {
        for (lane, key) in self.holding.drain() {
            if let Some((p, batch)) = self.publishers.get_mut(&(lane, key)) {
                put_batch(p, batch)?;
            }
        }
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
    /// Records sent since the board was last told (it is told once a batch: an entry is a
    /// lock and a map lookup).
    unreported: u64,
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
            unreported: 0,
            history: false,
        }
    }

    /// Sends what the outlet holds, and tells the board what was sent.
    fn flush_outlet(&mut self) -> Result<(), HookError> {
        self.outlet.flush()?;
        if let Some(b) = &self.board {
            if self.unreported > 0 {
                b.add("out.sent", self.unreported);
            }
        }
        self.unreported = 0;
        Ok(())
    }

    /// This pass answers a history query (lanes it reads to the cut have not ended).
    pub fn history(mut self) -> NodeSide<O> {
        self.history = true;
        self
    }

    /// Sends a lane message (`kind`: [`KIND_LOSS`] or [`KIND_END`]) of `producer`, after the
    /// records held back (which came before it).
    fn lane_message(&mut self, kind: u8, producer: &Producer<'_>) -> Result<(), HookError> {
        self.flush_outlet()?;
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
        self.outlet
            .send((producer.lane_id, 0), key, h.encode(&[]))?;
        self.outlet.flush()
    }

    /// Whether `p`'s lane was re-emitted here from another machine (by this process, or by
    /// another bridge on this bus): it never goes back out, or two bridges on one bus (one
    /// sending, one receiving) would relay each other's records in a loop. Zenoh already
    /// routes every node's records to every station that asks.
    fn relayed(&self, p: &Producer<'_>) -> bool {
        p.relayed || p.pid == self.own_pid
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
        if self.relayed(&r.producer) {
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
        self.unreported += 1;
        Ok(Flow::Continue)
    }

    fn on_lag(&mut self, lag: Lag<'_>) -> Result<Flow, HookError> {
        if self.relayed(&lag.producer) {
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

    fn caught_up(&mut self) -> Result<(), HookError> {
        self.flush_outlet()
    }

    fn flush(&mut self) -> Result<(), HookError> {
        self.flush_outlet()
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
            if end && !self.relayed(&p) {
                self.lane_message(KIND_END, &p)?;
            }
        }
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use zenoh::Wait;

    use super::super::wire::{Header, KIND_RECORD, messages};
    use super::{BATCH_BYTES, Outlet, Publish};

    /// A session on loopback only: listening on `listen`, or connecting to `connect`.
    fn session(listen: Option<&str>, connect: Option<&str>) -> zenoh::Session {
        let mut c = zenoh::Config::default();
        c.insert_json5("mode", "\"peer\"").expect("mode");
        c.insert_json5("scouting/multicast/enabled", "false")
            .expect("scouting");
        let list =
            |e: Option<&str>| format!("[{}]", e.map(|e| format!("\"{e}\"")).unwrap_or_default());
        c.insert_json5("listen/endpoints", &list(listen))
            .expect("listen");
        c.insert_json5("connect/endpoints", &list(connect))
            .expect("connect");
        zenoh::open(c).wait().expect("a zenoh session")
    }

    fn record(seq: u64, payload: &[u8]) -> Vec<u8> {
        Header {
            kind: KIND_RECORD,
            pass: 1,
            n: seq,
            seq,
            ring_lost: 0,
            t_nanos: seq,
            pid: 7,
            level: 2,
            schema_version: 1,
            fingerprint: 9,
            producer: "demo",
            emitter: "",
            descriptor: &[],
        }
        .encode(payload)
    }

    /// A node's outlet and what a station subscribed to `root/**` receives from it, over
    /// loopback port `port`, once a probe has gone through (the subscription has reached the
    /// node), the probe drained. The sessions are returned to keep them open.
    fn linked(port: u32, root: &str) -> (Publish, mpsc::Receiver<Vec<u8>>, [zenoh::Session; 2]) {
        let endpoint = format!("tcp/127.0.0.1:{port}");
        let node = session(Some(&endpoint), None);
        let station = session(None, Some(&endpoint));
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        station
            .declare_subscriber(format!("{root}/**"))
            .callback(move |s| {
                let _ = tx.send(s.payload().to_bytes().into_owned());
            })
            .background()
            .wait()
            .expect("subscriber");
        let mut out = Publish::new(node.clone());
        let probe = || format!("{root}/probe");
        loop {
            out.send((u64::MAX, 0), probe, record(u64::MAX, b"probe"))
                .expect("send");
            out.flush().expect("flush");
            if rx.recv_timeout(Duration::from_millis(200)).is_ok() {
                break;
            }
        }
        while rx.try_recv().is_ok() {}
        (out, rx, [node, station])
    }

    #[test]
    fn small_records_travel_in_batches_in_order_and_large_ones_alone() {
        let (mut out, rx, _sessions) = linked(20_000 + std::process::id() % 20_000, "test/batch");
        let key = || "test/batch/lane".to_owned();
        // 2,000 small records, then one large one, then the rest held back until a flush.
        let small = [0x5au8; 64];
        for seq in 0..2000 {
            out.send((1, 1), key, record(seq, &small)).expect("send");
        }
        let large = vec![0xa5u8; BATCH_BYTES];
        out.send((1, 1), key, record(2000, &large)).expect("send");
        out.send((1, 1), key, record(2001, &small)).expect("send");
        out.flush().expect("flush");
        let mut seqs = Vec::new();
        let mut samples = 0;
        while seqs.last() != Some(&2001) {
            let sample = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("every record arrives");
            samples += 1;
            let batch: Vec<_> = messages(&sample).collect::<Result<_, _>>().expect("reads");
            if batch.iter().any(|(h, _)| h.seq == 2000) {
                assert_eq!(batch.len(), 1, "a large record travels alone");
                assert_eq!(batch[0].1, &large[..]);
            }
            for (h, p) in batch {
                assert_eq!(p.len(), if h.seq == 2000 { large.len() } else { 64 });
                seqs.push(h.seq);
            }
        }
        assert_eq!(
            seqs,
            (0..2002).collect::<Vec<u64>>(),
            "in order, none missing"
        );
        // 2,000 records of ~130 bytes in 60 KiB samples: 4 or 5, then the large one, the last.
        assert!((3..=12).contains(&samples), "{samples} samples");
    }

    #[test]
    fn a_lanes_messages_leave_in_order_across_its_keys() {
        let (mut out, rx, _sessions) =
            linked(20_000 + (std::process::id() + 7) % 20_000, "test/order");
        // As the demo emits: five records of one schema, then one of another, in one lane;
        // a second lane in between, which may go in any order against the first.
        // The payload says the lane.
        for seq in 0..600u64 {
            let schema = if seq % 6 == 5 { 2 } else { 1 };
            let key = move || format!("test/order/1/{schema}");
            out.send((1, schema), key, record(seq, &[1; 64]))
                .expect("send");
            let key = || "test/order/2/1".to_owned();
            out.send((2, 1), key, record(seq, &[2; 64])).expect("send");
        }
        out.flush().expect("flush");
        let mut lanes = [Vec::new(), Vec::new()];
        while lanes.iter().any(|l| l.len() < 600) {
            let sample = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("every record arrives");
            for m in messages(&sample) {
                let (h, p) = m.expect("reads");
                lanes[usize::from(p[0] - 1)].push(h.seq);
            }
        }
        for (i, l) in lanes.iter().enumerate() {
            assert_eq!(
                l,
                &(0..600).collect::<Vec<u64>>(),
                "lane {} in its order",
                i + 1
            );
        }
    }

    /// An outlet that keeps what it is given.
    #[derive(Default)]
    struct Kept(Vec<(String, Vec<u8>)>);

    impl Outlet for Kept {
        fn send(
            &mut self,
            _slot: (u64, u16),
            key: impl FnOnce() -> String,
            message: Vec<u8>,
        ) -> Result<(), crate::runtime::HookError> {
            self.0.push((key(), message));
            Ok(())
        }
    }

    #[test]
    fn lanes_relayed_from_another_machine_never_go_back_out() {
        use std::sync::Arc;

        use snapbus_bus::Level;
        use snapbus_schemas::{DType, Field, SchemaDescriptor};

        use crate::runtime::{Consumer, Lag, Producer, ProducerChange, RecordHeader, RecordRef};

        let schema = Arc::new(
            SchemaDescriptor::new(
                "demo.step",
                1,
                vec![Field::new("x", DType::F64.into())].into(),
            )
            .expect("schema"),
        );
        let producer = |name, lane_id, relayed| Producer {
            pid: 1,
            name,
            cmdline: &[],
            session_tag: None,
            perf_tag: None,
            lane_id,
            started_nanos: 0,
            relayed,
        };
        let payload = 1.5f64.to_le_bytes();
        let record = |p| RecordRef {
            producer_id: 1,
            producer: p,
            schema: &schema,
            emitter: None,
            header: RecordHeader {
                seq: 0,
                t_nanos: 0,
                level: Level::INFO,
                schema_key: 1,
                schema_version: 1,
                emitter_id: 0,
                payload_len: payload.len(),
            },
            payload: &payload[..],
            extracted: None,
        };
        let mut node = super::NodeSide::new(
            "snapbus/lab/ws".into(),
            Kept::default(),
            Default::default(),
            None,
        );
        let (local, relayed) = (producer("demo", 1, false), producer("demo@node", 2, true));
        node.on_event(&record(relayed)).expect("relayed record");
        node.on_lag(Lag {
            producer_id: 2,
            producer: relayed,
            lost: 3,
            damaged: 0,
        })
        .expect("relayed loss");
        node.on_producer(ProducerChange::Ended(relayed))
            .expect("relayed end");
        node.on_event(&record(local)).expect("local record");
        node.flush().expect("flush");
        let keys: Vec<&str> = node.outlet.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["snapbus/lab/ws/0000000000000001/demo.step"],
            "only the local lane goes out"
        );
    }
}

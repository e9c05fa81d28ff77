//! The workstation's side: messages from every node re-emitted into the local bus, each
//! remote lane by a producer of its own named `<producer>@<host>`, with what never arrived
//! marked lost in that lane ([`Publisher::mark_lost`]) so that every consumer counts it as it
//! counts a ring's overwrites.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use snapbus_bus::client::{BusClient, Census};
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::{EmitError, EmitMeta, Publisher, PublisherConfig};
use snapbus_bus::runtime::BusDir;
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::status::StatusBoard;
use snapbus_bus::subscriber::Glob;
use snapbus_bus::{Level, say};
use zenoh::Wait;
use zenoh::query::{ConsolidationMode, QueryTarget};
use zenoh::sample::Locality;

use super::gaps::{Books, Verdict};
use super::wire::{Header, KIND_END, KIND_RECORD, messages};
use super::{BridgeError, HISTORY_TIMEOUT, SCHEMA_CHUNK, TOKEN_CHUNK};

/// How long a new re-emitting producer waits for the broker to adopt it.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// What the station's Zenoh callbacks hand its thread.
pub enum Inbound {
    /// A live sample.
    Sample(zenoh::sample::Sample),
    /// A node's bridge appeared (its liveliness token's key).
    Node(String),
}

/// One remote lane re-emitted here.
struct Remote {
    publisher: Publisher,
    metas: HashMap<u64, Option<EmitMeta>>,
    books: Books,
}

/// The station: its bus, the remote lanes, the descriptors seen.
pub struct Station {
    dir: BusDir,
    session: zenoh::Session,
    root: String,
    globs: Vec<Glob>,
    /// By lane id (unique across hosts: random 64-bit numbers).
    remotes: HashMap<u64, Remote>,
    descriptors: HashMap<u64, Arc<SchemaDescriptor>>,
    synced: HashSet<(String, u64)>,
    /// Remote lanes that ended (their producers here are closed and gone).
    ended: HashSet<u64>,
    /// Lanes of this very bus, as its broker lists them: their records reach Zenoh through a
    /// bridge sending this bus from another process, and are never re-emitted here.
    local: HashSet<u64>,
    board: StatusBoard,
}

/// What became of a message (counted in the bridge's row of `ls`).
#[derive(Clone, Copy)]
enum Fate {
    /// Re-emitted into the local bus (`in.emitted`).
    Emitted = 0,
    /// Seen before (`in.duplicates`).
    Duplicate = 1,
    /// Refused by the local lane, or unreadable (`in.refused`).
    Refused = 2,
    /// A loss report, a lane's end, or a record of a schema not wanted here.
    Other = 3,
    /// A message of one of this bus's own lanes (`in.local`).
    Local = 4,
}

/// `key`'s host and lane (`snapbus/<bus>/<host>/<lane>/…`).
fn host_and_lane(key: &str) -> Option<(&str, u64)> {
    let mut parts = key.split('/').skip(2);
    let host = parts.next()?;
    let lane = u64::from_str_radix(parts.next()?, 16).ok()?;
    Some((host, lane))
}

impl Station {
    /// A station re-emitting into `dir` what comes under `root` (`snapbus/<bus>`), of the
    /// schemas `globs` match (all if empty).
    pub fn new(
        dir: BusDir,
        session: zenoh::Session,
        root: String,
        globs: Vec<Glob>,
        board: StatusBoard,
    ) -> Station {
        Station {
            dir,
            session,
            root,
            globs,
            remotes: HashMap::new(),
            descriptors: HashMap::new(),
            synced: HashSet::new(),
            ended: HashSet::new(),
            local: HashSet::new(),
            board,
        }
    }

    /// Declares the subscriptions, then handles what arrives until `stop`.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), BridgeError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let _subscriber = self.subscribe(tx.clone())?;
        let _tokens = self.watch_nodes(tx)?;
        self.board.set("in.state", "listening");
        snapbus_bus::say!(
            "snapbus bridge: receiving {}/** into bus '{}'",
            self.root,
            self.dir.name()
        );
        while !stop.load(Ordering::Relaxed) {
            self.step(&rx)?;
        }
        Ok(())
    }

    fn subscribe(&self, tx: Sender<Inbound>) -> Result<zenoh::pubsub::Subscriber<()>, BridgeError> {
        Ok(self
            .session
            .declare_subscriber(format!("{}/**", self.root))
            // Not this process's own node side (a bridge carrying both ways).
            .allowed_origin(Locality::Remote)
            .callback(move |s| {
                let _ = tx.send(Inbound::Sample(s));
            })
            .wait()?)
    }

    fn watch_nodes(
        &self,
        tx: Sender<Inbound>,
    ) -> Result<zenoh::pubsub::Subscriber<()>, BridgeError> {
        Ok(self
            .session
            .liveliness()
            .declare_subscriber(format!("{}/*/{TOKEN_CHUNK}/*", self.root))
            .history(true)
            .callback(move |s| {
                if s.kind() == zenoh::sample::SampleKind::Put {
                    let _ = tx.send(Inbound::Node(s.key_expr().as_str().to_owned()));
                }
            })
            .wait()?)
    }

    fn step(&mut self, rx: &Receiver<Inbound>) -> Result<(), BridgeError> {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Inbound::Sample(s)) => self.live(s.key_expr().as_str(), &s.payload().to_bytes()),
            Ok(Inbound::Node(token)) => {
                // `snapbus/<bus>/<host>/@bridge/<pass>`
                let mut parts = token.split('/').skip(2);
                if let (Some(host), _, Some(pass)) = (parts.next(), parts.next(), parts.next()) {
                    let pass = u64::from_str_radix(pass, 16).unwrap_or(0);
                    self.sync(host, pass)?;
                }
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => Ok(()),
            Err(RecvTimeoutError::Disconnected) => Err(BridgeError::Closed),
        }
    }

    /// A live sample: first the node's history, if this pass of the node was not asked yet
    /// (so that history comes before the live records it precedes).
    fn live(&mut self, key: &str, sample: &[u8]) -> Result<(), BridgeError> {
        let Some(Ok((h, _))) = messages(sample).next() else {
            self.board.add("in.refused", 1);
            return Ok(());
        };
        if let Some((host, _)) = host_and_lane(key) {
            if !self.synced.contains(&(host.to_owned(), h.pass)) {
                self.sync(host, h.pass)?;
            }
        }
        self.handle(key, sample)
    }

    /// Asks `host` for what its rings hold, once per pass of its bridge.
    fn sync(&mut self, host: &str, pass: u64) -> Result<(), BridgeError> {
        if !self.synced.insert((host.to_owned(), pass)) {
            return Ok(());
        }
        let replies = self
            .session
            .get(format!("{}/{host}/**", self.root))
            .consolidation(ConsolidationMode::None)
            .allowed_destination(Locality::Remote)
            .target(QueryTarget::All)
            .timeout(HISTORY_TIMEOUT)
            .wait()?;
        let mut n = 0u64;
        while let Ok(reply) = replies.recv() {
            if let Ok(s) = reply.result() {
                let key = s.key_expr().as_str().to_owned();
                self.handle(&key, &s.payload().to_bytes())?;
                n += 1;
            }
        }
        self.board.add("in.history", n);
        Ok(())
    }

    /// A sample's messages, from the live stream or a history answer, in order; a sample
    /// that stops making sense is refused from there on.
    fn handle(&mut self, key: &str, sample: &[u8]) -> Result<(), BridgeError> {
        let Some((host, lane)) = host_and_lane(key) else {
            self.board.add("in.refused", 1);
            return Ok(());
        };
        // Counted here and added to the board once a sample: a board entry is a lock and a
        // map lookup, a cost of the order of a small record's whole re-emission.
        let mut fates = [0u64; 5];
        let mut received = 0;
        let mut result = Ok(());
        for m in messages(sample) {
            let Ok((h, payload)) = m else {
                fates[Fate::Refused as usize] += 1;
                break;
            };
            received += 1;
            match self.message(host, lane, &h, payload) {
                Ok(fate) => fates[fate as usize] += 1,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.board.add("in.received", received);
        for (fate, key) in [
            (Fate::Emitted, "in.emitted"),
            (Fate::Duplicate, "in.duplicates"),
            (Fate::Refused, "in.refused"),
            (Fate::Local, "in.local"),
        ] {
            if fates[fate as usize] > 0 {
                self.board.add(key, fates[fate as usize]);
            }
        }
        result
    }

    /// One message of lane `lane` of `host`, and what became of it.
    fn message(
        &mut self,
        host: &str,
        lane: u64,
        h: &Header<'_>,
        payload: &[u8],
    ) -> Result<Fate, BridgeError> {
        if self.ended.contains(&lane) {
            // A history answer's copy of a lane that has ended since.
            return Ok(Fate::Duplicate);
        }
        if !self.remotes.contains_key(&lane) && self.is_local(lane)? {
            return Ok(Fate::Local);
        }
        let verdict = self.remote(host, lane, h)?.books.take(h);
        let lost = match verdict {
            Verdict::Duplicate => return Ok(Fate::Duplicate),
            Verdict::Emit { lost } | Verdict::Loss { lost } => lost,
        };
        let remote = self.remote(host, lane, h)?;
        if lost > 0 {
            remote.publisher.mark_lost(lost)?;
            self.board.add("in.lost", lost);
        }
        if h.kind == KIND_END {
            // The node read the producer's lane to its end: so does every consumer here (the
            // producer, dropped, closes its lane and its connection: `closed` in `ls`).
            self.remotes.remove(&lane);
            self.ended.insert(lane);
            self.board.add("in.ended", 1);
            return Ok(Fate::Other);
        }
        if h.kind != KIND_RECORD {
            return Ok(Fate::Other);
        }
        let Some(meta) = self.meta(host, lane, h)? else {
            return Ok(Fate::Other);
        };
        let remote = self.remote(host, lane, h)?;
        match remote
            .publisher
            .emit_with(meta, payload.len(), |w| Ok(w.put(payload)?))
        {
            Ok(_) => Ok(Fate::Emitted),
            Err(EmitError::Claim(_)) => Ok(Fate::Refused),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether `lane` is one of this bus's own: asked of the broker once for each lane not seen
    /// before (a lane joins the broker before its first record, so it is listed by then).
    fn is_local(&mut self, lane: u64) -> Result<bool, BridgeError> {
        if !self.local.contains(&lane) {
            let state = BusClient::connect(&self.dir)?.state_with(Census::Skip)?;
            self.local
                .extend(state.producers.iter().map(|p| p.info.lane_id));
        }
        Ok(self.local.contains(&lane))
    }

    fn remote(
        &mut self,
        host: &str,
        lane: u64,
        h: &Header<'_>,
    ) -> Result<&mut Remote, BridgeError> {
        if !self.remotes.contains_key(&lane) {
            let publisher = Publisher::start(
                self.dir.clone(),
                PublisherConfig {
                    name: format!("{}@{host}", h.producer),
                    lane: LaneConfig::default(),
                    session_tag: None,
                    perf_tag: None,
                    relayed: true,
                },
            )?;
            // Adopted before anything is emitted or closed: a lane closed before the broker
            // introduced it would never reach the consumers (as `snapbus replay` waits).
            let t0 = std::time::Instant::now();
            while !publisher.is_connected() && t0.elapsed() < JOIN_TIMEOUT {
                std::thread::sleep(Duration::from_millis(2));
            }
            self.board.add("in.producers", 1);
            self.remotes.insert(
                lane,
                Remote {
                    publisher,
                    metas: HashMap::new(),
                    books: Books::default(),
                },
            );
        }
        Ok(self.remotes.get_mut(&lane).expect("inserted above"))
    }

    /// How to emit records of `h`'s schema in the remote lane's producer (`None`: a schema
    /// the globs leave out).
    fn meta(
        &mut self,
        host: &str,
        lane: u64,
        h: &Header<'_>,
    ) -> Result<Option<EmitMeta>, BridgeError> {
        if let Some(m) = self
            .remotes
            .get(&lane)
            .and_then(|r| r.metas.get(&h.fingerprint))
        {
            return Ok(*m);
        }
        let desc = self.descriptor(host, h)?;
        let Some(desc) = desc else {
            say!(
                "snapbus bridge: no descriptor for schema {:016x} of {host}: its records are refused",
                h.fingerprint
            );
            self.remote(host, lane, h)?
                .metas
                .insert(h.fingerprint, None);
            return Ok(None);
        };
        let wanted = self.globs.is_empty() || self.globs.iter().any(|g| g.matches(desc.id()));
        let remote = self.remote(host, lane, h)?;
        let meta = if wanted {
            let schema_key = remote.publisher.register_schema(&desc)?;
            let emitter = if h.emitter.is_empty() {
                0
            } else {
                remote.publisher.emitter(h.emitter)
            };
            Some(EmitMeta {
                schema_key,
                schema_version: h.schema_version,
                level: Level::from_wire(h.level),
                emitter,
            })
        } else {
            None
        };
        remote.metas.insert(h.fingerprint, meta);
        Ok(meta)
    }

    /// The descriptor of `h`'s schema: in the message, seen before, or asked of the node.
    fn descriptor(
        &mut self,
        host: &str,
        h: &Header<'_>,
    ) -> Result<Option<Arc<SchemaDescriptor>>, BridgeError> {
        if let Some(d) = self.descriptors.get(&h.fingerprint) {
            return Ok(Some(Arc::clone(d)));
        }
        let bytes = if h.descriptor.is_empty() {
            let replies = self
                .session
                .get(format!(
                    "{}/{host}/{SCHEMA_CHUNK}/{:016x}",
                    self.root, h.fingerprint
                ))
                .allowed_destination(Locality::Remote)
                .timeout(HISTORY_TIMEOUT)
                .wait()?;
            match replies.recv().ok().and_then(|r| r.into_result().ok()) {
                Some(s) => s.payload().to_bytes().into_owned(),
                None => return Ok(None),
            }
        } else {
            h.descriptor.to_vec()
        };
        let Ok(d) = SchemaDescriptor::from_canonical_bytes(&bytes) else {
            return Ok(None);
        };
        let d = Arc::new(d);
        self.descriptors.insert(h.fingerprint, Arc::clone(&d));
        Ok(Some(d))
    }
}

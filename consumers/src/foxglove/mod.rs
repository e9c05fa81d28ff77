//! The Foxglove bridge: a consumer that serves the bus live to Foxglove (desktop or web, "Open
//! connection" → "Foxglove WebSocket") over Foxglove's WebSocket protocol, on 127.0.0.1.
//!
//! - **A channel per schema** (per descriptor: a new version is a new channel): topic
//!   [`topic`](messages::topic) (`demo.step` → `/demo/step`), message encoding `json` — the
//!   record as `snapbus echo` prints it — with the descriptor's JSON Schema
//!   ([`SchemaDescriptor::to_json_schema`]). Every numeric field plots in Foxglove's Plot panel
//!   (`/demo/step.reward`, `/demo/step.position[0]`).
//! - **A channel per tensor that is an image or points** ([`View`](crate::fields::View), the
//!   plotter's decision), made as records show them (in lists and dicts of structs too):
//!   `foxglove.RawImage` for `[h, w]` and `[h, w, c]`, `foxglove.PointCloud` for `[n, 3]`, on
//!   topic `/demo/step/observation` ([`messages::of_tensor`]); at most
//!   [`MAX_VIEWS`](crate::fields::MAX_VIEWS) tensor paths per schema. A 1-D tensor stays a
//!   field of the record (Foxglove plots an array field against its index).
//! - **History for a late client**: the bridge reads the rings from their oldest record, and
//!   keeps each channel's last `history` messages (and at most `history_bytes`, and at most
//!   its share of [`ws::HISTORY_BUDGET_BYTES`] over all channels): a client that subscribes
//!   gets those first, then the live ones.
//! - **Message time** is the record's time (`t_nanos`), also each image's `timestamp`, so a
//!   record's image and fields line up.
//!
//! Written on the published spec with the `tungstenite` WebSocket crate, not the `foxglove`
//! SDK: the SDK's server needs tokio and 111 crates (1 min 54 s to build from scratch, its
//! dependencies included), this needs 8 more than the tree had; the bus's consumer runtime is
//! synchronous, and a server of four message types is short ([`ws`]).

pub mod messages;
pub mod ws;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use snapbus_bus::status::StatusBoard;
use snapbus_schemas::SchemaDescriptor;

use crate::fields::tensors;
use crate::{Consumer, Flow, HookError, Lag, Record};
pub use ws::{Hub, SUBPROTOCOL, Server, serve};

/// How the bridge keeps history.
#[derive(Debug, Clone)]
pub struct BridgeOptions {
    /// Messages kept per channel for a late client.
    pub history: usize,
    /// Bytes of messages kept per channel at most.
    pub history_bytes: usize,
}

impl Default for BridgeOptions {
    /// 1,000 messages and 64 MiB per channel.
    fn default() -> BridgeOptions {
        BridgeOptions {
            history: 1000,
            history_bytes: 64 << 20,
        }
    }
}

/// The bridge consumer: feeds a [`Hub`] that [`serve`] serves.
pub struct Bridge {
    hub: Arc<Mutex<Hub>>,
    /// Schema fingerprint → its channels.
    feeds: HashMap<u64, Feed>,
    topics: HashSet<String>,
    board: StatusBoard,
    malformed: u64,
}

/// The channels of one descriptor.
struct Feed {
    channel: u32,
    /// Tensor path → its channel (`None`: a series, no channel of its own).
    views: HashMap<String, Option<u32>>,
}

impl Bridge {
    /// A bridge feeding a new hub.
    pub fn new(opts: &BridgeOptions) -> Bridge {
        Bridge {
            hub: Arc::new(Mutex::new(Hub::new(opts.history, opts.history_bytes))),
            feeds: HashMap::new(),
            topics: HashSet::new(),
            board: StatusBoard::new(),
            malformed: 0,
        }
    }

    /// The hub, for [`serve`].
    pub fn hub(&self) -> Arc<Mutex<Hub>> {
        Arc::clone(&self.hub)
    }

    /// Its status board (for `RunOptions::status`): `channels`, `clients`, and `dropped`
    /// (messages a slow client lost) and `malformed` (records not decoded) once non-zero.
    pub fn board(&self) -> StatusBoard {
        self.board.clone()
    }

    /// `wanted`, or `wanted_2`, `wanted_3`… if it is taken.
    fn unique_topic(&mut self, wanted: String) -> String {
        let mut topic = wanted.clone();
        let mut n = 1;
        while !self.topics.insert(topic.clone()) {
            n += 1;
            topic = format!("{wanted}_{n}");
        }
        topic
    }

    fn feed(&mut self, schema: &SchemaDescriptor) -> &mut Feed {
        let fp = schema.fingerprint();
        if !self.feeds.contains_key(&fp) {
            let topic = self.unique_topic(messages::topic(schema.id(), None));
            let channel =
                ws_lock(&self.hub).add_channel(&topic, schema.id(), &schema.to_json_schema());
            self.feeds.insert(
                fp,
                Feed {
                    channel,
                    views: HashMap::new(),
                },
            );
        }
        self.feeds.get_mut(&fp).expect("inserted above")
    }
}

fn ws_lock(hub: &Mutex<Hub>) -> std::sync::MutexGuard<'_, Hub> {
    hub.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Consumer for Bridge {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        let Ok(value) = r.schema.decode(r.payload) else {
            self.malformed += 1;
            self.board.set("malformed", self.malformed);
            return Ok(Flow::Continue);
        };
        let t = r.header.t_nanos;
        let json = serde_json::to_vec(&value.as_json())?;
        let channel = self.feed(r.schema).channel;
        let mut out = vec![(channel, json)];
        for (path, tv) in tensors(&value) {
            let known = self.feed(r.schema).views.get(&path).copied();
            let made = match known {
                Some(None) => continue,
                Some(Some(ch)) => messages::of_tensor(tv, &path, t).map(|(_, m)| (ch, m)),
                None if self.feed(r.schema).views.len() >= crate::fields::MAX_VIEWS => continue,
                None => {
                    let Some((name, m)) = messages::of_tensor(tv, &path, t) else {
                        self.feed(r.schema).views.insert(path, None);
                        continue;
                    };
                    let topic = self.unique_topic(messages::topic(r.schema.id(), Some(&path)));
                    let schema = messages::json_schema(name).unwrap_or_default();
                    let ch = ws_lock(&self.hub).add_channel(&topic, name, &schema);
                    self.feed(r.schema).views.insert(path, Some(ch));
                    Some((ch, m))
                }
            };
            if let Some((ch, m)) = made {
                out.push((ch, serde_json::to_vec(&m)?));
            }
        }
        let mut hub = ws_lock(&self.hub);
        for (ch, json) in out {
            hub.publish(ch, t, json);
        }
        Ok(Flow::Continue)
    }

    fn flush(&mut self) -> Result<(), HookError> {
        let hub = ws_lock(&self.hub);
        self.board.set("channels", hub.channel_count() as u64);
        self.board.set("clients", hub.client_count() as u64);
        if hub.dropped > 0 {
            self.board.set("dropped", hub.dropped);
        }
        Ok(())
    }

    fn on_lag(&mut self, _lag: Lag<'_>) -> Result<Flow, HookError> {
        Ok(Flow::Continue)
    }
}

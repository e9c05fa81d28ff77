//! Foxglove's WebSocket protocol (`foxglove.websocket.v1`, <https://github.com/foxglove/ws-protocol>)
//! on 127.0.0.1: the [`Hub`] the bridge feeds (channels, each one's recent messages, the
//! clients and their subscriptions) and a thread per client.
//!
//! What a client gets: `serverInfo`, then `advertise` of every channel (and of each new one as
//! it appears); on `subscribe`, the channel's history (the recent messages kept, oldest
//! first), then every new message, as binary `MESSAGE_DATA` frames (opcode 1, subscription
//! id, the record's time in nanoseconds, the JSON). `unsubscribe` stops a subscription. A
//! client that does not keep up loses messages (counted: `dropped` in `snapbus ls`); it never
//! slows the bridge, nor the producers.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value as Json, json};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::{Message, WebSocket};

/// The subprotocol.
pub const SUBPROTOCOL: &str = "foxglove.websocket.v1";
/// Messages queued per client at most (a client that falls further behind loses messages).
const QUEUE: usize = 8192;
/// Bytes of history kept over all channels at most: each channel keeps at most its share
/// (and at most its own `history_bytes`), so that many image channels stay bounded.
pub const HISTORY_BUDGET_BYTES: usize = 512 << 20;
/// How often a client thread looks for messages to send while its client is silent.
const POLL: Duration = Duration::from_millis(10);

/// One advertised channel and its recent messages.
struct Channel {
    /// Its `advertise` entry.
    info: Json,
    /// (time in nanoseconds, JSON), oldest first.
    history: VecDeque<(u64, Arc<[u8]>)>,
    history_bytes: usize,
}

/// One connected client.
struct Client {
    out: SyncSender<Message>,
    /// Channel id → subscription id.
    subs: HashMap<u32, u32>,
}

/// What the bridge serves: shared between the consumer thread and the client threads.
pub struct Hub {
    channels: Vec<Channel>,
    clients: HashMap<u64, Client>,
    next_client: u64,
    /// Messages kept per channel at most, and their bytes at most.
    history: usize,
    history_bytes: usize,
    /// Messages a slow client lost.
    pub(crate) dropped: u64,
}

impl Hub {
    /// A hub keeping the last `history` messages of each channel (and at most
    /// `history_bytes` of them).
    pub fn new(history: usize, history_bytes: usize) -> Hub {
        Hub {
            channels: Vec::new(),
            clients: HashMap::new(),
            next_client: 0,
            history,
            history_bytes,
            dropped: 0,
        }
    }

    /// Adds a channel (`topic`, JSON messages of JSON Schema `schema` named `schema_name`),
    /// advertised to every client; its id.
    pub fn add_channel(&mut self, topic: &str, schema_name: &str, schema: &Json) -> u32 {
        let id = self.channels.len() as u32 + 1;
        let info = json!({
            "id": id,
            "topic": topic,
            "encoding": "json",
            "schemaName": schema_name,
            "schema": schema.to_string(),
            "schemaEncoding": "jsonschema",
        });
        let text = json!({"op": "advertise", "channels": [info]}).to_string();
        for c in self.clients.values() {
            let _ = c.out.try_send(Message::text(text.clone()));
        }
        self.channels.push(Channel {
            info,
            history: VecDeque::new(),
            history_bytes: 0,
        });
        id
    }

    /// A message on channel `id`: kept, and sent to its subscribers.
    pub fn publish(&mut self, id: u32, t_nanos: u64, json: Vec<u8>) {
        let share = HISTORY_BUDGET_BYTES / self.channels.len().max(1);
        let cap = self.history_bytes.min(share);
        let Some(ch) = self.channels.get_mut((id as usize).wrapping_sub(1)) else {
            return;
        };
        let json: Arc<[u8]> = json.into();
        for c in self.clients.values() {
            if let Some(sub) = c.subs.get(&id) {
                if let Err(TrySendError::Full(_)) = c.out.try_send(frame(*sub, t_nanos, &json)) {
                    self.dropped += 1;
                }
            }
        }
        ch.history_bytes += json.len();
        ch.history.push_back((t_nanos, json));
        while ch.history.len() > self.history || (ch.history_bytes > cap && ch.history.len() > 1) {
            if let Some((_, old)) = ch.history.pop_front() {
                ch.history_bytes -= old.len();
            }
        }
    }

    /// Channels advertised.
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Clients connected.
    pub fn client_count(&self) -> usize {
        self.clients.len()
    }
}

/// A `MESSAGE_DATA` frame.
fn frame(sub: u32, t_nanos: u64, json: &[u8]) -> Message {
    let mut b = Vec::with_capacity(13 + json.len());
    b.push(1);
    b.extend_from_slice(&sub.to_le_bytes());
    b.extend_from_slice(&t_nanos.to_le_bytes());
    b.extend_from_slice(json);
    Message::binary(b)
}

fn lock(hub: &Mutex<Hub>) -> MutexGuard<'_, Hub> {
    // A client thread that panicked holding it left it consistent: every change is one step.
    hub.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bridge's server (its threads live as long as the process): its `url()` is
/// `ws://127.0.0.1:PORT/?token=…`, what Foxglove opens (Open connection → Foxglove
/// WebSocket).
pub use crate::token::LocalServer as Server;

/// Serves `hub` on 127.0.0.1:`port` (0: a free one) from a thread of its own. Only a client
/// whose URL carries the token is accepted (another user of the machine cannot watch).
pub fn serve(hub: Arc<Mutex<Hub>>, port: u16) -> std::io::Result<Server> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let addr = listener.local_addr()?;
    let token = crate::token::new_token()?;
    let want = token.clone();
    std::thread::Builder::new()
        .name("foxglove-accept".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let (hub, want) = (Arc::clone(&hub), want.clone());
                let _ = std::thread::Builder::new()
                    .name("foxglove-client".into())
                    .spawn(move || client(stream, &hub, &want));
            }
        })?;
    Ok(Server::new("ws", addr, token))
}

/// Accepts the handshake: the token, and the subprotocol.
#[expect(
    clippy::result_large_err,
    reason = "the error type is tungstenite's handshake callback's"
)]
fn handshake(stream: TcpStream, token: &str) -> Option<WebSocket<TcpStream>> {
    let check = |req: &Request, mut resp: Response| -> Result<Response, ErrorResponse> {
        let query = req.uri().query().unwrap_or("");
        if !query.split('&').any(|kv| kv == format!("token={token}")) {
            let mut e = ErrorResponse::new(Some(
                "a token is needed: use the URL snapbus printed".into(),
            ));
            *e.status_mut() = tungstenite::http::StatusCode::FORBIDDEN;
            return Err(e);
        }
        let offered = req
            .headers()
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|p| p.trim() == SUBPROTOCOL));
        if offered {
            resp.headers_mut().insert(
                "sec-websocket-protocol",
                tungstenite::http::HeaderValue::from_static(SUBPROTOCOL),
            );
        }
        Ok(resp)
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    tungstenite::accept_hdr(stream, check).ok()
}

/// Serves one client until it leaves.
fn client(stream: TcpStream, hub: &Mutex<Hub>, token: &str) {
    let Some(mut ws) = handshake(stream, token) else {
        return;
    };
    if ws.get_ref().set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    let (tx, rx) = sync_channel(QUEUE);
    let (id, hello) = {
        let mut h = lock(hub);
        let id = h.next_client;
        h.next_client += 1;
        h.clients.insert(
            id,
            Client {
                out: tx,
                subs: HashMap::new(),
            },
        );
        let info = json!({
            "op": "serverInfo",
            "name": format!("snapbus {}", env!("CARGO_PKG_VERSION")),
            "capabilities": [],
            "supportedEncodings": [],
            "metadata": {},
            "sessionId": format!("{}-{id}", std::process::id()),
        });
        let channels: Vec<&Json> = h.channels.iter().map(|c| &c.info).collect();
        let adv = json!({"op": "advertise", "channels": channels});
        (id, [info.to_string(), adv.to_string()])
    };
    let _ = serve_client(&mut ws, hub, id, &rx, hello);
    lock(hub).clients.remove(&id);
}

fn serve_client(
    ws: &mut WebSocket<TcpStream>,
    hub: &Mutex<Hub>,
    id: u64,
    rx: &Receiver<Message>,
    hello: [String; 2],
) -> tungstenite::Result<()> {
    for text in hello {
        ws.send(Message::text(text))?;
    }
    loop {
        let mut sent = false;
        while let Ok(m) = rx.try_recv() {
            ws.write(m)?;
            sent = true;
        }
        if sent {
            ws.flush()?;
        }
        match ws.read() {
            Ok(Message::Text(t)) => {
                for m in request(hub, id, &t) {
                    ws.write(m)?;
                }
                ws.flush()?;
            }
            Ok(Message::Close(_)) => return Ok(()),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
}

/// A client's request: what to send it first (the history of the channels it subscribed to,
/// or a status message for a request it cannot make).
fn request(hub: &Mutex<Hub>, id: u64, text: &str) -> Vec<Message> {
    let req: Json = serde_json::from_str(text).unwrap_or(Json::Null);
    let mut h = lock(hub);
    let mut out = Vec::new();
    match req["op"].as_str() {
        Some("subscribe") => {
            for s in req["subscriptions"].as_array().into_iter().flatten() {
                let (Some(sub), Some(ch)) = (s["id"].as_u64(), s["channelId"].as_u64()) else {
                    continue;
                };
                let (sub, ch) = (sub as u32, ch as u32);
                let Some(channel) = h.channels.get((ch as usize).wrapping_sub(1)) else {
                    out.push(status(&format!("no channel {ch}")));
                    continue;
                };
                out.extend(channel.history.iter().map(|(t, j)| frame(sub, *t, j)));
                if let Some(c) = h.clients.get_mut(&id) {
                    c.subs.insert(ch, sub);
                }
            }
        }
        Some("unsubscribe") => {
            let ids: Vec<u64> = req["subscriptionIds"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Json::as_u64)
                .collect();
            if let Some(c) = h.clients.get_mut(&id) {
                c.subs.retain(|_, sub| !ids.contains(&u64::from(*sub)));
            }
        }
        op => out.push(status(&format!(
            "snapbus does not serve {}",
            op.unwrap_or("that request")
        ))),
    }
    out
}

/// A `status` message at level warning.
fn status(message: &str) -> Message {
    Message::text(json!({"op": "status", "level": 1, "message": message}).to_string())
}

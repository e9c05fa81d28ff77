//! The `/metrics` endpoint: a plain HTTP/1.1 server on `std::net`, answering only requests that
//! carry the bearer token ([`auth`](super::auth): 401 without it, 403 with a wrong one), one
//! thread per request (at
//! most [`MAX_REQUESTS`] at once; more get a 503 written without waiting, or nothing), every
//! connection closed after one response, with read and write timeouts, so a client that never
//! reads (or never finishes its request) ties up one request thread for a bounded time and
//! never the accepting thread. Scrapes render with `prometheus-client`'s OpenMetrics text
//! encoder from the latest [`Snapshot`](super::table::Snapshot), never from the reader's
//! table, and the bus's health from a copy of the broker's state refreshed every
//! [`BUS_STATE_EVERY`] by a thread of its own, which asks for counters only (neither a scrape
//! nor that thread makes the broker walk the rings).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use snapbus_bus::client::{BusClient, BusState, Census};
use snapbus_bus::runtime::BusDir;

use super::auth::bearer_matches;
use super::health::{counter, encode_health, gauge};
use super::table::Shared;

/// Requests served at once at most (more get 503: a swarm of scrapers cannot pile up threads).
pub const MAX_REQUESTS: usize = 8;
/// How long the health thread waits for the broker's state.
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the broker's state is fetched for the health series.
pub const BUS_STATE_EVERY: Duration = Duration::from_secs(2);
/// A copy of the broker's state older than this is not shown (`snapbus_bus_up` is 0).
pub const BUS_STATE_MAX_AGE: Duration = Duration::from_secs(10);
/// How long a request may take to arrive, and a response to be taken.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head read (a scrape's is a few hundred bytes).
const MAX_REQUEST_BYTES: usize = 16 << 10;
/// The content type of `/metrics`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A running `/metrics` server (its threads live as long as the process).
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
}

impl Server {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/metrics`.
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }
}

/// The broker's state as last fetched, and when.
type CachedState = Arc<Mutex<Option<(Instant, BusState)>>>;

/// What a scrape renders: the exporter's counters, the bus's health, the data.
#[derive(Debug)]
struct Metrics {
    shared: Arc<super::table::Shared>,
    state: CachedState,
}

impl Collector for Metrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.shared.take_for_scrape();
        let c = snap.counters;
        let none: &[(std::borrow::Cow<'static, str>, String)] = &[];
        let ld = |r: &'static str| vec![("reason".into(), r.to_owned())];
        let (card, ttl, end) = (ld("cardinality"), ld("ttl"), ld("producer_end"));
        let sh = &self.shared;
        counter(
            &mut enc,
            "snapbus_exporter_scrapes",
            "Scrapes of /metrics answered",
            [(none, sh.scrapes.load(Ordering::Relaxed))],
        )?;
        counter(
            &mut enc,
            "snapbus_exporter_records",
            "Records read from the bus",
            [(none, sh.records.load(Ordering::Relaxed))],
        )?;
        counter(
            &mut enc,
            "snapbus_exporter_malformed_records",
            "Records whose payload did not match its descriptor (not exported)",
            [(none, sh.malformed.load(Ordering::Relaxed))],
        )?;
        gauge(
            &mut enc,
            "snapbus_exporter_series",
            "Data series exported now",
            [(none, c.series as f64)],
        )?;
        counter(
            &mut enc,
            "snapbus_exporter_series_dropped",
            "New series refused, by reason (cardinality: the --max-series cap)",
            [(card.as_slice(), c.dropped_cardinality)],
        )?;
        counter(
            &mut enc,
            "snapbus_exporter_series_expired",
            "Series removed, by reason (ttl: not updated for --series-ttl; producer_end: \
             their producer ended or died)",
            [
                (ttl.as_slice(), c.expired_ttl),
                (end.as_slice(), c.expired_producer_end),
            ],
        )?;
        let state = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.as_ref().cloned())
            .filter(|(at, _)| at.elapsed() <= BUS_STATE_MAX_AGE)
            .map(|(_, s)| s);
        encode_health(&mut enc, state.as_ref())?;
        for f in &snap.families {
            gauge(
                &mut enc,
                &f.name,
                &f.help,
                f.series.iter().map(|(l, v)| (&**l, *v)),
            )?;
        }
        Ok(())
    }
}

/// Binds `listen` and serves `/metrics` from `shared` (with the health of the bus of `bus`,
/// if given) to requests carrying `token`, from a thread; returns once the socket is listening.
pub(crate) fn serve(
    shared: Arc<Shared>,
    listen: SocketAddr,
    bus: Option<BusDir>,
    token: String,
) -> std::io::Result<Server> {
    let token: Arc<str> = token.into();
    let listener = TcpListener::bind(listen)?;
    let addr = listener.local_addr()?;
    let state: CachedState = Arc::new(Mutex::new(None));
    if let Some(dir) = bus {
        let state = Arc::clone(&state);
        std::thread::Builder::new()
            .name("prometheus-bus-state".into())
            .spawn(move || {
                loop {
                    // Counters only: the health series need no ring census.
                    let fetched = BusClient::connect(&dir)
                        .and_then(|c| c.with_timeout(BROKER_TIMEOUT).state_with(Census::Skip));
                    if let Ok(s) = fetched {
                        if let Ok(mut cached) = state.lock() {
                            *cached = Some((Instant::now(), s));
                        }
                    }
                    std::thread::sleep(BUS_STATE_EVERY);
                }
            })?;
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Metrics { shared, state }));
    let registry = Arc::new(registry);
    let active = Arc::new(AtomicUsize::new(0));
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("prometheus-http".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if active.fetch_add(1, Ordering::AcqRel) >= MAX_REQUESTS {
                    active.fetch_sub(1, Ordering::AcqRel);
                    refuse_busy(stream, &busy);
                    continue;
                }
                let registry = Arc::clone(&registry);
                let token = Arc::clone(&token);
                let active2 = Arc::clone(&active);
                let spawned = std::thread::Builder::new()
                    .name("prometheus-request".into())
                    .spawn(move || {
                        handle(stream, &registry, &token);
                        active2.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::AcqRel);
                }
            }
        })?;
    Ok(Server { addr })
}

/// Answers 503 from a short-lived thread (at most [`MAX_BUSY_REPLIES`] at once, each reading
/// the request first, so that closing does not reset the connection before the client reads
/// the answer, and bounded by [`BUSY_TIMEOUT`]); beyond that, closes the connection.
fn refuse_busy(stream: TcpStream, busy: &Arc<AtomicUsize>) {
    if busy.fetch_add(1, Ordering::AcqRel) >= MAX_BUSY_REPLIES {
        busy.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let busy2 = Arc::clone(busy);
    let spawned = std::thread::Builder::new()
        .name("prometheus-busy".into())
        .spawn(move || {
            let mut stream = stream;
            if stream.set_read_timeout(Some(BUSY_TIMEOUT)).is_ok()
                && stream.set_write_timeout(Some(BUSY_TIMEOUT)).is_ok()
            {
                let _ = read_request(&mut stream);
                let _ = stream.write_all(&response(
                    503,
                    "text/plain",
                    b"busy: too many scrapes at once\n",
                ));
            }
            busy2.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Busy replies at most at once (beyond them, connections are closed unanswered).
const MAX_BUSY_REPLIES: usize = 32;
/// How long a busy reply may take.
const BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads one request (its head; a scrape has no body) and answers it, then closes.
fn handle(mut stream: TcpStream, registry: &Registry, token: &str) {
    if stream.set_read_timeout(Some(IO_TIMEOUT)).is_err()
        || stream.set_write_timeout(Some(IO_TIMEOUT)).is_err()
    {
        return;
    }
    let Some(Request { target, auth }) = read_request(&mut stream) else {
        let _ = stream.write_all(&response(400, "text/plain", b"bad request\n"));
        return;
    };
    let answer = match auth {
        None => response(
            401,
            "text/plain",
            b"unauthorized: send the token of the exporter's token file \
              (Authorization: Bearer TOKEN; Prometheus: authorization: credentials_file)\n",
        ),
        Some(a) if !bearer_matches(&a, token) => {
            response(403, "text/plain", b"forbidden: wrong token\n")
        }
        Some(_) => answer(target, registry),
    };
    let _ = stream.write_all(&answer);
    let _ = stream.flush();
}

/// The response to an authorized request for `target`.
fn answer(target: Target, registry: &Registry) -> Vec<u8> {
    match target {
        Target::Get(path) => match path.split('?').next().unwrap_or("") {
            "/metrics" => {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, registry) {
                    Ok(()) => response(200, CONTENT_TYPE, body.as_bytes()),
                    Err(_) => response(500, "text/plain", b"encoding failed\n"),
                }
            }
            "/" => response(
                200,
                "text/html; charset=utf-8",
                b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n",
            ),
            _ => response(404, "text/plain", b"not found: try /metrics\n"),
        },
        Target::Other => response(405, "text/plain", b"only GET is served\n"),
    }
}

/// A request head: what it asks for, and its `Authorization` value.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    target: Target,
    auth: Option<String>,
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `GET` of this path.
    Get(String),
    /// Another method.
    Other,
}

/// Reads a request head (up to the blank line, at most [`MAX_REQUEST_BYTES`]); `None` if it is
/// not HTTP, too long, or does not arrive in time.
fn read_request(stream: &mut impl Read) -> Option<Request> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST_BYTES {
            return None;
        }
    }
    let mut lines = std::str::from_utf8(&head).ok()?.lines();
    let mut parts = lines.next()?.split_whitespace();
    let (method, path, version) = (parts.next()?, parts.next()?, parts.next()?);
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let auth = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.trim().to_owned());
    let target = if method == "GET" {
        Target::Get(path.to_owned())
    } else {
        Target::Other
    };
    Some(Request { target, auth })
}

/// A whole HTTP/1.1 response that closes the connection.
fn response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    // What a client that sent no token is to send (RFC 6750).
    let challenge = if status == 401 {
        "WWW-Authenticate: Bearer realm=\"snapbus\"\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {challenge}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_up_to_their_head_and_bad_ones_refused() {
        let mut get =
            &b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization: Bearer t\r\n\r\n"[..];
        assert_eq!(
            read_request(&mut get),
            Some(Request {
                target: Target::Get("/metrics?x=1".into()),
                auth: Some("Bearer t".into())
            })
        );
        let mut post = &b"POST /metrics HTTP/1.0\r\n\r\n"[..];
        assert_eq!(
            read_request(&mut post),
            Some(Request {
                target: Target::Other,
                auth: None
            })
        );
        assert_eq!(read_request(&mut &b"garbage\r\n\r\n"[..]), None);
        assert_eq!(read_request(&mut &b"GET / SPDY/9\r\n\r\n"[..]), None);
        let long = [b'a'; MAX_REQUEST_BYTES + 10];
        assert_eq!(read_request(&mut &long[..]), None);
        let r = String::from_utf8(response(503, "text/plain", b"busy\n")).expect("text");
        assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
        assert!(
            r.contains("Content-Length: 5\r\nConnection: close\r\n\r\nbusy\n"),
            "{r}"
        );
    }
}

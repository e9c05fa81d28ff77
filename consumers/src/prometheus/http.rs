//! The `/metrics` endpoint, on `tiny_http`: `GET` and `HEAD` (the same head, no body) of
//! `/metrics`, answered only to requests that carry the bearer token ([`auth`](super::auth):
//! 401 without it, 403 with a wrong one); other methods 405 (with `Allow`), other paths 404.
//! One thread per request, at most [`MAX_REQUESTS`] rendering at once: more get a 503 at
//! once, so a swarm of scrapers, or clients that ask and never read (each holds its request's
//! thread until it reads or closes), never stall the accepting thread nor the reader;
//! `tiny_http` reads request heads on threads of its own. Scrapes render with `prometheus-client`'s OpenMetrics text
//! encoder from the latest [`Snapshot`](super::table::Snapshot), never from the reader's
//! table, and the bus's health from a copy of the broker's state refreshed every
//! [`BUS_STATE_EVERY`] by a thread of its own, which asks for counters only (neither a scrape
//! nor that thread makes the broker walk the rings).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use snapbus_bus::client::{BusClient, BusState, Census};
use snapbus_bus::runtime::BusDir;
use tiny_http::{Header, Method, Request, Response};

use super::auth::bearer_matches;
use super::health::{counter, encode_health, gauge, gauge_with_unit};
use super::table::Shared;

/// Requests served at once at most (more get 503: a swarm of scrapers cannot pile up threads).
pub const MAX_REQUESTS: usize = 8;
/// How long the health thread waits for the broker's state.
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the broker's state is fetched for the health series.
pub const BUS_STATE_EVERY: Duration = Duration::from_secs(2);
/// A copy of the broker's state older than this is not shown (`snapbus_bus_up` is 0).
pub const BUS_STATE_MAX_AGE: Duration = Duration::from_secs(10);
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
            // The unit the field's name ends with (`..._duration_nanos`: `# UNIT ... nanos`);
            // not for summaries, whose `count` stat shares the family.
            let summary = f
                .series
                .first()
                .is_some_and(|(l, _)| l.iter().any(|(k, _)| k == "stat"));
            let unit = (!summary)
                .then(|| crate::fields::unit_of(&f.name))
                .flatten()
                .map(|u| u.suffix);
            gauge_with_unit(
                &mut enc,
                &f.name,
                &f.help,
                unit,
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
    let server =
        tiny_http::Server::http(listen).map_err(|e| match e.downcast::<std::io::Error>() {
            Ok(io) => *io,
            Err(e) => std::io::Error::other(e),
        })?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| std::io::Error::other("the server has no IP address"))?;
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
    std::thread::Builder::new()
        .name("prometheus-http".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                // Every answer from a thread of its own, the busy one too: `tiny_http` writes
                // the answers of one connection in order, so answering here could wait
                // behind a response a client never reads.
                let registry = Arc::clone(&registry);
                let token = Arc::clone(&token);
                let active = Arc::clone(&active);
                let _ = std::thread::Builder::new()
                    .name("prometheus-request".into())
                    .spawn(move || {
                        if active.fetch_add(1, Ordering::AcqRel) >= MAX_REQUESTS {
                            respond(
                                request,
                                503,
                                "text/plain",
                                "busy: too many scrapes at once\n",
                            );
                        } else {
                            handle(request, &registry, &token);
                        }
                        active.fetch_sub(1, Ordering::AcqRel);
                    });
            }
        })?;
    Ok(Server { addr })
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

/// Answers `request` (its body left out for a `HEAD`, by `tiny_http`).
fn respond(request: Request, status: u16, content_type: &str, body: impl Into<Vec<u8>>) {
    let mut response = Response::from_data(body.into()).with_status_code(status);
    let extra = match status {
        // What a client that sent no token is to send (RFC 6750).
        401 => Some(("WWW-Authenticate", "Bearer realm=\"snapbus\"")),
        405 => Some(("Allow", "GET, HEAD")),
        _ => None,
    };
    for (name, value) in std::iter::once(("Content-Type", content_type)).chain(extra) {
        if let Some(h) = header(name, value) {
            response.add_header(h);
        }
    }
    let _ = request.respond(response);
}

/// Checks the token and answers one request.
fn handle(request: Request, registry: &Registry, token: &str) {
    let auth = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().trim().to_owned());
    match auth {
        None => respond(
            request,
            401,
            "text/plain",
            "unauthorized: send the token of the exporter's token file \
             (Authorization: Bearer TOKEN; Prometheus: authorization: credentials_file)\n",
        ),
        Some(a) if !bearer_matches(&a, token) => {
            respond(request, 403, "text/plain", "forbidden: wrong token\n")
        }
        Some(_) => answer(request, registry),
    }
}

/// Answers an authorized request.
fn answer(request: Request, registry: &Registry) {
    if !matches!(request.method(), Method::Get | Method::Head) {
        respond(request, 405, "text/plain", "only GET and HEAD are served\n");
        return;
    }
    let path = request.url().split('?').next().unwrap_or("").to_owned();
    match path.as_str() {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => respond(request, 200, CONTENT_TYPE, body),
                Err(_) => respond(request, 500, "text/plain", "encoding failed\n"),
            }
        }
        "/" => respond(
            request,
            200,
            "text/html; charset=utf-8",
            "<html><body><a href=\"/metrics\">/metrics</a></body></html>\n",
        ),
        _ => respond(request, 404, "text/plain", "not found: try /metrics\n"),
    }
}

//! The `/metrics` endpoint: `tiny_http` on its own thread, one thread per request (at most
//! [`MAX_REQUESTS`] at once; more get 503), rendering with `prometheus-client`'s OpenMetrics
//! text encoder from the latest [`Snapshot`](super::table::Snapshot), never from the reader's
//! table.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use snapbus_bus::runtime::BusDir;
use tiny_http::{Header, Request, Response};

use super::health::{bus_state, counter, encode_health, gauge};
use super::table::Shared;

/// Requests served at once at most (more get 503: a swarm of scrapers cannot pile up threads).
pub const MAX_REQUESTS: usize = 8;
/// How long a scrape waits for the broker's state (without it, `snapbus_bus_up` is 0).
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(1);
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

/// What a scrape renders: the exporter's counters, the bus's health, the data.
#[derive(Debug)]
struct Metrics {
    shared: Arc<super::table::Shared>,
    bus: Option<BusDir>,
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
            .bus
            .as_ref()
            .and_then(|d| bus_state(d, BROKER_TIMEOUT).ok());
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
/// if given) from a thread; returns once the socket is listening.
pub(crate) fn serve(
    shared: Arc<Shared>,
    listen: SocketAddr,
    bus: Option<BusDir>,
) -> std::io::Result<Server> {
    let server = tiny_http::Server::http(listen)
        .map_err(|e| std::io::Error::other(format!("binding {listen}: {e}")))?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| std::io::Error::other("the server has no IP address"))?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Metrics { shared, bus }));
    let registry = Arc::new(registry);
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("prometheus-http".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                if active.fetch_add(1, Ordering::AcqRel) >= MAX_REQUESTS {
                    active.fetch_sub(1, Ordering::AcqRel);
                    respond(
                        request,
                        503,
                        "text/plain",
                        "busy: too many scrapes at once\n".into(),
                    );
                    continue;
                }
                let registry = Arc::clone(&registry);
                let active2 = Arc::clone(&active);
                let spawned = std::thread::Builder::new()
                    .name("prometheus-request".into())
                    .spawn(move || {
                        handle(request, &registry);
                        active2.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::AcqRel);
                }
            }
        })?;
    Ok(Server { addr })
}

fn handle(request: Request, registry: &Registry) {
    let path = request.url().split('?').next().unwrap_or("");
    match path {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => respond(request, 200, CONTENT_TYPE, body),
                Err(_) => respond(request, 500, "text/plain", "encoding failed\n".into()),
            }
        }
        "/" => respond(
            request,
            200,
            "text/html; charset=utf-8",
            "<html><body><a href=\"/metrics\">/metrics</a></body></html>\n".into(),
        ),
        _ => respond(
            request,
            404,
            "text/plain",
            "not found: try /metrics\n".into(),
        ),
    }
}

fn respond(request: Request, status: u16, content_type: &str, body: String) {
    let header = Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .expect("ASCII content type");
    let _ = request.respond(
        Response::from_string(body)
            .with_status_code(status)
            .with_header(header),
    );
}

//! `snapbus prometheus`: the Prometheus exporter in this terminal (`attach prometheus` runs it
//! under the broker). Binds its `/metrics` endpoint first (an address in use fails here, with
//! a non-zero exit, before anything subscribes), prints its URL on stdout (and on stderr the
//! token file a scrape needs, with the scrape config), then reads the bus
//! (from the history still in the rings, by default, so the last values of quiet schemas are
//! there at once). Ctrl-C (or SIGTERM, which `detach` sends) stops it; the producers never
//! notice, and neither does a scraper that stalls.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use snapbus_bus::client::Attached;
use snapbus_bus::runtime::BusDir;
use snapbus_consumers::prometheus::auth::{load_or_create, token_path};
use snapbus_consumers::prometheus::{DEFAULT_PORT, Exporter, PrometheusOptions};
use snapbus_consumers::run as run_consumer;

use crate::announce::{announce_url, publish_url};
use crate::bus::{bus_dir, connect, globs};
use crate::cli::{BusArgs, From, parse_duration};
use crate::consumer_kinds::kind::{BuiltinConsumer, bus_and_run};

/// Options of `snapbus prometheus` (and `attach prometheus`).
#[derive(Debug, Clone, Args)]
pub(crate) struct PrometheusArgs {
    /// Schema-id globs to export (default: all); repeatable.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// The address to serve /metrics on [default: 127.0.0.1:9464]; anything but a loopback
    /// address exposes the endpoint to the network, over plain HTTP (the token crosses it in
    /// clear).
    #[arg(long, value_name = "ADDR:PORT")]
    pub(crate) listen: Option<SocketAddr>,
    /// The file holding the bearer token every request must carry (made, 0600, with a random
    /// token if missing; else it must be ours and not readable by every user) [default:
    /// prometheus.token in the bus's directory]. Prometheus: `authorization: {credentials_file:
    /// FILE}`.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// The port to serve on (0: a free one), on 127.0.0.1 or on --listen's address.
    #[arg(long, value_name = "PORT")]
    pub(crate) port: Option<u16>,
    /// Data series at most; a new series beyond is refused and counted
    /// (snapbus_exporter_series_dropped_total{reason="cardinality"}).
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(crate) max_series: u64,
    /// A series not updated for this long is removed (a series of a producer that ended or
    /// died goes once a scrape has served its last value).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub(crate) series_ttl: Duration,
    /// Start with the history still in the rings, or with new records only.
    #[arg(long, value_enum, default_value_t = From::Oldest)]
    pub(crate) from: From,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

impl PrometheusArgs {
    fn addr(&self) -> SocketAddr {
        let mut addr = self
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)));
        if let Some(p) = self.port {
            addr.set_port(p);
        }
        addr
    }
}

impl BuiltinConsumer for PrometheusArgs {
    const KIND: &'static str = "prometheus";
    const VERB: &'static str = "prometheus";
    const VERB_ABOUT: &'static str = "Serve the latest value of every numeric field of the \
        subscribed schemas (and of the aggregator's summaries) as Prometheus gauges on \
        http://127.0.0.1:9464/metrics, with the bus's health, in this terminal; prints its URL";
    const ATTACH_ABOUT: &'static str = "A Prometheus /metrics endpoint (see `snapbus \
        prometheus --help`); prints its URL once it serves and reads";
    const PATH_FLAGS: &'static [&'static str] = &["token_file"];

    bus_and_run!();

    /// The globs, the token file (made now if missing), and the address: free now (the
    /// exporter binds it again itself; this only makes `attach` fail at once, with the reason).
    fn check(&self, dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        globs(&self.schemas)?;
        load_or_create(&token_path(dir, self.token_file.as_deref()))?;
        let addr = self.addr();
        if addr.port() != 0 {
            TcpListener::bind(addr)
                .map(drop)
                .map_err(|e| bind_error(addr, e))?;
        }
        Ok(())
    }

    fn what(&self) -> String {
        "a Prometheus endpoint".to_owned()
    }

    /// Prints the endpoint's URL on stdout (the exporter wrote it before it subscribed, and it
    /// has subscribed).
    fn announce(&self, dir: &BusDir, started: &Attached) -> anyhow::Result<()> {
        announce_url(dir, "prometheus", started, &url_path(dir, started.pid))?;
        say_token("attach", &token_path(dir, self.token_file.as_deref()));
        Ok(())
    }
}

fn bind_error(addr: SocketAddr, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot serve /metrics on {addr}: {e} (is the port in use? --port 0 picks a free one)"
    )
}

pub(crate) fn run(args: &PrometheusArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    let dir = bus_dir(&args.bus)?;
    drop(connect(&dir)?);
    let addr = args.addr();
    let token_file = token_path(&dir, args.token_file.as_deref());
    let token = load_or_create(&token_file)?;
    let mut exporter = Exporter::new(PrometheusOptions {
        max_series: usize::try_from(args.max_series).unwrap_or(usize::MAX),
        series_ttl: args.series_ttl,
    });
    let server = exporter
        .serve(addr, Some(dir.clone()), token)
        .map_err(|e| bind_error(addr, e))?;
    if !server.addr().ip().is_loopback() {
        snapbus_bus::say!(
            "snapbus prometheus: warning: {} is reachable from other machines over plain HTTP; \
             the bearer token crosses the network in clear",
            server.addr()
        );
    }
    let url_file = url_path(&dir, std::process::id());
    publish_url(&dir, "prometheus", &server.url(), &url_file)?;
    say_token("prometheus", &token_file);
    let mut opts = exporter.run_options();
    opts.subscribe.globs = globs;
    opts.subscribe.start = args.from.start();
    let result = run_consumer(&dir, &opts, &mut exporter, None);
    let _ = std::fs::remove_file(&url_file);
    if let Err(e) = result {
        bail!(e);
    }
    Ok(())
}

/// Says on stderr which token a scrape needs, and the scrape config that sends it.
fn say_token(verb: &str, file: &std::path::Path) {
    snapbus_bus::say!(
        "snapbus {verb}: /metrics answers requests with `Authorization: Bearer <the token in \
         {f}>`; in Prometheus's scrape config: `authorization: {{credentials_file: {f}}}` (a \
         Prometheus running as another user needs a copy it can read, or --token-file)",
        f = file.display()
    );
}

/// Where exporter process `pid` of the bus of `dir` leaves its URL.
pub(crate) fn url_path(dir: &BusDir, pid: u32) -> PathBuf {
    dir.path().join(format!("prometheus-{pid}.url"))
}

//! `snapbus otlp`: the OTLP exporter in this terminal (`attach otlp` runs it under the
//! broker). Sends what the subscribed schemas carry to an OpenTelemetry Collector (or any
//! OTLP/HTTP receiver) as metrics, logs and traces (see `snapbus_consumers::otlp`). Ctrl-C
//! (or SIGTERM, which `detach` sends) sends what is left until 5 s have passed (a request
//! already in flight may take up to its 10 s timeout) and exits 0.

use std::time::Duration;

use anyhow::Context;
use clap::{ArgMatches, Args};
use snapbus_bus::runtime::BusDir;
use snapbus_consumers::otlp::{
    DropReason, Endpoints, OtlpExporter, OtlpOptions, Signal, serve_metrics,
};
use snapbus_consumers::prelude::StatusBoard;
use snapbus_consumers::{BatchReads, RunOptions, run as run_consumer};

use crate::bus::{bus_dir, connect, globs};
use crate::cli::{BusArgs, From, parse_duration};
use crate::consumer_kinds::kind::{BuiltinConsumer, bus_and_run, forward};

/// Options of `snapbus otlp` (and `attach otlp`).
#[derive(Debug, Clone, Args)]
pub(crate) struct OtlpArgs {
    /// The receiver's base URL: metrics go to URL/v1/metrics, logs to URL/v1/logs, traces to
    /// URL/v1/traces (default: $OTEL_EXPORTER_OTLP_ENDPOINT, and the per-signal
    /// $OTEL_EXPORTER_OTLP_{METRICS,LOGS,TRACES}_ENDPOINT, else http://127.0.0.1:4318).
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint: Option<String>,
    /// The full URL for metrics (e.g. VictoriaMetrics' http://HOST:8428/opentelemetry/v1/metrics).
    #[arg(long, value_name = "URL")]
    pub(crate) metrics_endpoint: Option<String>,
    /// The full URL for logs.
    #[arg(long, value_name = "URL")]
    pub(crate) logs_endpoint: Option<String>,
    /// The full URL for traces.
    #[arg(long, value_name = "URL")]
    pub(crate) traces_endpoint: Option<String>,
    /// The signals to export (comma-separated: metrics, logs, traces).
    #[arg(long, value_name = "LIST", value_delimiter = ',',
          default_values = ["metrics", "logs", "traces"],
          value_parser = ["metrics", "logs", "traces"])]
    pub(crate) signals: Vec<String>,
    /// Schema-id globs to export (default: all); repeatable.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// How often the metrics (the last value of each series) are sent.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub(crate) interval: Duration,
    /// The byte cap of the queue of log and span batches (the oldest batch goes when full).
    #[arg(long, value_name = "N", default_value_t = 16 << 20,
          value_parser = clap::value_parser!(u64).range(4096..))]
    pub(crate) max_queue_bytes: u64,
    /// The most metric series; points of new series beyond it are dropped and counted.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub(crate) max_series: usize,
    /// Serve the exporter's own counters (Prometheus text) on this address, e.g.
    /// 127.0.0.1:9465.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<String>,
    /// Start at new records, or include the history still in the rings.
    #[arg(long, value_enum, default_value_t = From::Latest)]
    pub(crate) from: From,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

impl OtlpArgs {
    /// The URL of each signal, from the flags and the environment (bad URLs refused).
    pub(crate) fn endpoints(&self) -> anyhow::Result<Endpoints> {
        let mut e = Endpoints::resolve(self.endpoint.as_deref(), |k| std::env::var(k).ok())?;
        for (signal, url) in [
            (Signal::Metrics, &self.metrics_endpoint),
            (Signal::Logs, &self.logs_endpoint),
            (Signal::Traces, &self.traces_endpoint),
        ] {
            if let Some(url) = url {
                e.set(signal, url)?;
            }
            if !self.signals.iter().any(|s| s == signal.name()) {
                e.disable(signal);
            }
        }
        Ok(e)
    }

    fn check_listen(&self) -> anyhow::Result<()> {
        if let Some(a) = &self.metrics_listen {
            a.parse::<std::net::SocketAddr>().with_context(|| {
                format!("--metrics-listen {a:?}: expected IP:PORT, e.g. 127.0.0.1:9465")
            })?;
        }
        Ok(())
    }
}

impl BuiltinConsumer for OtlpArgs {
    const KIND: &'static str = "otlp";
    const VERB: &'static str = "otlp";
    const VERB_ABOUT: &'static str = "Export the bus to an OpenTelemetry Collector (OTLP/HTTP): \
        numeric fields and summaries as metrics, events as logs, spans as traces, in this \
        terminal";
    const ATTACH_ABOUT: &'static str = "Export to an OpenTelemetry Collector over OTLP/HTTP \
        (see `snapbus otlp --help`)";

    bus_and_run!();

    /// Bad globs, URLs and addresses are refused before anything starts.
    fn check(&self, _dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        globs(&self.schemas)?;
        self.endpoints()?;
        self.check_listen()
    }

    /// The flags given, plus the URLs the caller's environment chose
    /// (`OTEL_EXPORTER_OTLP_*ENDPOINT`) as explicit flags: the consumer runs in the broker's
    /// environment, which may not have them.
    fn argv(&self, m: &ArgMatches, dir: &BusDir, skip: &[&str]) -> anyhow::Result<Vec<String>> {
        let mut argv = forward::<Self>(m, dir, skip)?;
        if self.endpoint.is_none() {
            let e = self.endpoints()?;
            for (signal, given) in [
                (Signal::Metrics, &self.metrics_endpoint),
                (Signal::Logs, &self.logs_endpoint),
                (Signal::Traces, &self.traces_endpoint),
            ] {
                if let (None, Some(url)) = (given, e.get(signal)) {
                    argv.push(format!("--{}-endpoint={url}", signal.name()));
                }
            }
        }
        Ok(argv)
    }

    fn what(&self) -> String {
        match self.endpoints() {
            Ok(e) => {
                let urls: Vec<&str> = Signal::ALL.iter().filter_map(|s| e.get(*s)).collect();
                format!("OTLP ({})", urls.join(", "))
            }
            Err(_) => "OTLP".to_owned(),
        }
    }
}

pub(crate) fn run(args: &OtlpArgs) -> anyhow::Result<()> {
    let globs = globs(&args.schemas)?;
    let endpoints = args.endpoints()?;
    args.check_listen()?;
    let dir = bus_dir(&args.bus)?;
    drop(connect(&dir)?);
    let mut opts = OtlpOptions::new(endpoints.clone());
    opts.interval = args.interval;
    opts.max_queue_bytes = usize::try_from(args.max_queue_bytes).unwrap_or(usize::MAX);
    opts.max_series = args.max_series;
    let mut exporter = OtlpExporter::start(opts).context("starting the sender thread")?;
    let board = StatusBoard::new();
    exporter.report_to(board.clone());
    let _server = match &args.metrics_listen {
        Some(addr) => {
            let s = serve_metrics(addr, std::sync::Arc::clone(exporter.stats()))
                .map_err(|e| anyhow::anyhow!("--metrics-listen {addr}: {e}"))?;
            snapbus_bus::say!("snapbus otlp: counters on http://{}/metrics", s.addr());
            Some(s)
        }
        None => None,
    };
    let urls: Vec<String> = Signal::ALL
        .iter()
        .filter_map(|s| endpoints.get(*s).map(|u| format!("{} → {u}", s.name())))
        .collect();
    snapbus_bus::say!(
        "snapbus otlp: exporting bus '{}' ({}); metrics every {:?} (Ctrl-C to stop)",
        dir.name(),
        urls.join(", "),
        args.interval
    );
    let mut ropts = RunOptions::new("otlp");
    ropts.subscribe.globs = globs;
    ropts.subscribe.start = args.from.start();
    ropts.flush_every = Duration::from_millis(500).min(args.interval);
    ropts.status = Some(board);
    // A push every interval needs no microseconds: read a batch behind the producers.
    ropts.batch = Some(BatchReads::default());
    let result = run_consumer(&dir, &ropts, &mut exporter, None);
    exporter.shutdown();
    snapbus_bus::say!("snapbus otlp: {}", summary(&exporter));
    result?;
    Ok(())
}

/// What was exported and dropped, per signal, in one line.
pub(crate) fn summary(exporter: &OtlpExporter) -> String {
    let s = exporter.stats().snapshot();
    let mut parts = Vec::new();
    for sig in Signal::ALL {
        let dropped: Vec<String> = DropReason::ALL
            .iter()
            .filter(|r| s.dropped(sig, **r) > 0)
            .map(|r| format!("{} {}", s.dropped(sig, *r), r.name()))
            .collect();
        let mut p = format!("{} {} exported", s.exported(sig), sig.items());
        if !dropped.is_empty() {
            p += &format!(
                " ({} dropped: {})",
                s.dropped_total(sig),
                dropped.join(", ")
            );
        }
        parts.push(p);
    }
    let mut line = parts.join("; ");
    if s.retries > 0 {
        line += &format!("; {} retries", s.retries);
    }
    if !s.last_error.is_empty() {
        line += &format!("; last error: {}", s.last_error);
    }
    line
}

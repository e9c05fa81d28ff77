//! The Prometheus exporter end to end with the real binary: a real Prometheus 2.42 (Debian
//! bookworm, installed by `.ci/peers/prometheus`) scrapes `attach prometheus` every second
//! while `snapbus demo` runs, with the scrape config `docs/exporters.md` shows (the bearer
//! token's `credentials_file`), and its HTTP API returns the demo's values as the demo's
//! formulas state; `/metrics` refuses requests without the token; the series cap and the
//! expiry of an ended producer's series, read from `/metrics`; bad arguments.
//!
//! The peer test FAILS when Prometheus is missing (it never skips): install it with
//! `.ci/peers/prometheus` (or point `SNAPBUS_PEER_PROMETHEUS` at a `prometheus` 2.42 binary).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

use serde_json::Value;

use crate::bus::{TestBus, wait_until};
use crate::demo::expected_reward as reward;
use crate::util::{WATCHDOG, http_get, http_get_with, percent_encode, runtime_root};

/// How long a Prometheus peer may live before its watchdog kills it.
const PEER_WATCHDOG: Duration = Duration::from_secs(180);

/// `GET url` (`http://ADDR/path?query`): status and body.
fn get(url: &str) -> (u16, String) {
    let rest = url.trim_start_matches("http://");
    let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    http_get(addr, path)
}

/// The bus's token file, where the exporter makes it by default.
fn token_file(bus: &TestBus) -> PathBuf {
    runtime_root().join(&bus.name).join("prometheus.token")
}

/// `GET url` of an exporter of `bus`, with its token (as Prometheus sends it).
fn scrape(bus: &TestBus, url: &str) -> (u16, String) {
    let token = std::fs::read_to_string(token_file(bus)).expect("the token file");
    scrape_with(url, &format!("Authorization: Bearer {}\r\n", token.trim()))
}

/// `GET url` with the header lines `headers`.
fn scrape_with(url: &str, headers: &str) -> (u16, String) {
    let rest = url.trim_start_matches("http://");
    let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    http_get_with(addr, path, headers)
}

/// The value of the sample `name_and_labels` (exactly as written in the exposition) in a
/// `/metrics` body.
fn sample(body: &str, name_and_labels: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == name_and_labels).then(|| v.parse().expect("a number"))
    })
}

/// A real Prometheus on a free loopback port, killed (and its directory removed) on drop or by
/// its watchdog.
struct Peer {
    child: Child,
    dir: PathBuf,
    api: String,
    watchdog: Option<Sender<()>>,
}

fn peer_binary() -> PathBuf {
    if let Ok(p) = std::env::var("SNAPBUS_PEER_PROMETHEUS") {
        return PathBuf::from(p);
    }
    // The workspace root is two directories up from cli/'s manifest.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    root.join("target/peers/prometheus/usr/bin/prometheus")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Peer {
    /// Starts Prometheus scraping `target` (`ADDR`) every second with the bearer token in
    /// `token_file` (the scrape config of `docs/exporters.md`); returns once it is ready.
    fn start(target: &str, token_file: &std::path::Path) -> Peer {
        let bin = peer_binary();
        assert!(
            bin.exists(),
            "Prometheus is not installed at {}: run `.ci/peers/prometheus` (Debian bookworm's \
             prometheus 2.42.0+ds-5+deb12u1, unpacked into target/peers/) or set \
             SNAPBUS_PEER_PROMETHEUS",
            bin.display()
        );
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "prom-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("peer dir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: snapbus\n    authorization:\n      \
                 credentials_file: {}\n    static_configs:\n      - targets: [\"{target}\"]\n",
                token_file.display()
            ),
        )
        .expect("config");
        let port = free_port();
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).expect("log"))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let (tx, rx) = channel::<()>();
        let pid = child.id();
        std::thread::spawn(move || {
            if rx.recv_timeout(PEER_WATCHDOG).is_err() {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        });
        let peer = Peer {
            child,
            dir,
            api: format!("http://127.0.0.1:{port}"),
            watchdog: Some(tx),
        };
        wait_until("Prometheus is ready", WATCHDOG, || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
                && get(&format!("{}/-/ready", peer.api)).0 == 200
        });
        peer
    }

    /// `/api/v1/<what>?<query>`'s `data`.
    fn api(&self, what: &str, params: &[(&str, &str)]) -> Value {
        let q: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encode(v)))
            .collect();
        let (status, body) = get(&format!("{}/api/v1/{what}?{}", self.api, q.join("&")));
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("JSON: {body}"));
        assert_eq!(status, 200, "{what} {params:?}: {body}");
        assert_eq!(v["status"], "success", "{body}");
        v["data"].clone()
    }

    /// An instant query's result vector.
    fn query(&self, promql: &str) -> Vec<Value> {
        self.api("query", &[("query", promql)])["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.watchdog.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One series of a range query: its labels and its (timestamp ms, value) samples.
type Series = (BTreeMap<String, String>, Vec<(i64, f64)>);

/// The raw samples of the range-vector query `query`: per series (its metric labels) its
/// (timestamp ms, value) pairs.
fn samples(prom: &Peer, query: &str) -> Vec<Series> {
    prom.api("query", &[("query", query)])["result"]
        .as_array()
        .expect("a matrix")
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().expect("a label value").to_owned()))
                .collect();
            let values = s["values"]
                .as_array()
                .expect("values")
                .iter()
                .map(|p| {
                    let t = (p[0].as_f64().expect("time") * 1000.0).round() as i64;
                    (t, p[1].as_str().expect("value").parse().expect("number"))
                })
                .collect();
            (labels, values)
        })
        .collect()
}

/// Attaches the exporter with `args` on a free port; its URL.
fn attach_exporter(bus: &TestBus, args: &[&str]) -> String {
    let mut a = vec!["attach", "prometheus", "--port", "0"];
    a.extend_from_slice(args);
    let url = bus.attach(&a);
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/metrics"),
        "{url}"
    );
    url
}

#[test]
fn prometheus_scrapes_the_demo_values_its_summaries_and_the_bus_health() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("40");
    let out = bus.run(&["attach", "aggregator", "--schema", "demo.step"]);
    assert!(out.status.success(), "attach aggregator: {}", out.stderr);
    let url = attach_exporter(&bus, &["--schema", "demo.*"]);
    let target = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned();
    let prom = Peer::start(&target, &token_file(&bus));

    // At least three scrapes with demo.step values and one with an episode summary.
    wait_until(
        "Prometheus holds 3 scrapes of the demo and a summary",
        WATCHDOG,
        || {
            let r = prom.query("count_over_time(demo_step_reward[1m])");
            let s = prom.query("demo_step_summary_reward{stat=\"mean\",window=\"episode\"}");
            r.first()
                .and_then(|v| v["value"][1].as_str())
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n >= 3)
                && !s.is_empty()
        },
    );

    check_demo_values(&prom);
    check_summaries(&prom);
    check_labels(&prom);
    check_health(&prom, demo.pid());
}

/// Every scrape: the reward is the formula's for the episode and step of the same scrape.
fn check_demo_values(prom: &Peer) {
    let raw = samples(prom, "{__name__=~\"demo_step_(episode|step|reward)\"}[1m]");
    assert_eq!(raw.len(), 3, "one series per field: {raw:?}");
    let mut by_time: BTreeMap<i64, BTreeMap<String, f64>> = BTreeMap::new();
    for (labels, values) in &raw {
        for (t, v) in values {
            by_time
                .entry(*t)
                .or_default()
                .insert(labels["__name__"].clone(), *v);
        }
    }
    let mut pairs = BTreeSet::new();
    for (t, m) in &by_time {
        assert_eq!(m.len(), 3, "scrape at {t} ms lacks a field: {m:?}");
        let (e, s) = (m["demo_step_episode"], m["demo_step_step"]);
        assert_eq!(
            m["demo_step_reward"],
            reward(e as u64, s as u64),
            "scrape at {t} ms: {m:?}"
        );
        pairs.insert((e as u64, s as u64));
    }
    assert!(pairs.len() >= 2, "the values did not move: {pairs:?}");
    // The same, computed by PromQL from one instant: zero.
    let diff = prom.query(
        "demo_step_reward - (((31 * demo_step_episode + 17 * demo_step_step) % 11) / 10 - 0.5)",
    );
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert_eq!(diff[0]["value"][1], "0", "{diff:?}");
}

/// An episode summary: its mean reward is the mean of that episode's rewards (10 steps).
fn check_summaries(prom: &Peer) {
    let raw = samples(
        prom,
        "{__name__=~\"demo_step_summary_(reward|index)\",window=\"episode\",\
         stat=~\"mean|\"}[1m]",
    );
    let series = |name: &str| {
        raw.iter()
            .find(|(l, _)| l["__name__"] == name)
            .unwrap_or_else(|| panic!("no {name}: {raw:?}"))
    };
    let (index, mean) = (
        series("demo_step_summary_index"),
        series("demo_step_summary_reward"),
    );
    assert_eq!(mean.0["stat"], "mean");
    for ((t, e), (t2, m)) in index.1.iter().zip(&mean.1) {
        assert_eq!(t, t2);
        let want = (0..10).map(|s| reward(*e as u64, s)).sum::<f64>() / 10.0;
        assert!(
            (m - want).abs() < 1e-12,
            "episode {e}: mean {m}, want {want}"
        );
    }
}

/// Bounded labels only: never episode or step (the pid tells same-named producers apart).
fn check_labels(prom: &Peer) {
    let allowed = [
        "__name__",
        "instance",
        "job",
        "producer",
        "pid",
        "schema",
        "session_tag",
        "perf_tag",
        "window",
        "stat",
    ];
    let all = prom.api("series", &[("match[]", "{__name__=~\"demo_.+\"}")]);
    let all = all.as_array().expect("series");
    assert!(all.len() > 20, "{all:?}");
    for s in all {
        for k in s.as_object().expect("labels").keys() {
            assert!(allowed.contains(&k.as_str()), "label {k} in {s}");
        }
        assert_eq!(s["producer"], "demo", "{s}");
    }
}

/// The bus's health: the demo's records rise; the exporter's own board is there.
fn check_health(prom: &Peer, demo_pid: u32) {
    let pid = demo_pid.to_string();
    let q = format!("snapbus_producer_records_total{{producer=\"demo\",pid=\"{pid}\"}}[1m]");
    // Awaited: the health series come from a copy of the broker's state refreshed every 2 s,
    // so on a loaded machine the first scrapes may not hold them yet.
    wait_until(
        "the demo's record count rises over three scrapes",
        WATCHDOG,
        || {
            let raw = samples(prom, &q);
            assert!(raw.len() <= 1, "{raw:?}");
            raw.first()
                .is_some_and(|(_, v)| v.len() >= 3 && v[v.len() - 1].1 > v[0].1)
        },
    );
    let scrapes = prom.query("snapbus_consumer_status{kind=\"prometheus\",key=\"scrapes\"}");
    assert_eq!(scrapes.len(), 1, "{scrapes:?}");
    let lag = prom.query("snapbus_consumer_lag_bytes{kind=\"aggregator\"}");
    assert_eq!(lag.len(), 1, "{lag:?}");
    let up = prom.query("up{job=\"snapbus\"}");
    assert_eq!(
        up[0]["value"][1],
        "1",
        "{up:?}; Prometheus log:\n{}",
        prom.log()
    );
}

/// Names of the demo's data series in a `/metrics` body.
fn demo_series(body: &str) -> Vec<&str> {
    body.lines().filter(|l| l.starts_with("demo_")).collect()
}

#[test]
fn the_series_cap_cuts_and_counts_and_an_ended_producers_series_expire() {
    let bus = TestBus::up();
    let mut demo = bus.spawn_demo("50");
    let full = attach_exporter(&bus, &[]);
    let capped = attach_exporter(&bus, &["--max-series", "5"]);
    let n = std::cell::Cell::new(0usize);
    wait_until(
        "the uncapped exporter has both demo schemas",
        WATCHDOG,
        || {
            let body = scrape(&bus, &full).1;
            n.set(demo_series(&body).len());
            body.contains("demo_episode_end_total_reward{") && body.contains("demo_step_reward{")
        },
    );
    let n = n.get();
    assert!(n > 5, "{n}");
    let cut = "snapbus_exporter_series_dropped_total{reason=\"cardinality\"}";
    wait_until("the capped exporter refused the rest", WATCHDOG, || {
        let body = scrape(&bus, &capped).1;
        sample(&body, cut) == Some((n - 5) as f64)
            && sample(&body, "snapbus_exporter_series") == Some(5.0)
            && demo_series(&body).len() == 5
    });
    // `ls` shows it on the board (sent about twice a second).
    wait_until("ls shows the capped exporter's board", WATCHDOG, || {
        bus.ls()["consumers"]
            .as_array()
            .expect("consumers")
            .iter()
            .filter(|c| c["info"]["kind"] == "prometheus")
            .any(|c| {
                c["board"]["dropped.cardinality"] == (n - 5) as u64
                    && c["board"]["series"] == 5
                    && c["board"]["state"] == "ok"
            })
    });

    // The producer dies: its series go once a scrape served their last values.
    demo.kill9();
    let expired = "snapbus_exporter_series_expired_total{reason=\"producer_end\"}";
    wait_until("the dead demo's series expired", WATCHDOG, || {
        let body = scrape(&bus, &full).1;
        demo_series(&body).is_empty() && sample(&body, expired) == Some(n as f64)
    });
    let body = scrape(&bus, &full).1;
    assert_eq!(
        sample(&body, "snapbus_exporter_series"),
        Some(0.0),
        "{body}"
    );
}

#[test]
fn bad_arguments_and_a_port_in_use_fail_clearly() {
    let bus = TestBus::up();
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    for verb in [&["attach", "prometheus"][..], &["prometheus"][..]] {
        let mut a = verb.to_vec();
        a.extend(["--port", &port]);
        let out = bus.run(&a);
        assert!(!out.status.success(), "{a:?} succeeded on a port in use");
        assert!(
            out.stderr
                .contains(&format!("cannot serve /metrics on 127.0.0.1:{port}"))
                && out.stderr.contains("in use"),
            "{a:?}: {}",
            out.stderr
        );
    }
    let out = bus.run(&["prometheus", "--listen", "localhost"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    out.assert_stderr_has("--listen");
    // --port sets the port of --listen's address.
    let out = bus.run(&["prometheus", "--listen", "127.0.0.1:1", "--port", &port]);
    assert!(!out.status.success());
    assert!(
        out.stderr
            .contains(&format!("cannot serve /metrics on 127.0.0.1:{port}")),
        "{}",
        out.stderr
    );
    let out = bus.run(&["attach", "prometheus", "--max-series", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    let out = bus.run(&["attach", "prometheus", "--series-ttl", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    let out = bus.run(&["prometheus", "--port", "0", "--bus", "no-such-bus"]);
    assert!(!out.status.success());
    out.assert_stderr_has("no bus 'no-such-bus'");
    // Nothing was left attached.
    let ls = bus.ls();
    assert!(
        !ls["consumers"]
            .as_array()
            .expect("consumers")
            .iter()
            .any(|c| c["info"]["kind"] == "prometheus"),
        "{ls}"
    );
}

/// `/metrics` answers only requests with the bus's token (401 without, 403 with a wrong one),
/// like the plotter: every local user can reach 127.0.0.1. The token file is the bus's,
/// private, shared by its exporters, and `attach` names it with the scrape config.
#[test]
fn metrics_need_the_token_attach_names_its_file() {
    use std::os::unix::fs::PermissionsExt;
    let bus = TestBus::up();
    let out = bus.run(&["attach", "prometheus", "--port", "0"]);
    assert!(out.status.success(), "{}", out.stderr);
    let url = out.stdout.trim().to_owned();
    let file = token_file(&bus);
    out.assert_stderr_has(&format!("credentials_file: {}", file.display()));
    let mode = std::fs::metadata(&file)
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let token = std::fs::read_to_string(&file).expect("token");
    assert_eq!(token.trim().len(), 32, "{token}");

    let (status, body) = get(&url);
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains("snapbus_"), "{body}");
    let (status, body) = scrape_with(&url, "Authorization: Bearer 0000000000000000\r\n");
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("snapbus_"), "{body}");
    let (status, body) = scrape(&bus, &url);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("snapbus_bus_up"), "{body:.400}");

    // A second exporter of the bus takes the same token.
    let other = attach_exporter(&bus, &[]);
    assert_eq!(scrape(&bus, &other).0, 200);
    assert_eq!(std::fs::read_to_string(&file).expect("token"), token);

    // A token file every user can read is refused before anything starts.
    let open = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("open-token-{}", std::process::id()));
    std::fs::write(&open, "0123456789abcdef0123\n").expect("write");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let arg = format!("--token-file={}", open.display());
    let out = bus.run(&["attach", "prometheus", "--port", "0", &arg]);
    let _ = std::fs::remove_file(&open);
    assert!(!out.status.success(), "{}", out.stdout);
    out.assert_stderr_has("mode 644");
}

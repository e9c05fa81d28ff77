//! In-process tests of the exporter: records fed to its hooks directly, `/metrics` read over
//! real TCP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use snapbus_schemas::{DType, Field, SchemaDescriptor, Value, encode_value};

use super::*;
use crate::{Producer, RecordHeader};

fn schema(id: &str, fields: &[&str]) -> Arc<SchemaDescriptor> {
    let fields = fields
        .iter()
        .map(|f| Field::new(*f, DType::F64.into()))
        .collect::<Vec<_>>();
    Arc::new(SchemaDescriptor::new(id, 1, fields.into()).expect("schema"))
}

fn payload(s: &SchemaDescriptor, values: &[f64]) -> Vec<u8> {
    let fields = s.root().fields();
    let v = Value::Struct(
        fields
            .iter()
            .zip(values)
            .map(|(f, x)| (f.name.clone().into(), Value::F64(*x)))
            .collect(),
    );
    let mut out = Vec::new();
    encode_value(s.root(), &v, &mut out).expect("encode");
    out
}

fn producer(name: &str, lane_id: u64) -> Producer<'_> {
    Producer {
        pid: 1,
        name,
        cmdline: &[],
        session_tag: Some("run1"),
        perf_tag: None,
        lane_id,
        started_nanos: 0,
        relayed: false,
    }
}

/// Feeds one record of `s` with `values` from `p`.
/// Hands `e` a record of `s` from `p` with `payload` (copied, at seq 0, time 0).
fn send(e: &mut Exporter, p: Producer<'_>, s: &Arc<SchemaDescriptor>, payload: &[u8]) {
    let r = Record {
        producer_id: 1,
        producer: p,
        schema: s,
        emitter: None,
        header: RecordHeader {
            seq: 0,
            t_nanos: 0,
            level: snapbus_bus::Level::INFO,
            schema_key: 1,
            schema_version: 1,
            emitter_id: 0,
            payload_len: payload.len(),
        },
        payload,
        extracted: None,
    };
    e.on_event(&r).expect("on_event");
}

fn feed(e: &mut Exporter, p: Producer<'_>, s: &Arc<SchemaDescriptor>, values: &[f64]) {
    send(e, p, s, &payload(s, values));
}

/// The token the tests' exporters take.
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// An exporter with the default options, serving on a free local port.
fn serving() -> (Exporter, Server) {
    let e = Exporter::new(PrometheusOptions::default());
    let server = e
        .serve("127.0.0.1:0".parse().expect("addr"), None, TOKEN.into())
        .expect("serve");
    (e, server)
}

/// `GET /metrics` with the token: status and body.
fn scrape(addr: SocketAddr) -> (u16, String) {
    let (status, _, body) = request(addr, &format!("Authorization: Bearer {TOKEN}\r\n"));
    (status, body)
}

/// `GET /metrics` with the header lines `headers`: status, head and body.
fn request(addr: SocketAddr, headers: &str) -> (u16, String, String) {
    request_with(addr, "GET", headers)
}

/// `METHOD /metrics` with the header lines `headers`: status, head and body.
fn request_with(addr: SocketAddr, method: &str, headers: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(format!("{method} /metrics HTTP/1.0\r\n{headers}\r\n").as_bytes())
        .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head.split_whitespace().nth(1).expect("status");
    (
        status.parse().expect("a code"),
        head.to_owned(),
        body.to_owned(),
    )
}

#[test]
fn metrics_need_the_bearer_token() {
    let (_e, server) = serving();
    let (status, head, body) = request(server.addr(), "");
    assert_eq!(status, 401, "{body}");
    assert!(
        head.contains("WWW-Authenticate: Bearer realm=\"snapbus\""),
        "{head}"
    );
    assert!(!body.contains("snapbus_"), "{body}");
    for wrong in [
        "Authorization: Bearer 0123456789abcdef0123456789abcdee\r\n".to_owned(),
        format!("Authorization: Basic {TOKEN}\r\n"),
        "Authorization: Bearer\r\n".to_owned(),
    ] {
        let (status, _, body) = request(server.addr(), &wrong);
        assert_eq!(status, 403, "{wrong}: {body}");
        assert!(!body.contains("snapbus_"), "{body}");
    }
    let (status, _, body) = request(
        server.addr(),
        &format!("Host: x\r\nauthorization:  bearer {TOKEN}\r\n"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("snapbus_exporter_scrapes_total"),
        "{body:.300}"
    );
}

/// `HEAD /metrics` answers the scrape's head without its body; other methods are 405 with
/// `Allow`; a field whose name ends with a unit has OpenMetrics' `# UNIT` line.
#[test]
fn head_is_served_other_methods_refused_and_units_declared() {
    let (mut e, server) = serving();
    let s = schema("lab.step", &["latency_ms", "reward"]);
    feed(&mut e, producer("trainer", 7), &s, &[2.5, 1.0]);
    e.flush().expect("flush");
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let (status, head, body) = request_with(server.addr(), "HEAD", &auth);
    assert_eq!(status, 200, "{head}");
    assert!(body.is_empty(), "a HEAD has no body: {body:.200}");
    assert!(head.contains(CONTENT_TYPE), "{head}");
    let (status, head, _) = request_with(server.addr(), "POST", &auth);
    assert_eq!(status, 405, "{head}");
    assert!(head.contains("Allow: GET, HEAD"), "{head}");
    let (status, _, body) = request_with(server.addr(), "HEAD", "");
    assert_eq!(
        (status, body.as_str()),
        (401, ""),
        "HEAD needs the token too"
    );
    let (_, body) = scrape(server.addr());
    let lines: Vec<&str> = body.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == "# TYPE lab_step_latency_ms gauge")
        .unwrap_or_else(|| panic!("no latency family: {body}"));
    assert_eq!(lines[at + 1..at + 3].len(), 2);
    assert!(
        lines[at - 1..at + 3].contains(&"# UNIT lab_step_latency_ms ms"),
        "{body}"
    );
    assert!(
        body.contains("lab_step_latency_ms{producer=\"trainer\""),
        "{body}"
    );
    assert!(
        !body.contains("# UNIT lab_step_reward"),
        "no unit where the name says none: {body}"
    );
}

#[test]
fn a_scrape_is_answered_from_the_last_snapshot_while_the_reader_is_busy() {
    let (mut e, server) = serving();
    let s = schema("lab.step", &["reward", "loss"]);
    e.on_producer(ProducerChange::Joined(producer("trainer", 7)))
        .expect("join");
    feed(&mut e, producer("trainer", 7), &s, &[0.25, 3.0]);
    e.flush().expect("flush");
    feed(&mut e, producer("trainer", 7), &s, &[0.5, 2.0]);
    // The reader is now busy (a hook that takes its time): it holds the exporter and does not
    // publish until told to.
    let (go, wait) = channel::<()>();
    let reader = std::thread::spawn(move || {
        wait.recv().expect("go");
        e.flush().expect("flush");
        e
    });
    // Answered (within the scrape's read timeout) while the reader holds the exporter.
    let (status, body) = scrape(server.addr());
    assert_eq!(status, 200);
    let want = "lab_step_reward{producer=\"trainer\",schema=\"lab.step\",pid=\"1\",\
                session_tag=\"run1\"} 0.25";
    assert!(body.contains(want), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(
        body.contains("snapbus_bus_up 0"),
        "no bus was given: {body}"
    );
    go.send(()).expect("go");
    let e = reader.join().expect("reader");
    let (_, body) = scrape(server.addr());
    assert!(body.contains(&want.replace("0.25", "0.5")), "{body}");
    assert!(body.contains("snapbus_exporter_scrapes_total 2"), "{body}");
    assert!(body.contains("snapbus_exporter_records_total 2"), "{body}");
    assert_eq!(e.counters().series, 2);
    // The reader's flush after the first scrape put its age on the board.
    assert!(
        matches!(e.board().get("last_scrape_secs"), Some(StatusValue::Number(x)) if x < 5.0),
        "{:?}",
        e.board().entries()
    );
}

#[test]
fn clients_that_never_send_or_never_read_do_not_stall_the_reader_or_the_endpoint() {
    let (mut e, server) = serving();
    // 5000 series: a response far larger than a socket buffer.
    let fields: Vec<String> = (0..500).map(|i| format!("f{i}")).collect();
    let names: Vec<&str> = fields.iter().map(String::as_str).collect();
    let s = schema("wide", &names);
    let values: Vec<f64> = (0..500).map(f64::from).collect();
    let producers: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    for (i, p) in producers.iter().enumerate() {
        feed(&mut e, producer(p, i as u64), &s, &values);
    }
    e.flush().expect("flush");
    assert_eq!(e.counters().series, 5000);
    // Clients that never finish a request take no request thread (`tiny_http` reads heads on
    // its own); clients that ask (many requests on one connection, each a response far larger
    // than a socket buffer) and never read each hold one until they go.
    let mut stalled: Vec<TcpStream> = (0..MAX_REQUESTS)
        .map(|_| TcpStream::connect(server.addr()).expect("connect"))
        .collect();
    let ask = format!("GET /metrics HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n");
    for _ in 0..MAX_REQUESTS {
        let mut c = TcpStream::connect(server.addr()).expect("connect");
        c.write_all(ask.repeat(50).as_bytes()).expect("write");
        stalled.push(c);
    }
    // The next scraper is told at once that the endpoint is busy (a hang fails the scrape's
    // read timeout) — once every request thread is taken, which it awaits.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _) = scrape(server.addr());
        if status == 503 {
            break;
        }
        assert_eq!(status, 200, "a scrape before the threads were all taken");
        assert!(
            Instant::now() < deadline,
            "the request threads were never all taken"
        );
    }
    // The reader goes on, publishing as usual.
    for _ in 0..20 {
        for (i, p) in producers.iter().enumerate() {
            feed(&mut e, producer(p, i as u64), &s, &values);
        }
        e.flush().expect("flush");
    }
    drop(stalled);
    // Once they are gone, scrapes are served again, with what the reader published.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = scrape(server.addr());
        if status == 200 {
            assert!(
                body.contains("snapbus_exporter_records_total 210"),
                "{body:.400}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "still {status}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn malformed_payloads_are_counted_not_exported() {
    let mut e = Exporter::new(PrometheusOptions::default());
    let s = schema("lab.step", &["reward"]);
    send(&mut e, producer("trainer", 1), &s, &[1, 2, 3]);
    e.flush().expect("flush");
    assert_eq!(e.board().get("malformed"), Some(StatusValue::Count(1)));
    assert_eq!(e.board().get("last_scrape_secs"), None, "never scraped");
    // No series for a schema none of whose records decoded (not a NaN one).
    assert_eq!(e.counters().series, 0);
}

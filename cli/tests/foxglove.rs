//! Foxglove, live and on file, checked by Foxglove's own libraries (which know nothing of
//! snapbus; `foxglove/check_foxglove.mjs`): `attach foxglove` on a running demo, read by the
//! `@foxglove/ws-protocol` client; a recording's `export --format foxglove`, read by
//! `@mcap/core`. Numbers and images are compared with the demo's formulas (`snapbus demo
//! --help`).
//!
//! Needs Node.js and `npm ci --prefix cli/tests/foxglove`; without them the tests are skipped,
//! unless `CI=true` or `SNAPBUS_REQUIRE_BROWSER=1` makes that a failure.

use std::path::PathBuf;

use serde_json::Value;

use crate::bus::TestBus;
use crate::util::{run_cmd, runtime_root};

fn package_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/foxglove")
}

/// Runs `check_foxglove.mjs` with `args`; its JSON line (`None`: skipped, no Node.js or no
/// packages here, outside CI).
fn foxglove_check(args: &[&str]) -> Option<Value> {
    let missing = if !package_dir()
        .join("node_modules/@foxglove/ws-protocol")
        .exists()
    {
        Some("@foxglove/ws-protocol is not installed (npm ci --prefix cli/tests/foxglove)")
    } else if !std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        Some("no node")
    } else {
        None
    };
    let required = std::env::var("CI").as_deref() == Ok("true")
        || std::env::var("SNAPBUS_REQUIRE_BROWSER").as_deref() == Ok("1");
    match missing {
        Some(why) if required => panic!("CI=true but {why}"),
        Some(why) => {
            eprintln!("skipping the Foxglove check: {why}");
            None
        }
        None => {
            let mut cmd = std::process::Command::new("node");
            cmd.arg(package_dir().join("check_foxglove.mjs")).args(args);
            let out = run_cmd(&mut cmd);
            assert!(
                out.status.success(),
                "Foxglove check failed:\n{}\n{}",
                out.stdout,
                out.stderr
            );
            Some(serde_json::from_str(out.stdout.trim()).expect("the check's JSON"))
        }
    }
}

/// The demo's formulas.
fn reward(e: u64, s: u64) -> f64 {
    ((31 * e + 17 * s) % 11) as f64 / 10.0 - 0.5
}

fn pixel(x: u64, y: u64, e: u64, s: u64) -> u64 {
    (x + 2 * y + 3 * s + 5 * e) % 256
}

/// The channel of `topic`, as (message encoding, schema name, schema encoding).
fn channel<'a>(got: &'a Value, topic: &str) -> (&'a str, &'a str, &'a str) {
    let c = got["channels"]
        .as_array()
        .expect("channels")
        .iter()
        .find(|c| c["topic"] == topic)
        .unwrap_or_else(|| panic!("no channel {topic}: {}", got["channels"]));
    let s = |k: &str| c[k].as_str().unwrap_or_default();
    (s("encoding"), s("schemaName"), s("schemaEncoding"))
}

/// Checks what a Foxglove library decoded from the demo (8 × 6 images): every step's numbers
/// and every image against the formulas, each image matched to its step by time. Returns
/// (steps, images) checked.
fn check_demo(got: &Value) -> (usize, usize) {
    assert_eq!(
        channel(got, "/demo/step"),
        ("json", "demo.step", "jsonschema")
    );
    assert_eq!(
        channel(got, "/demo/step/observation"),
        ("json", "foxglove.RawImage", "jsonschema")
    );
    let mut step_at = std::collections::HashMap::new();
    let steps = got["messages"]["/demo/step"].as_array().expect("steps");
    for m in steps {
        let p = &m["message"];
        let (e, s) = (
            p["episode"].as_u64().expect("e"),
            p["step"].as_u64().expect("s"),
        );
        assert_eq!(p["reward"].as_f64(), Some(reward(e, s)), "{m}");
        let position = [s as f64 * 0.5, e as f64, (s % 8) as f64 - 4.0];
        let got: Vec<f64> = p["position"]
            .as_array()
            .expect("position")
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        assert_eq!(got, position, "{m}");
        assert_eq!(p["mode"], if e % 4 == 3 { "Eval" } else { "Train" });
        step_at.insert(m["t"].as_str().expect("t").to_owned(), (e, s));
    }
    let images = got["messages"]["/demo/step/observation"]
        .as_array()
        .expect("images");
    for m in images {
        let (e, s) = step_at[m["t"].as_str().expect("t")];
        let im = &m["message"];
        assert_eq!(
            (&im["width"], &im["height"], &im["encoding"], &im["step"]),
            (&8.into(), &6.into(), &"mono8".into(), &8.into()),
            "{im}"
        );
        let want: Vec<u64> = (0..6)
            .flat_map(|y| (0..8).map(move |x| pixel(x, y, e, s)))
            .collect();
        assert_eq!(im["data"], serde_json::json!(want), "episode {e} step {s}");
        let t: u64 = m["t"].as_str().expect("t").parse().expect("t");
        let stamp = &im["timestamp"];
        assert_eq!(
            (stamp["sec"].as_u64(), stamp["nsec"].as_u64()),
            (Some(t / 1_000_000_000), Some(t % 1_000_000_000))
        );
    }
    (steps.len(), images.len())
}

/// The status of a WebSocket upgrade request for `target` on `addr`.
fn upgrade_status(addr: &str, target: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: foxglove.websocket.v1\r\n\r\n"
    )
    .expect("write");
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("a status line");
    String::from_utf8_lossy(&head[9..12])
        .parse()
        .expect("a status")
}

#[test]
fn foxglove_s_client_reads_the_live_demo_with_its_history() {
    let bus = TestBus::up();
    let mut demo = bus.spawn_demo("200");
    // Records already in the ring when the bridge starts, and more before a client connects.
    // History enough for the whole run so far however slow this machine is.
    let out = bus.run(&["attach", "foxglove", "--port", "0", "--history", "1000000"]);
    assert!(out.status.success(), "attach: {}", out.stderr);
    let url = out.stdout.trim().to_owned();
    assert!(
        url.starts_with("ws://127.0.0.1:") && url.contains("/?token="),
        "{url}"
    );
    let bridge = bus.ls()["consumers"]
        .as_array()
        .expect("consumers")
        .iter()
        .find(|c| c["info"]["kind"] == "foxglove")
        .cloned()
        .expect("the bridge in ls");
    assert_eq!(bridge["status"], "running", "{bridge}");

    if let Some(got) = foxglove_check(&["live", &url, "40"]) {
        let (steps, images) = check_demo(&got);
        assert!(
            steps >= 40 && images >= 40,
            "{steps} steps, {images} images"
        );
        // A late client first gets the history the bridge holds: records older than it.
        let connected: u64 = got["connected"].as_str().expect("t").parse().expect("t");
        let first: u64 = got["messages"]["/demo/step"][0]["t"]
            .as_str()
            .expect("t")
            .parse()
            .expect("t");
        assert!(first < connected, "no history: {first} >= {connected}");
        assert_eq!(got["messages"]["/demo/step"][0]["message"]["episode"], 0);
        assert_eq!(got["messages"]["/demo/step"][0]["message"]["step"], 0);
        // The summaries of the aggregator the demo attaches are not there (--no-echo): one
        // channel per schema seen, each advertised once.
        let topics: Vec<&str> = got["channels"]
            .as_array()
            .expect("channels")
            .iter()
            .filter_map(|c| c["topic"].as_str())
            .collect();
        let mut unique = topics.clone();
        unique.dedup();
        assert_eq!(topics.len(), unique.len(), "{topics:?}");
    }

    // Without the token (another user of the machine): refused; with it, upgraded.
    let rest = url.trim_start_matches("ws://");
    let (addr, query) = rest.split_once('/').expect("a path");
    assert_eq!(upgrade_status(addr, "/"), 403);
    assert_eq!(upgrade_status(addr, "/?token=wrong"), 403);
    assert_eq!(upgrade_status(addr, &format!("/{query}")), 101);
    demo.kill9();
}

#[test]
fn a_recording_exported_for_foxglove_decodes_with_foxglove_s_mcap_reader() {
    let bus = TestBus::up();
    bus.demo(3, 5, 0, &[]);
    let rec = runtime_root().join("foxglove-rec.mcap");
    let out = bus.run(&["snapshot", "-o", rec.to_str().expect("utf-8"), "--force"]);
    assert!(out.status.success(), "snapshot: {}", out.stderr);
    let fox = runtime_root().join("foxglove-export.mcap");
    let out = crate::export::export(&rec, "foxglove", &fox, &["--force"]);
    assert!(out.status.success(), "export: {}", out.stderr);
    if let Some(got) = foxglove_check(&["mcap", fox.to_str().expect("utf-8")]) {
        assert_eq!(check_demo(&got), (15, 15));
        // Every channel: JSON with a JSON Schema (no snapbus encoding left).
        for c in got["channels"].as_array().expect("channels") {
            assert_eq!(
                (&c["encoding"], &c["schemaEncoding"]),
                (&"json".into(), &"jsonschema".into()),
                "{c}"
            );
        }
        let ends = got["messages"]["/demo/episode_end"]
            .as_array()
            .expect("ends");
        assert_eq!(ends.len(), 3);
        for (e, m) in ends.iter().enumerate() {
            let total: f64 = (0..5).map(|s| reward(e as u64, s)).sum();
            assert_eq!(m["message"]["total_reward"].as_f64(), Some(total), "{m}");
        }
    }
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let bus = TestBus::up();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let out = bus.run(&["foxglove", "--port", &port]);
    assert!(!out.status.success());
    out.assert_stderr_has("is the port in use");
    let out = bus.run(&["attach", "foxglove", "--port", &port, "--restart", "never"]);
    assert!(!out.status.success());
    out.assert_stderr_has("is the port in use");
}

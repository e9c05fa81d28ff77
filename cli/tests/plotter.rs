//! The plotter end to end with the real binary: `attach plotter` on a running demo prints a
//! URL that serves the page; headless Chromium (driven by `browser/check_plotter.mjs`, with
//! playwright-core) finds data points in the plots and a frame in the image view; detaching
//! the plotter leaves the experiment running.
//!
//! The browser part needs Node.js, `npm ci --prefix cli/tests/browser` and Chromium
//! (`/usr/bin/chromium`, or `$SNAPBUS_CHROMIUM`); without them it is skipped, unless
//! `SNAPBUS_REQUIRE_BROWSER=1` (CI) makes that a failure.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, run_cmd, runtime_root};

/// `GET path` on the plotter of `url` (`http://ADDR/?token=T`), with its token.
fn get(url: &str, path: &str) -> (u16, String) {
    let rest = url.trim_start_matches("http://");
    let (addr, token) = rest.split_once("/?token=").expect("a URL with a token");
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {path}{sep}token={token} HTTP/1.0\r\nHost: t\r\n\r\n"
    )
    .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (status, body.to_owned())
}

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Why the browser check cannot run here, if it cannot.
fn browser_missing() -> Option<String> {
    let chromium = std::env::var("SNAPBUS_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !std::path::Path::new(&chromium).exists() {
        return Some(format!("no Chromium at {chromium}"));
    }
    if !browser_dir().join("node_modules/playwright-core").exists() {
        return Some("playwright-core is not installed (npm ci --prefix cli/tests/browser)".into());
    }
    match std::process::Command::new("node").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("no node".into()),
    }
}

#[test]
fn attach_plotter_serves_a_page_that_plots_a_running_demo_and_detaching_leaves_it_running() {
    let bus = TestBus::up();
    let mut demo = bus.spawn_demo("100");
    let demo_pid = demo.pid();
    let out = bus.run(&["attach", "plotter", "--schema", "demo.*"]);
    assert!(out.status.success(), "attach: {}", out.stderr);
    let url = out.stdout.trim().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.contains("/?token="),
        "{url}"
    );
    let plotter = bus.ls()["consumers"]
        .as_array()
        .expect("consumers")
        .iter()
        .find(|c| c["info"]["kind"] == "plotter")
        .cloned()
        .expect("the plotter in ls");
    let id = plotter["id"].to_string();

    // The page and its own files (no CDN), and the history already in the ring.
    let (status, html) = get(&url, "/");
    assert_eq!(status, 200);
    assert!(
        !html.contains("https://") && !html.contains("http://"),
        "external URLs: {html}"
    );
    wait_until("the plotter has demo points", WATCHDOG, || {
        let (_, body) = get(&url, "/api/series");
        let v: Value = serde_json::from_str(&body).expect("JSON");
        v["series"].as_array().is_some_and(|s| {
            s.iter()
                .any(|s| s["field"] == "reward" && s["points"].as_u64() > Some(5))
        }) && v["images"][0]["seq"].is_u64()
    });

    match browser_missing() {
        Some(why) if std::env::var("SNAPBUS_REQUIRE_BROWSER").as_deref() != Ok("1") => {
            eprintln!("skipping the browser check: {why}");
        }
        Some(why) => panic!("SNAPBUS_REQUIRE_BROWSER=1 but {why}"),
        None => {
            let shot = runtime_root().join("plotter-screenshot.png");
            let _ = std::fs::remove_file(&shot);
            let mut cmd = std::process::Command::new("node");
            cmd.arg(browser_dir().join("check_plotter.mjs"))
                .arg(&url)
                .arg(&shot);
            let out = run_cmd(&mut cmd);
            assert!(
                out.status.success(),
                "browser check failed:\n{}\n{}",
                out.stdout,
                out.stderr
            );
            let state: Value = serde_json::from_str(out.stdout.trim()).expect("the page's state");
            assert!(state["points"].as_u64() > Some(0), "{state}");
            assert!(state["frames"].as_u64() > Some(0), "{state}");
            assert!(state["plotted"].as_u64() > Some(0), "{state}");
            assert!(shot.exists(), "no screenshot");
            // Kept for CI's log (and a human): where the picture of the page is.
            let kept = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plotter-screenshot.png");
            std::fs::copy(&shot, &kept).expect("keep the screenshot");
            println!("plotter screenshot: {}", kept.display());
            eprintln!("plotter screenshot: {}", kept.display());
        }
    }

    // Detaching the plotter: the experiment runs on, still live, still emitting (a new echo
    // from the latest record receives new steps).
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "{}", out.stderr);
    let out = bus.run(&["echo", "demo.step", "--count", "5"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 5);
    assert_eq!(bus.producer(demo_pid).expect("demo")["status"], "live");
    demo.kill9();
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let bus = TestBus::up();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let out = bus.run(&["plot", "--port", &port]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("is the port in use"), "{}", out.stderr);
    let out = bus.run(&["attach", "plotter", "--port", &port, "--restart", "never"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("is the port in use"), "{}", out.stderr);
}

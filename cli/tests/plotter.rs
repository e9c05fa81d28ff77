//! The plotter end to end with the real binary: `attach plotter` on a running demo prints a
//! URL that serves the page; headless Chromium (driven by `browser/check_plotter.mjs`, with
//! playwright-core) checks the default view (a panel per field, each with its own y scale,
//! against the demo's formulas; summaries collapsed; the image labelled with its run), takes
//! two screenshots (history drawn; live), and after the demo is restarted sees only the new
//! run; detaching the plotter leaves the experiment running.
//!
//! The browser part needs Node.js, `npm ci --prefix cli/tests/browser` and Chromium
//! (`/usr/bin/chromium`, or `$SNAPBUS_CHROMIUM`); without them it is skipped, unless
//! `SNAPBUS_REQUIRE_BROWSER=1` (CI) makes that a failure.

use std::path::PathBuf;

use serde_json::Value;

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, http_get, run_cmd, runtime_root};

/// `GET path` on the plotter of `url` (`http://ADDR/?token=T`), with its token.
fn get(url: &str, path: &str) -> (u16, String) {
    let rest = url.trim_start_matches("http://");
    let (addr, token) = rest.split_once("/?token=").expect("a URL with a token");
    let sep = if path.contains('?') { '&' } else { '?' };
    http_get(addr, &format!("{path}{sep}token={token}"))
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

/// Runs `check_plotter.mjs` with `args`; its JSON line (`None`: skipped, no browser here).
fn browser_check(args: &[&std::ffi::OsStr]) -> Option<Value> {
    match browser_missing() {
        Some(why) if std::env::var("SNAPBUS_REQUIRE_BROWSER").as_deref() != Ok("1") => {
            eprintln!("skipping the browser check: {why}");
            None
        }
        Some(why) => panic!("SNAPBUS_REQUIRE_BROWSER=1 but {why}"),
        None => {
            let mut cmd = std::process::Command::new("node");
            cmd.arg(browser_dir().join("check_plotter.mjs")).args(args);
            let out = run_cmd(&mut cmd);
            assert!(
                out.status.success(),
                "browser check failed:\n{}\n{}",
                out.stdout,
                out.stderr
            );
            Some(serde_json::from_str(out.stdout.trim()).expect("the page's state"))
        }
    }
}

/// The panel of `schema`'s `field` alone in the page's state (`window.snapbus.panels`).
fn panel<'a>(state: &'a Value, schema: &str, field: &str) -> &'a Value {
    state["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .find(|p| p["schemas"][0] == schema && p["fields"] == serde_json::json!([field]))
        .unwrap_or_else(|| panic!("no panel of {schema} {field} alone: {state}"))
}

/// A panel's (y axis min, max, data min, max).
fn y_range(p: &Value) -> (f64, f64, f64, f64) {
    let f = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k} in {p}"));
    (f("yMin"), f("yMax"), f("dataMin"), f("dataMax"))
}

/// The series of `/api/series` whose producer is `pid`, as (schema, field, points).
fn series_of(url: &str, pid: u32) -> Vec<(String, String, u64)> {
    let (_, body) = get(url, "/api/series");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    v["series"]
        .as_array()
        .expect("series")
        .iter()
        .filter(|s| s["pid"] == pid)
        .map(|s| {
            (
                s["schema"].as_str().unwrap_or_default().to_owned(),
                s["field"].as_str().unwrap_or_default().to_owned(),
                s["points"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn attach_plotter_serves_a_page_that_plots_a_running_demo_and_detaching_leaves_it_running() {
    let bus = TestBus::up();
    let mut demo = bus.spawn_demo("100");
    let demo_pid = demo.pid();
    // Summaries on the bus too (`demo.step.summary`, per episode): the page lists them apart.
    let out = bus.run(&["attach", "aggregator", "--schema", "demo.step"]);
    assert!(out.status.success(), "attach aggregator: {}", out.stderr);
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
    // A second of the demo (ten episodes: every reward value), a summary, a frame.
    wait_until(
        "the plotter has demo points and summaries",
        WATCHDOG,
        || {
            let (_, body) = get(&url, "/api/series");
            let v: Value = serde_json::from_str(&body).expect("JSON");
            let has = |schema: &str, field: &str, n: u64| {
                v["series"].as_array().is_some_and(|s| {
                    s.iter().any(|s| {
                        s["schema"] == schema
                            && s["field"] == field
                            && s["points"].as_u64() >= Some(n)
                    })
                })
            };
            has("demo.step", "reward", 100)
                && has("demo.episode_end", "episode", 2)
                && has("demo.step.summary", "stats.reward.mean", 1)
                && v["images"][0]["seq"].is_u64()
        },
    );

    let history_png = runtime_root().join("plotter-history.png");
    let live_png = runtime_root().join("plotter-live.png");
    let state = browser_check(&[url.as_ref(), history_png.as_ref(), live_png.as_ref()]);
    if let Some(state) = &state {
        // One y scale per panel: reward (the demo's formula: -0.5..=0.5 in steps of 0.1) on
        // its own axis, not squeezed flat by episode or step; step (0..=9) on another.
        for moment in ["history", "live"] {
            let s = &state[moment];
            let (lo, hi, dmin, dmax) = y_range(panel(s, "demo.step", "reward"));
            assert_eq!((dmin, dmax), (-0.5, 0.5), "{moment}: reward's data");
            assert!(
                lo >= -0.56 && hi <= 0.56,
                "{moment}: reward's y axis {lo}..{hi}"
            );
            let (lo, hi, dmin, dmax) = y_range(panel(s, "demo.step", "step"));
            assert_eq!((dmin, dmax), (0.0, 9.0), "{moment}: step's data");
            assert!(
                lo >= -0.5 && hi <= 9.5,
                "{moment}: step's y axis {lo}..{hi}"
            );
            let (_, hi, _, dmax) = y_range(panel(s, "demo.step", "episode"));
            assert!(dmax >= 10.0 && hi >= dmax, "{moment}: episode's y axis");
            assert_eq!(panel(s, "demo.step", "reward")["yLabel"], "reward");
            assert!(s["frames"].as_u64() > Some(0), "{s}");
            assert_eq!(s["images"][0]["pid"], demo_pid, "{s}");
        }
        assert!(state["history"]["sidebar"]["summaryRows"].as_u64() > Some(9));
        // Kept for CI's log (and a human): the pictures of the page.
        for png in [&history_png, &live_png] {
            let name = png.file_name().expect("a file name");
            let kept = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
            std::fs::copy(png, &kept).expect("keep the screenshot");
            println!("plotter screenshot: {}", kept.display());
            eprintln!("plotter screenshot: {}", kept.display());
        }
    }

    // A new run of the experiment: the old one's series and image are marked ended; a page
    // shows only the new run (its image labelled with its pid), the old one listed as ended.
    demo.kill9();
    wait_until("the killed demo's image is marked ended", WATCHDOG, || {
        let (_, body) = get(&url, "/api/series");
        let v: Value = serde_json::from_str(&body).expect("JSON");
        v["images"][0]["ended"].is_f64()
    });
    let mut demo = bus.spawn_demo("100");
    let demo_pid = demo.pid();
    wait_until("the new run's steps and episodes", WATCHDOG, || {
        let s = series_of(&url, demo_pid);
        ["demo.step", "demo.episode_end"]
            .iter()
            .all(|schema| s.iter().any(|(sc, _, n)| sc == schema && *n > 0))
    });
    let pid = demo_pid.to_string();
    if let Some(state) = browser_check(&["--new-run".as_ref(), pid.as_ref(), url.as_ref()]) {
        assert_eq!(state["run"]["images"][0]["pid"], demo_pid, "{state}");
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
    out.assert_stderr_has("is the port in use");
    let out = bus.run(&["attach", "plotter", "--port", &port, "--restart", "never"]);
    assert!(!out.status.success());
    out.assert_stderr_has("is the port in use");
}

/// A camera's observation, held in a list and a dict of a record (tbp.monty's `SensorObs`).
#[derive(snapbus_schemas::Wire, Debug, Clone, PartialEq)]
struct SensorObs {
    depth: f32,
    rgba: snapbus_schemas::Tensor<u8>,
}

#[derive(snapbus_schemas::Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "lab.obs", version = 1)]
struct Obs {
    sensors: Vec<SensorObs>,
    by_name: std::collections::BTreeMap<String, SensorObs>,
    cloud: snapbus_schemas::Tensor<f32>,
    profile: snapbus_schemas::Tensor<f64>,
}

/// Record `i`: cameras 1 and 2 in a list, 3 in a dict (RGBA 2 × 3, opaque, every colour byte
/// 10 * camera + i), a cloud of 4 points, a profile of 5 values.
fn obs(i: u8) -> Obs {
    use snapbus_schemas::Tensor;
    let cam = |c: u8| SensorObs {
        depth: f32::from(c),
        rgba: Tensor::new(
            vec![2, 3, 4],
            [10 * c + i, 10 * c + i, 10 * c + i, 255].repeat(6),
        )
        .expect("tensor"),
    };
    let cloud = (0..12).map(|k| k as f32 + f32::from(i)).collect();
    Obs {
        sensors: vec![cam(1), cam(2)],
        by_name: [("wrist".to_owned(), cam(3))].into_iter().collect(),
        cloud: Tensor::new(vec![4, 3], cloud).expect("tensor"),
        profile: Tensor::new(vec![5], (0..5).map(|k| f64::from(k * i)).collect()).expect("tensor"),
    }
}

#[test]
fn the_page_draws_images_in_lists_and_dicts_points_and_profiles() {
    let bus = TestBus::up();
    let p = crate::wide::publisher(&bus, "lab", 1 << 20);
    for i in 0..3 {
        p.emit(snapbus_bus::Level::INFO, 0, &obs(i)).expect("emit");
    }
    let out = bus.run(&["attach", "plotter", "--schema", "lab.*"]);
    assert!(out.status.success(), "attach: {}", out.stderr);
    let url = out.stdout.trim().to_owned();
    wait_until("five tensor views with frames", WATCHDOG, || {
        let (_, body) = get(&url, "/api/series");
        let v: Value = serde_json::from_str(&body).expect("JSON");
        v["images"]
            .as_array()
            .is_some_and(|i| i.len() == 5 && i.iter().all(|i| i["seq"].is_u64()))
    });
    let Some(state) = browser_check(&["--tensors".as_ref(), url.as_ref()]) else {
        return;
    };
    let cards = state["cards"].as_array().expect("cards");
    let card = |field: &str| {
        cards
            .iter()
            .find(|c| c["title"] == format!("lab.obs · {field}"))
            .unwrap_or_else(|| panic!("no card of {field}: {state}"))
    };
    let caption = |c: &Value| c["caption"].as_str().unwrap_or_default().to_owned();
    for (field, camera) in [
        ("sensors.0.rgba", 1),
        ("sensors.1.rgba", 2),
        ("by_name.wrist.rgba", 3),
    ] {
        let c = card(field);
        assert!(caption(c).starts_with("2×3×4 ·"), "{c}");
        let v = 10 * camera + 2;
        assert_eq!(c["first"], serde_json::json!([v, v, v, 255]), "{c}");
    }
    let cloud = card("cloud");
    assert!(caption(cloud).starts_with("4 points"), "{cloud}");
    assert!(cloud["ink"].as_u64() > Some(4), "points drawn: {cloud}");
    let profile = card("profile");
    assert!(caption(profile).starts_with("5 values"), "{profile}");
    assert!(
        profile["ink"].as_u64() > Some(100),
        "a line drawn: {profile}"
    );
    drop(p);
}

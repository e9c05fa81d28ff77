//! The plotter's HTTP API against a live bus: the series and their points, the data endpoint's
//! min/max envelope against a brute-force reference over the emitted values, frames, the
//! stream, and bad requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value as Json;
use snapbus_bus::Level;
use snapbus_bus::lane::StartAt;
use snapbus_bus::schemas::{Snapshot, Tensor};
use snapbus_consumers::plotter::{Plotter, PlotterOptions, Server, serve};
use snapbus_consumers::{RunOptions, RunSummary, run};

use crate::common::sensors;
use crate::runtime::Bus;

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "plot.step", version = 1, crate = "snapbus_bus::schemas")]
struct Step {
    loss: f64,
    pos: [f32; 2],
    image: Tensor<f32>,
}

fn step(i: u64) -> Step {
    let x = i as f64;
    Step {
        loss: (x * 0.37).sin() * 10.0 + (i % 17) as f64,
        pos: [x as f32 * 0.5, -(x as f32)],
        image: Tensor::new(vec![2, 2], vec![0.0, 1.0, 2.0, x as f32]).expect("tensor"),
    }
}

/// `GET path` → (status, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").expect("write");
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

/// Requests to a plotter, with its token.
struct Api {
    addr: SocketAddr,
    token: String,
}

impl Api {
    fn of(server: &Server) -> Api {
        Api {
            addr: server.addr(),
            token: server.token().to_owned(),
        }
    }

    fn get(&self, path: &str) -> (u16, String) {
        let sep = if path.contains('?') { '&' } else { '?' };
        get(self.addr, &format!("{path}{sep}token={}", self.token))
    }

    fn json(&self, path: &str) -> Json {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).expect("JSON")
    }
}

/// A plotter (4,000 points a series) serving on a free port, run over everything the bus's
/// producers wrote, to their lanes' end.
fn plot_to_the_end(bus: &Bus) -> (Server, Api, RunSummary) {
    let mut plotter = Plotter::new(PlotterOptions {
        history_points: 4000,
        max_frame_hz: 1000.0,
    });
    let server = serve(plotter.store(), 0).expect("serve");
    let api = Api::of(&server);
    let mut opts = RunOptions::new("plotter");
    opts.subscribe.start = StartAt::Oldest;
    opts.until_end = true;
    opts.handle_signals = false;
    let summary = run(bus.dir(), &opts, &mut plotter, None).expect("run");
    (server, api, summary)
}

/// The reference: every point's column computed on its own.
fn reference(xs: &[(f64, f64)], from: f64, to: f64, width: usize) -> Vec<(usize, f64, f64)> {
    let mut cols: std::collections::BTreeMap<usize, (f64, f64)> = Default::default();
    for &(x, v) in xs {
        if x < from || x > to {
            continue;
        }
        let c = (((x - from) / (to - from) * width as f64) as usize).min(width - 1);
        let e = cols.entry(c).or_insert((v, v));
        e.0 = e.0.min(v);
        e.1 = e.1.max(v);
    }
    cols.into_iter().map(|(c, (a, b))| (c, a, b)).collect()
}

#[test]
fn the_api_serves_series_envelopes_frames_and_a_stream() {
    let bus = Bus::start("plot-api");
    let p = bus.publisher();
    let n = 5000u64;
    for i in 0..n {
        p.emit(Level::INFO, 0, &step(i)).expect("emit");
    }
    p.close();
    let (server, api, summary) = plot_to_the_end(&bus);
    assert!(server.url().starts_with("http://127.0.0.1:"));
    assert!(
        server
            .url()
            .contains(&format!("/?token={}", server.token()))
    );
    assert_eq!(summary.delivered, n);

    // The page and its files.
    for (path, needle) in [("/", "<html"), ("/app.js", ""), ("/app.css", "")] {
        let (status, body) = api.get(path);
        assert_eq!(status, 200, "{path}");
        assert!(body.contains(needle), "{path}");
    }
    // The page's script is one file: its modules joined, with no import left to fetch.
    let (_, script) = api.get("/app.js");
    assert!(!script.contains("import "), "an import left in /app.js");
    assert!(!script.contains("\nexport "), "an export left in /app.js");
    for name in [
        "function drawPlot(",
        "function loadSeries(",
        "function reconnect(",
    ] {
        assert!(script.contains(name), "{name} missing from /app.js");
    }
    let series = api.json("/api/series");
    let fields: Vec<&str> = series["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| s["field"].as_str().expect("field"))
        .collect();
    assert_eq!(
        fields,
        [
            "loss",
            "pos.0",
            "pos.1",
            "image.mean",
            "image.min",
            "image.max"
        ]
    );
    let loss = &series["series"][0];
    // 4,000 points held of 5,000 samples: the oldest went.
    assert_eq!(
        (loss["points"].as_u64(), loss["samples"].as_u64()),
        (Some(4000), Some(n))
    );
    assert_eq!(series["images"][0]["field"], "image");
    // Each series and image names its run (pid, start) and, the producer having ended, when
    // it ended: a page never shows this run's last frame as a newer run's.
    for item in [&series["series"][0], &series["images"][0]] {
        assert_eq!(item["pid"], std::process::id(), "{item}");
        let started = item["started"].as_f64().expect("started");
        let ended = item["ended"].as_f64().expect("ended");
        assert!(started > 1.6e9 && ended >= started, "{item}");
    }
    assert_eq!(series["stats"]["records"], n);

    // Step axis: x = sample number; the held points are samples 1000..5000.
    let held: Vec<(f64, f64)> = (1000..n).map(|i| (i as f64, step(i).loss)).collect();
    for (from, to, width) in [
        (1000.0, 4999.0, 600),
        (1000.0, 4999.0, 1),
        (1234.5, 1300.25, 7),
        (4000.0, 9000.0, 4000),
        (0.0, 999.0, 50),
    ] {
        let d = api.json(&format!(
            "/api/data?ids=0&x=step&from={from}&to={to}&width={width}"
        ));
        let s = &d["series"][0];
        let got: Vec<(f64, f64, f64)> = s["columns"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| {
                (
                    c[0].as_f64().expect("x"),
                    c[1].as_f64().expect("min"),
                    c[2].as_f64().expect("max"),
                )
            })
            .collect();
        let want: Vec<(f64, f64, f64)> = reference(&held, from, to, width)
            .into_iter()
            .map(|(c, lo, hi)| (from + (to - from) * c as f64 / width as f64, lo, hi))
            .collect();
        // serde_json parses floats to within an ulp: compare with a tolerance.
        assert_eq!(
            got.len(),
            want.len(),
            "[{from}, {to}] / {width}: column count"
        );
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        if let Some((g, w)) = got
            .iter()
            .zip(&want)
            .find(|(g, w)| !(close(g.0, w.0) && close(g.1, w.1) && close(g.2, w.2)))
        {
            panic!("[{from}, {to}] / {width}: got column {g:?}, want {w:?}");
        }
        let in_range = held.iter().filter(|(x, _)| *x >= from && *x <= to).count();
        assert_eq!(s["points"].as_u64(), Some(in_range as u64));
        assert!(got.len() <= width);
    }
    // Time axis without a range: the whole held range, every point in some column.
    let d = api.json("/api/data?ids=0,1&width=100");
    assert_eq!(d["x"], "time");
    for s in d["series"].as_array().expect("series") {
        assert_eq!(s["points"], 4000);
        let cols = s["columns"].as_array().expect("columns");
        assert!(!cols.is_empty() && cols.len() <= 100);
    }
    // The envelope of pos.1 = -i over samples 1000..5000 spans exactly its min and max.
    let d = api.json("/api/data?ids=2&x=step&width=3");
    let cols = d["series"][0]["columns"].as_array().expect("columns");
    let lo = cols
        .iter()
        .map(|c| c[1].as_f64().expect("min"))
        .fold(f64::INFINITY, f64::min);
    let hi = cols
        .iter()
        .map(|c| c[2].as_f64().expect("max"))
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!((lo, hi), (-((n - 1) as f64), -1000.0));

    // The latest frame: f32 scaled from its min..max to 0..255.
    let f = api.json("/api/frame?id=0");
    assert_eq!(f["shape"], serde_json::json!([2, 2]));
    assert_eq!(f["seq"], n - 1);
    assert_eq!(f["data"], serde_json::json!([0, 0, 0, 255]));
    assert_eq!(f["max"], (n - 1) as f64);

    // The stream: a first event with the counters and the last 100 samples' envelope.
    let mut s = TcpStream::connect(api.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET /api/stream?ids=0&x=step&span=100&width=10&token={} HTTP/1.1\r\nHost: t\r\n\r\n",
        api.token
    )
    .expect("write");
    let mut lines = BufReader::new(s).lines();
    let head = lines.next().expect("status line").expect("read");
    assert!(head.contains("200"), "{head}");
    let data = lines
        .find_map(|l| {
            l.ok()
                .and_then(|l| l.strip_prefix("data: ").map(str::to_owned))
        })
        .expect("a data event");
    let msg: Json = serde_json::from_str(&data).expect("JSON event");
    assert_eq!(msg["stats"]["records"], n);
    assert_eq!(msg["data"]["to"], (n - 1) as f64);
    assert_eq!(msg["data"]["series"][0]["points"], 101);
    assert_eq!(msg["frames"]["0"], n - 1);

    // Bad requests: clear errors, no panic, the server keeps serving.
    for (path, status) in [
        ("/api/data?x=sideways", 400),
        ("/api/data?width=0", 400),
        ("/api/data?from=soon", 400),
        ("/api/data?ids=x", 400),
        ("/api/frame?id=9", 404),
        ("/nope", 404),
    ] {
        let (got, body) = api.get(path);
        assert_eq!(got, status, "{path}: {body}");
    }
    let d = api.json("/api/data?ids=77");
    assert_eq!(d["series"], serde_json::json!([]));
    assert_eq!(api.get("/api/series").0, 200);

    // Without the token (another user of the machine): 403 everywhere, the page included;
    // with the cookie the page sets, allowed.
    for path in [
        "/",
        "/api/series",
        "/api/data?ids=0",
        "/api/stream?ids=0",
        "/app.js",
    ] {
        assert_eq!(get(api.addr, path).0, 403, "{path}");
        assert_eq!(
            get(api.addr, &format!("{path}?token=wrong")).0,
            403,
            "{path}"
        );
    }
    let mut s = TcpStream::connect(api.addr).expect("connect");
    write!(
        s,
        "GET /api/series HTTP/1.0\r\nCookie: a=b; snapbus_plotter={}\r\n\r\n",
        api.token
    )
    .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    assert!(
        text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200"),
        "{text}"
    );
}

/// Many records per second into one plotter while pages ask: the producer is never slowed
/// (its emits never fail) and the plotter keeps up or reports its loss exactly.
#[test]
fn a_plotter_follows_a_fast_producer_and_pages_never_block_it() {
    let bus = Bus::start("plot-fast");
    let mut plotter = Plotter::new(PlotterOptions::default());
    let server = serve(plotter.store(), 0).expect("serve");
    let api = Api::of(&server);
    let stop = Arc::new(AtomicBool::new(false));
    let dir = bus.dir().clone();
    let consumer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut opts = RunOptions::new("plotter");
            opts.subscribe.start = StartAt::Oldest;
            opts.handle_signals = false;
            opts.until_end = true;
            let s = run(&dir, &opts, &mut plotter, Some(&stop)).expect("run");
            (s, plotter)
        })
    };
    let p = bus.publisher();
    let n = 50_000u64;
    for i in 0..n {
        p.emit(Level::INFO, 0, &step(i)).expect("emit");
        if i % 10_000 == 0 {
            assert_eq!(api.get("/api/series").0, 200);
        }
    }
    p.close();
    let (summary, _plotter) = consumer.join().expect("consumer");
    assert_eq!(summary.delivered + summary.lost, n);
    let series = api.json("/api/series");
    assert_eq!(series["stats"]["records"], summary.delivered);
    assert_eq!(series["stats"]["lost"], summary.lost);
    stop.store(true, Ordering::Relaxed);
}

/// A record of 1 KiB and more without images (a long label besides its number).
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "plot.big", version = 1, crate = "snapbus_bus::schemas")]
struct Big {
    loss: f64,
    label: String,
}

/// Records of 1 KiB and more without images are read where they lie in the ring
/// (`Consumer::read_in_place`): every value emitted is a point of its series, as the
/// brute-force reference says.
#[test]
fn series_of_records_read_in_place_hold_every_value() {
    let bus = Bus::start("plot-inplace");
    let p = bus.publisher();
    let n = 300u64;
    let big = |i: u64| Big {
        loss: (i as f64 * 0.37).sin() * 10.0 + (i % 17) as f64,
        label: "y".repeat(1100),
    };
    for i in 0..n {
        p.emit(Level::INFO, 0, &big(i)).expect("emit");
    }
    p.close();
    let (_server, api, summary) = plot_to_the_end(&bus);
    assert_eq!((summary.delivered, summary.lost), (n, 0));
    // All but the first (copied: it sets up the schema's series).
    assert_eq!(summary.read_in_place, n - 1);
    let series = api.json("/api/series");
    assert_eq!(series["series"][0]["field"], "loss");
    assert_eq!(series["series"][0]["samples"].as_u64(), Some(n));
    let held: Vec<(f64, f64)> = (0..n).map(|i| (i as f64, big(i).loss)).collect();
    let (from, to, width) = (0.0, (n - 1) as f64, n as usize);
    let d = api.json(&format!(
        "/api/data?ids=0&x=step&from={from}&to={to}&width={width}"
    ));
    let got: Vec<(f64, f64)> = d["series"][0]["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| (c[1].as_f64().expect("min"), c[2].as_f64().expect("max")))
        .collect();
    let want: Vec<(f64, f64)> = reference(&held, from, to, width)
        .into_iter()
        .map(|(_, lo, hi)| (lo, hi))
        .collect();
    assert_eq!(got.len(), n as usize, "one column a point");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            close(g.0, w.0) && close(g.1, w.1),
            "point {i}: {g:?}, want {w:?}"
        );
    }
}

#[test]
fn numbers_inside_dynamic_fields_become_series_as_records_show_them() {
    use std::borrow::Cow;

    use snapbus_bus::schemas::{Field, SchemaDescriptor, TypeDesc, Value};

    let bus = Bus::start("plot-dynamic");
    let p = bus.publisher();
    let desc = SchemaDescriptor::new(
        "plot.event",
        1,
        TypeDesc::Struct {
            fields: vec![
                Field::new("step", TypeDesc::U32),
                Field::new("extra", TypeDesc::Dynamic),
            ],
        },
    )
    .expect("descriptor");
    let key = |k: &str| Value::Str(Cow::Owned(k.to_owned()));
    let event = |step: u32, extra: Value<'static>| {
        Value::Struct(vec![
            (Cow::Borrowed("step"), Value::U32(step)),
            (Cow::Borrowed("extra"), extra),
        ])
    };
    // Two shapes under one schema: a number, then a map with a nested number.
    p.emit_value(Level::INFO, 0, &desc, &event(0, Value::F64(0.5)))
        .expect("emit");
    let model = Value::Map(vec![
        (key("is_done"), Value::Bool(true)),
        (
            key("stats"),
            Value::Map(vec![(key("steps"), Value::I64(77))]),
        ),
    ]);
    p.emit_value(Level::INFO, 0, &desc, &event(1, model))
        .expect("emit");
    p.close();
    let (_server, api, summary) = plot_to_the_end(&bus);
    assert_eq!(summary.delivered, 2);
    let series = api.json("/api/series");
    let fields: Vec<(&str, u64)> = series["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| {
            (
                s["field"].as_str().expect("field"),
                s["samples"].as_u64().expect("samples"),
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            ("step", 2),
            ("extra", 1),
            ("extra.is_done", 1),
            ("extra.stats.steps", 1)
        ]
    );
}

#[test]
fn images_in_lists_and_dicts_of_structs_points_and_profiles_are_shown() {
    let bus = Bus::start("plot-views");
    let p = bus.publisher();
    for i in 0..3 {
        p.emit(Level::INFO, 0, &sensors(i)).expect("emit");
    }
    p.close();
    let (_server, api, summary) = plot_to_the_end(&bus);
    assert_eq!(summary.delivered, 3);
    let series = api.json("/api/series");
    let images = series["images"].as_array().expect("images");
    let view = |field: &str| {
        images
            .iter()
            .find(|im| im["field"] == field)
            .unwrap_or_else(|| panic!("no view of {field}: {series}"))
    };
    for (field, kind, camera) in [
        ("sensors.0.rgba", "image", 1),
        ("sensors.1.rgba", "image", 2),
        ("by_name.wrist.rgba", "image", 3),
    ] {
        let im = view(field);
        assert_eq!(im["kind"], kind, "{im}");
        let f = api.json(&format!("/api/frame?id={}", im["id"]));
        assert_eq!(f["shape"], serde_json::json!([2, 3, 4]), "{f}");
        assert_eq!(f["channels"], 4);
        assert_eq!(f["data"], serde_json::json!(vec![10 * camera + 2; 24]));
    }
    // (N, 3): points, their coordinates as they are; 1-D: a series over the index.
    let cloud = view("cloud");
    assert_eq!(cloud["kind"], "points", "{cloud}");
    let f = api.json(&format!("/api/frame?id={}", cloud["id"]));
    assert_eq!(f["kind"], "points");
    assert_eq!(f["shape"], serde_json::json!([4, 3]));
    let want: Vec<f64> = (0..4)
        .flat_map(|k| [k as f64, 2.0 * k as f64, -(k as f64)].map(|v| v + 2.0))
        .collect();
    assert_eq!(f["values"], serde_json::json!(want), "{f}");
    let profile = view("profile");
    assert_eq!(profile["kind"], "series", "{profile}");
    let f = api.json(&format!("/api/frame?id={}", profile["id"]));
    assert_eq!(f["kind"], "series");
    assert_eq!(
        f["values"],
        serde_json::json!([0.0, 2.0, 4.0, 6.0, 8.0]),
        "{f}"
    );
    assert_eq!(images.len(), 5, "{series}");
}

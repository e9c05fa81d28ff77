//! JSON Lines: every record as `echo` prints it, loss records, and every version of a schema.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value as Json, json};
use snapbus_bus::Level;
use snapbus_bus::broker::InProcess;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::lane::StartAt;
use snapbus_bus::publisher::{Publisher, PublisherConfig};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::WriterOptions;
use snapbus_consumers::{RunOptions, run as run_consumer};

use super::{Tick, assert_ok, export, export_mixed, obs, payload_json, read_lines, tmp};

/// Records `obs(0..n_obs)` and `n_ticks` ticks with a real recorder on an in-process bus, as
/// `snapbus record` would.
fn record_live(bus_name: &str, path: &Path, n_obs: u64, n_ticks: u32) {
    let root =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("exp-rt-{}", std::process::id()));
    let dir = BusDir::locate_in(&root, &BusName::new(bus_name).expect("bus name"));
    let bus = InProcess::start(dir, Duration::from_secs(60)).expect("broker");
    let (session_tag, perf_tag) = (None, None);
    let lane = LaneConfig {
        capacity: 4 << 20,
        max_frame: 64 << 10,
        ..LaneConfig::default()
    };
    let config = PublisherConfig {
        name: "export-test".into(),
        lane,
        session_tag,
        perf_tag,
        relayed: false,
    };
    let p = Publisher::start(bus.dir().clone(), config).expect("publisher");
    let t0 = std::time::Instant::now();
    while !p.is_connected() {
        assert!(t0.elapsed() < Duration::from_secs(30), "never connected");
        std::thread::sleep(Duration::from_millis(5));
    }
    let trainer = p.emitter("trainer");
    for i in 0..n_obs {
        p.emit(Level::INFO, trainer, &obs(i)).expect("emit");
    }
    for i in 0..n_ticks {
        p.emit(Level::WARN, trainer, &Tick { i }).expect("emit");
    }
    p.close();
    let mut rec = Recorder::create(RecorderOptions {
        path: path.to_owned(),
        rotate_bytes: None,
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Oldest,
    })
    .expect("recorder");
    let mut opts = RunOptions::new("recorder");
    opts.subscribe.start = StartAt::Oldest;
    opts.until_end = true;
    opts.handle_signals = false;
    let summary = run_consumer(bus.dir(), &opts, &mut rec, None).expect("run");
    assert_eq!(summary.delivered, n_obs + u64::from(n_ticks));
    rec.finish().expect("finish");
}

#[test]
fn jsonl_holds_every_record_as_echo_prints_it() {
    let rec = tmp("live.mcap");
    record_live("exp1", &rec, 40, 10);
    let out = tmp("live.jsonl");
    let o = export(&rec, "jsonl", &out, &[]);
    assert_ok(&o);
    assert!(
        o.stderr
            .contains("snapbus export: 50 records (exp.obs 40, exp.tick 10)"),
        "{}",
        o.stderr
    );
    let lines = read_lines(&out);
    assert_eq!(lines.len(), 50);
    for (i, line) in lines[..40].iter().enumerate() {
        let keys: Vec<&str> = line
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "schema", "version", "level", "t_nanos", "producer", "target", "seq", "payload"
            ]
        );
        assert_eq!(line["schema"], "exp.obs");
        assert_eq!(line["version"], 1);
        assert_eq!(line["level"], "info");
        assert_eq!(line["target"], "trainer");
        assert_eq!(line["producer"]["name"], "export-test");
        assert_eq!(line["producer"]["pid"], std::process::id());
        assert_eq!(line["seq"], i);
        assert!(line["t_nanos"].as_u64().expect("t_nanos") > 1_600_000_000_000_000_000);
        assert_eq!(line["payload"], payload_json(&obs(i as u64)), "record {i}");
    }
    // Spot checks against the events themselves, not only against the decoder.
    assert_eq!(lines[4]["payload"]["pos"], json!({"x": 2.0, "y": -4.0}));
    assert_eq!(lines[4]["payload"]["phase"], json!({"Run": {"speed": 4.5}}));
    assert_eq!(lines[3]["payload"]["label"], Json::Null);
    assert_eq!(
        lines[2]["payload"]["image"],
        json!({"dtype": "u8", "shape": [2, 3], "data": [2, 3, 4, 5, 6, 7]})
    );
    for (i, line) in lines[40..].iter().enumerate() {
        assert_eq!(line["schema"], "exp.tick");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["payload"], json!({ "i": i }));
    }

    // --schema filters (a glob), and --force overwrites.
    let o = export(&rec, "jsonl", &out, &["--schema", "exp.t*", "--force"]);
    assert_ok(&o);
    let lines = read_lines(&out);
    assert_eq!(lines.len(), 10);
    assert!(lines.iter().all(|l| l["schema"] == "exp.tick"));
}

#[test]
fn jsonl_writes_loss_records_and_every_version() {
    let (_, out, o) = export_mixed("mixed-j.mcap", "jsonl", "mixed.jsonl");
    o.assert_stderr_has("1 loss record →");
    let lines = read_lines(&out);
    assert_eq!(lines.len(), 30 + 5 + 1 + 4);
    let loss: Vec<&Json> = lines.iter().filter(|l| l.get("loss").is_some()).collect();
    assert_eq!(
        loss,
        [
            &json!({"loss": {"producer_id": 8, "producer_pid": 200, "lost": 42, "damaged": 0}, "t_nanos": 3000})
        ]
    );
    let v2: Vec<&Json> = lines.iter().filter(|l| l["version"] == 2).collect();
    assert_eq!(v2.len(), 4);
    assert_eq!(v2[3]["payload"], json!({"i": 3, "unit": "ms"}));
    assert_eq!(
        v2[3]["producer"],
        json!({"id": 8, "name": "beta", "pid": 200})
    );
    assert_eq!(v2[3]["t_nanos"], 4003);
}

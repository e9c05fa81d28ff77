//! Wide schemas on a real bus: a 65,536-leaf schema meets the aggregator and the plotter, and 16 MiB records
//! meet `echo`. The producer is a publisher of this test process.

use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::EmitMeta;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::schemas::{Field, SchemaDescriptor, TypeDesc};
use snapbus_bus::{Level, Publisher, PublisherConfig};

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, runtime_root};

/// `{ f0000: [f32; 16], …, f4095: [f32; 16] }`: 65,536 numeric leaves (arrays of up to 16
/// are summarized and plotted element by element), in a 50 KB descriptor.
pub(crate) fn wide_schema() -> SchemaDescriptor {
    let fields = (0..4096)
        .map(|i| {
            let ty = TypeDesc::Array {
                len: 16,
                elem: Box::new(TypeDesc::F32),
            };
            Field::new(format!("f{i:04}"), ty)
        })
        .collect();
    SchemaDescriptor::new("wide.grid", 1, TypeDesc::Struct { fields }).expect("a valid descriptor")
}

/// A publisher on `bus` with a lane of `lane_bytes` (frames up to a quarter of it).
pub(crate) fn publisher(bus: &TestBus, name: &str, lane_bytes: usize) -> Publisher {
    let dir = BusDir::locate_in(&runtime_root(), &BusName::new(&bus.name).expect("name"));
    let p = Publisher::start(
        dir,
        PublisherConfig {
            name: name.into(),
            lane: LaneConfig {
                capacity: lane_bytes,
                max_frame: lane_bytes / 4,
                block_size: 64 << 10,
            },
            session_tag: None,
            perf_tag: None,
            relayed: false,
        },
    )
    .expect("publisher");
    wait_until("the publisher connected", WATCHDOG, || p.is_connected());
    p
}

/// Emits `n` records of `desc` whose payload is `payload`.
pub(crate) fn emit(p: &Publisher, desc: &SchemaDescriptor, payload: &[u8], n: usize) {
    let meta = EmitMeta {
        schema_key: p.register_schema(desc).expect("register"),
        schema_version: 1,
        level: Level::INFO,
        emitter: p.emitter("wide"),
    };
    for _ in 0..n {
        p.emit_with(meta, payload.len(), |w| Ok(w.put(payload)?))
            .expect("emit");
    }
}

/// The aggregator cannot emit a summary of 65,536 leaves (its descriptor is larger than a
/// catalog holds): it says so once, in lines of bounded length, and does not summarize that
/// schema, rather than exiting at its first summary and being restarted into the same failure
/// (before: exit 1, "the catalog is full (64 of 1048576 bytes used)", restarted 5 times, a
/// 614 KB log line each time).
#[test]
fn an_aggregator_whose_summary_cannot_fit_says_why_and_is_not_restarted() {
    let bus = TestBus::up();
    let id = bus.attach(&["attach", "aggregator", "--schema", "wide.*"]);
    let p = publisher(&bus, "wide", 16 << 20);
    emit(&p, &wide_schema(), &vec![0u8; 65_536 * 4], 3);
    drop(p);
    let log_of = |c: &serde_json::Value| {
        std::fs::read_to_string(c["log"].as_str().unwrap_or_default()).unwrap_or_default()
    };
    // The producer has ended (its experiment window closed: the summary that failed before).
    let t0 = std::time::Instant::now();
    loop {
        let c = bus.consumer_by_id(&id).unwrap_or_default();
        let ls = bus.ls();
        let ended = ls["producers"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["info"]["name"] == "wide" && p["status"] == "closed")
        });
        let log = log_of(&c);
        if c["delivered"] == 3 && log.contains("not summarizing wide.grid v1") && ended {
            break;
        }
        assert!(
            t0.elapsed() < WATCHDOG,
            "the aggregator did not read the records and the end: {c}\n{}\nits log: {}",
            ls["producers"],
            &log[..log.len().min(2_000)]
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "{}", out.stderr);
    out.assert_stdout_has("exited 0");
    let c = bus.consumer_by_id(&id).unwrap_or_default();
    let status = c["status"].as_str().unwrap_or_default();
    assert!(!status.contains("restart"), "{status}");
    let log = log_of(&c);
    let reason = "would have a descriptor of";
    assert!(
        log.contains(reason),
        "not the true reason: {}",
        &log[..log.len().min(2_000)]
    );
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest <= 1_000, "a log line of {longest} bytes");
}

/// The plotter plots the first 1,024 leaves of a 65,536-leaf schema and says what it cut, in
/// `ls` (before: a series per leaf, 1,427 MB after 581 records at 20 Hz).
#[test]
fn the_plotter_bounds_the_series_of_a_wide_schema_and_says_what_it_cut() {
    let bus = TestBus::up();
    let _plot = bus.spawn("plot", &["plot", "--port", "0", "--schema", "wide.*"]);
    let plotter = || {
        bus.consumer_where(|c| c["info"]["kind"] == "plotter")
            .unwrap_or_default()
    };
    wait_until("the plotter subscribed", WATCHDOG, || {
        plotter()["status"] == "running"
    });
    let p = publisher(&bus, "wide", 16 << 20);
    emit(&p, &wide_schema(), &vec![0u8; 65_536 * 4], 20);
    wait_until(
        "the plotter read every record and said what it cut",
        WATCHDOG,
        || {
            let c = plotter();
            c["delivered"] == 20 && c["board"]["cut.leaves"].as_u64().is_some()
        },
    );
    let board = &plotter()["board"];
    assert_eq!(board["series"], 1_024, "{board}");
    assert_eq!(board["cut.leaves"], 65_536 - 1_024, "{board}");
    assert_eq!(board["cut.dynamic_values"], 0, "{board}");
    assert_eq!(board["points_per_series"], 9_765, "{board}");
}

/// `echo` of 16 MiB records (4 Mi f32 each) writes each as it decodes it: its peak resident
/// memory (the kernel's count, `VmHWM`) stays within a bound that building the JSON tree of
/// one record passes many times over (before: 1.2 GB).
#[test]
fn echo_of_16_mib_records_holds_no_json_tree() {
    const RECORDS: usize = 3;
    let bus = TestBus::up();
    let desc = SchemaDescriptor::new(
        "big.frame",
        1,
        TypeDesc::Struct {
            fields: vec![Field::new(
                "samples",
                TypeDesc::Array {
                    len: 4 << 20,
                    elem: Box::new(TypeDesc::F32),
                },
            )],
        },
    )
    .expect("descriptor");
    let p = publisher(&bus, "big", 128 << 20);
    emit(&p, &desc, &vec![0u8; 16 << 20], RECORDS);
    let out_path = runtime_root().join(format!("echo-{}.jsonl", bus.name));
    let out = std::fs::File::create(&out_path).expect("output file");
    let mut cmd = bus.cmd(&["echo", "big.*", "--from", "oldest"]);
    cmd.stdout(out).stderr(std::process::Stdio::null());
    let mut echo = cmd.spawn().expect("echo");
    let lines = || {
        std::fs::read(&out_path)
            .map(|b| b.iter().filter(|&&c| c == b'\n').count())
            .unwrap_or(0)
    };
    wait_until("echo printed every record", WATCHDOG, || lines() == RECORDS);
    let status = std::fs::read_to_string(format!("/proc/{}/status", echo.id())).expect("status");
    let _ = echo.kill();
    let _ = echo.wait();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    let first = std::fs::read_to_string(&out_path).expect("output");
    let first = first.lines().next().expect("a line");
    let v: serde_json::Value = serde_json::from_str(first).expect("a JSON line");
    assert_eq!(
        v["payload"]["samples"].as_array().map(Vec::len),
        Some(4 << 20)
    );
    let _ = std::fs::remove_file(&out_path);
    // The lane's pages echo read (48 MiB) and a record's bytes count too; a JSON tree of one
    // record alone is 4 Mi nodes of 32 bytes and more (over 128 MiB).
    assert!(
        peak_kib < 200 << 10,
        "echo peaked at {} MiB",
        peak_kib >> 10
    );
    eprintln!("echo peak resident: {} MiB", peak_kib >> 10);
}

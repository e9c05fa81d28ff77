//! Issue 15, item 12: every file and directory a verb creates holds bus data and is private
//! (files 0600, directories 0700), like the bus's sockets: recordings (`record`, `attach
//! recorder`, rotated files), snapshots, the aggregator's CSV files and the plotter's URL file.
//! (`export` is covered in `export.rs`.)

use std::path::{Path, PathBuf};

use crate::bus::{TestBus, wait_until};
use crate::export::mode;
use crate::util::{WATCHDOG, runtime_root};

fn fresh_dir(name: &str) -> PathBuf {
    let dir = runtime_root().join("files").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn attach(bus: &TestBus, args: &[&str]) -> String {
    let out = bus.attach(args);
    out.lines().next().expect("id or URL").trim().to_owned()
}

fn detach(bus: &TestBus, id: &str) {
    let out = bus.run(&["detach", id]);
    assert!(out.status.success(), "detach {id}: {}", out.stderr);
}

#[test]
fn recordings_snapshots_csv_and_url_files_are_private() {
    let bus = TestBus::up();
    bus.demo(3, 5, 0, &[]);
    let dir = fresh_dir("modes");

    let snap = dir.join("snap.mcap");
    let out = bus.run(&["snapshot", "-o", s(&snap)]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(mode(&snap), 0o600, "snapshot");

    let rec = dir.join("rec.mcap");
    let id = attach(
        &bus,
        &["attach", "recorder", "--from", "oldest", "-o", s(&rec)],
    );
    detach(&bus, &id);
    assert_eq!(mode(&rec), 0o600, "attach recorder");

    let rotated = dir.join("run.mcap");
    let id = attach(
        &bus,
        &[
            "attach",
            "recorder",
            "--from",
            "oldest",
            "--rotate-mb",
            "1",
            "-o",
            s(&rotated),
        ],
    );
    detach(&bus, &id);
    assert_eq!(mode(&dir.join("run-0000.mcap")), 0o600, "rotated recording");

    let csv = dir.join("csv").join("nested");
    let out = bus.run(&[
        "aggregate",
        "--schema",
        "demo.step",
        "--until-end",
        "--csv",
        s(&csv),
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(mode(&csv), 0o700, "the CSV directory");
    assert_eq!(mode(&dir.join("csv")), 0o700, "its new parent");
    assert_eq!(mode(&csv.join("demo.step.summary.csv")), 0o600, "the CSV");

    let url = attach(&bus, &["attach", "plotter"]);
    assert!(url.starts_with("http://"), "{url}");
    let bus_dir = runtime_root().join(&bus.name);
    let url_files = || -> Vec<PathBuf> {
        std::fs::read_dir(&bus_dir)
            .expect("bus dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "url"))
            .collect()
    };
    wait_until("the plotter's URL file exists", WATCHDOG, || {
        !url_files().is_empty()
    });
    for f in url_files() {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    let plotter = bus.ls()["consumers"]
        .as_array()
        .expect("consumers")
        .iter()
        .find(|c| c["info"]["kind"] == "plotter")
        .map(|c| c["id"].to_string())
        .expect("the plotter in ls");
    detach(&bus, &plotter);
}

//! Aggregators end to end with the real binary: summaries of `snapbus demo` checked against
//! statistics computed here from the demo's documented formulas, one worker against three,
//! and a worker killed on purpose.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::bus::{Bg, TestBus, wait_until};
use crate::demo::{demo_leaves, expected_mode as mode};
use crate::util::{WATCHDOG, kill9, runtime_root};

/// Checks the `stats` of a summary against the demo steps `(e, s)` it covers.
fn check_stats(summary: &Value, steps: &[(u64, u64)]) {
    let p = &summary["payload"];
    assert_eq!(p["count"], steps.len() as u64, "{p}");
    for (i, (leaf, _)) in demo_leaves(0, 0).iter().enumerate() {
        let v: Vec<f64> = steps
            .iter()
            .map(|(e, s)| demo_leaves(*e, *s)[i].1)
            .collect();
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |p: f64| sorted[(p * (sorted.len() - 1) as f64) as usize];
        let want = [
            ("count", n),
            ("mean", mean),
            ("std", std),
            ("min", sorted[0]),
            ("max", sorted[sorted.len() - 1]),
            ("last", v[v.len() - 1]),
            ("p50", q(0.5)),
            ("p95", q(0.95)),
            ("p99", q(0.99)),
        ];
        let mut node = &p["stats"];
        for part in leaf.split('.') {
            node = &node[part];
        }
        for (stat, w) in want {
            let got = node[stat].as_f64().unwrap_or(f64::NAN);
            assert!(
                (got - w).abs() <= 1e-9 * w.abs().max(1.0),
                "{leaf}.{stat}: got {got}, want {w} in {p}"
            );
        }
    }
}

/// `n` summaries of `glob` from the oldest record on.
fn summaries(bus: &TestBus, glob: &str, n: usize) -> Vec<Value> {
    let count = n.to_string();
    let echo = bus.spawn(
        "echo-summaries",
        &["echo", glob, "--from", "oldest", "--count", &count],
    );
    echo.json_lines(n)
}

fn attach(bus: &TestBus, args: &[&str]) -> Vec<String> {
    let out = bus.attach(args);
    let ids: Vec<String> = out.lines().map(str::to_owned).collect();
    assert!(ids.iter().all(|i| i.parse::<u64>().is_ok()), "ids: {out:?}");
    ids
}

#[test]
fn demo_summaries_per_episode_and_experiment_equal_statistics_computed_here() {
    let bus = TestBus::up();
    let csv_dir = runtime_root().join("files").join("agg-csv");
    let _ = std::fs::remove_dir_all(&csv_dir);
    let csv = csv_dir.to_str().expect("utf-8");
    let ids = attach(
        &bus,
        &[
            "attach",
            "aggregator",
            "--schema",
            "demo.step",
            "--group-by",
            "mode",
            "--csv",
            csv,
        ],
    );
    assert_eq!(ids.len(), 1);
    bus.demo(4, 5, 0, &[]);
    // Train: episodes 0, 1, 2 and its experiment; Eval: episode 3 and its experiment.
    let got = summaries(&bus, "demo.step.by_mode.summary", 6);
    let mut seen = BTreeSet::new();
    for g in &got {
        let p = &g["payload"];
        assert_eq!(g["producer"]["name"], "aggregator");
        assert_eq!(p["producer"], "demo");
        assert_eq!(p["lost"], 0);
        let group = p["group"]["mode"].as_str().expect("group").to_owned();
        let window = p["window"].as_str().expect("window").to_owned();
        let index = p["index"].as_u64().expect("index");
        let steps: Vec<(u64, u64)> = if window == "episode" {
            assert_eq!(mode(index), group);
            (0..5).map(|s| (index, s)).collect()
        } else {
            assert_eq!(window, "experiment");
            (0..4u64)
                .filter(|e| mode(*e) == group)
                .flat_map(|e| (0..5).map(move |s| (e, s)))
                .collect()
        };
        check_stats(g, &steps);
        seen.insert((group, window, index));
    }
    let want: BTreeSet<(String, String, u64)> = [
        ("Train", "episode", 0),
        ("Train", "episode", 1),
        ("Train", "episode", 2),
        ("Train", "experiment", 3),
        ("Eval", "episode", 3),
        ("Eval", "experiment", 1),
    ]
    .iter()
    .map(|(g, w, i)| ((*g).to_owned(), (*w).to_owned(), *i))
    .collect();
    assert_eq!(seen, want);

    // The CSV has the same rows (flushed every second; detach flushes too).
    let out = bus.run(&["detach", &ids[0]]);
    assert!(out.status.success(), "{}", out.stderr);
    let text = std::fs::read_to_string(csv_dir.join("demo.step.by_mode.summary.csv")).expect("csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 6, "{text}");
    let col = |n: &str| header.iter().position(|h| *h == n).expect("column");
    for (row, g) in rows.iter().zip(&got) {
        let p = &g["payload"];
        assert_eq!(row[col("group.mode")], p["group"]["mode"]);
        assert_eq!(row[col("window")], p["window"]);
        assert_eq!(row[col("count")], p["count"].to_string());
        // serde_json parses floats to within an ulp; the CSV holds the shortest round trip.
        let mean: f64 = row[col("reward.mean")].parse().expect("float");
        let want = p["stats"]["reward"]["mean"].as_f64().expect("mean");
        assert!(
            (mean - want).abs() <= 1e-15 * want.abs().max(1.0),
            "{mean} vs {want}"
        );
    }
}

/// The summaries as comparable text, by (group, window, index), without who emitted them.
fn by_key(v: &[&Value]) -> BTreeMap<(String, String, u64), String> {
    v.iter()
        .map(|g| {
            let p = &g["payload"];
            (
                (
                    p["group"].to_string(),
                    p["window"].as_str().expect("window").to_owned(),
                    p["index"].as_u64().expect("index"),
                ),
                format!("{} {} {}", p["count"], p["lost"], p["stats"]),
            )
        })
        .collect()
}

#[test]
fn one_worker_and_three_workers_emit_the_same_summaries() {
    let bus = TestBus::up();
    let one = attach(&bus, &["attach", "aggregator", "--group-by", "step"]);
    let three = attach(
        &bus,
        &["spawn", "aggregator", "-n", "3", "--group-by", "step"],
    );
    assert_eq!((one.len(), three.len()), (1, 3));
    let kinds: BTreeSet<String> = bus.ls()["consumers"]
        .as_array()
        .expect("consumers")
        .iter()
        .map(|c| c["info"]["kind"].as_str().expect("kind").to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "aggregator",
            "aggregator-1of3",
            "aggregator-2of3",
            "aggregator-3of3"
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    );
    bus.demo(3, 12, 0, &[]);
    // demo.step: 12 step groups × (3 episodes + experiment); demo.episode_end has no `step`
    // field, so it is not summarized (the aggregator says so in its log).
    let per_set = 12 * 4;
    let all = summaries(&bus, "demo.step.by_step.summary", 2 * per_set);
    let (single, split): (Vec<&Value>, Vec<&Value>) = all
        .iter()
        .partition(|g| g["producer"]["name"] == "aggregator");
    assert_eq!(single.len(), per_set);
    let workers: BTreeSet<&str> = split
        .iter()
        .map(|g| g["producer"]["name"].as_str().expect("name"))
        .collect();
    assert!(
        workers.len() >= 2,
        "12 groups all fell to one worker: {workers:?}"
    );
    assert!(
        all.iter()
            .all(|g| g["schema"] == "demo.step.by_step.summary")
    );
    assert_eq!(single.len(), split.len(), "nothing twice, nothing missed");
    assert_eq!(by_key(&single), by_key(&split));
}

#[test]
fn a_killed_worker_shows_in_ls_and_its_restart_reports_what_the_ring_lost() {
    let bus = TestBus::up();
    let ids = attach(
        &bus,
        &[
            "spawn",
            "aggregator",
            "-n",
            "3",
            "--group-by",
            "step",
            "--field",
            "reward",
        ],
    );
    // Kill worker 2 of 3; it is restarted after a second.
    let worker = |kind: &str| -> Value {
        bus.consumer_where(|c| c["info"]["kind"] == kind)
            .unwrap_or(Value::Null)
    };
    let pid = worker("aggregator-2of3")["info"]["pid"]
        .as_u64()
        .expect("pid");
    kill9(pid);
    // Meanwhile a demo with a 64 KiB ring (about 450 steps) emits 2,000 steps: the restarted
    // worker finds most of them overwritten.
    bus.demo(20, 100, 0, &[("SNAPBUS_LANE_BYTES", "65536")]);
    wait_until("ls shows the worker restarted", WATCHDOG, || {
        worker("aggregator-2of3")["status"] == "running (restarted 1x)"
    });
    // Its loss is in `ls` (the subscriber's counters) and in its experiment summaries.
    wait_until("ls shows the restarted worker's loss", WATCHDOG, || {
        worker("aggregator-2of3")["lost"]
            .as_u64()
            .is_some_and(|n| n > 0)
    });
    let restarted = worker("aggregator-2of3");
    let new_pid = restarted["info"]["pid"].as_u64().expect("pid");
    assert_ne!(new_pid, pid);

    // Every summary any worker emitted, once the demo's experiment summaries are out: 100
    // groups, so one experiment summary each (the killed worker's first run saw no demo).
    let echo = bus.spawn(
        "echo-all",
        &["echo", "demo.step.by_step.summary", "--from", "oldest"],
    );
    let mut experiments = 0;
    let mut seen = BTreeSet::new();
    let mut lost_by_worker: BTreeMap<String, u64> = BTreeMap::new();
    while experiments < 100 {
        let g = echo.json_lines(1).remove(0);
        let p = &g["payload"];
        let key = (
            p["group"]["step"].as_u64().expect("group"),
            p["window"].as_str().expect("window").to_owned(),
            p["index"].as_u64().expect("index"),
        );
        assert!(seen.insert(key.clone()), "{key:?} emitted twice");
        if key.1 == "experiment" {
            experiments += 1;
            let name = g["producer"]["name"].as_str().expect("name").to_owned();
            *lost_by_worker.entry(name).or_default() += p["lost"].as_u64().expect("lost");
            // Nothing is missed silently: what was summarized plus what was lost covers the
            // group's 20 steps.
            assert!(
                p["count"].as_u64().expect("count") + p["lost"].as_u64().expect("lost") >= 20,
                "{p}"
            );
        }
    }
    assert!(
        lost_by_worker
            .get("aggregator-2of3")
            .is_some_and(|n| *n > 0),
        "the restarted worker reports the records the ring no longer held: {lost_by_worker:?}"
    );
    let _ = ids;
}

#[test]
fn a_restarted_aggregator_emits_every_window_once_and_its_experiment_counts_them_all() {
    let bus = TestBus::up();
    let id = attach(&bus, &["attach", "aggregator", "--schema", "demo.step"]).remove(0);
    let mut demo = bus.spawn_demo("200");
    let echo = bus.spawn(
        "echo-summaries",
        &["echo", "demo.step.summary", "--from", "oldest"],
    );
    // A few windows out, then the aggregator is killed; the broker restarts it after 1 s.
    let mut got = echo.json_lines(3);
    let pid = |bus: &TestBus| -> Option<(u64, String)> {
        bus.ls()["consumers"].as_array()?.iter().find_map(|c| {
            (c["info"]["kind"] == "aggregator").then(|| {
                (
                    c["info"]["pid"].as_u64().unwrap_or(0),
                    c["status"].to_string(),
                )
            })
        })
    };
    let (first_pid, _) = pid(&bus).expect("the aggregator in ls");
    kill9(first_pid);
    wait_until("ls shows the aggregator restarted", WATCHDOG, || {
        pid(&bus).is_some_and(|(p, status)| p != first_pid && status.contains("restarted 1x"))
    });
    // More windows from the restarted one, then the experiment ends (the demo is killed: its
    // lane is read to the end and the experiment summary follows).
    got.extend(echo.json_lines(5));
    demo.kill9();
    loop {
        let line = echo.json_lines(1).remove(0);
        let last = line["payload"]["window"] == "experiment";
        got.push(line);
        if last {
            break;
        }
    }
    let windows: Vec<&Value> = got
        .iter()
        .filter(|g| g["payload"]["window"] == "episode")
        .collect();
    // The two runs' lanes are read side by side: sort before comparing.
    let mut indices: Vec<u64> = windows
        .iter()
        .map(|g| g["payload"]["index"].as_u64().expect("index"))
        .collect();
    indices.sort_unstable();
    let want: Vec<u64> = (0..indices.len() as u64).collect();
    assert_eq!(indices, want, "every episode once");
    let last = *indices.last().expect("windows");
    for w in &windows {
        if w["payload"]["index"] != last {
            assert_eq!(w["payload"]["count"], 10, "{w}");
        }
    }
    let total: u64 = windows
        .iter()
        .map(|g| g["payload"]["count"].as_u64().expect("count"))
        .sum();
    let exp = &got[got.len() - 1]["payload"];
    assert_eq!(
        exp["count"], total,
        "the experiment counts every window: {exp}"
    );
    assert_eq!(exp["index"], windows.len() as u64);
    assert_eq!(exp["lost"], 0);
    assert!(got.iter().all(|g| g["payload"]["lost"] == 0));
    let producers: BTreeSet<u64> = got
        .iter()
        .map(|g| g["producer"]["pid"].as_u64().expect("pid"))
        .collect();
    assert_eq!(producers.len(), 2, "both runs emitted: {producers:?}");
    let _ = bus.run(&["detach", &id]);
}

#[test]
fn four_demo_workers_combined_give_one_experiment_summary_over_all_their_steps() {
    let bus = TestBus::up();
    // Four workers of one run, started together as real processes (same name, same tag).
    let mut workers: Vec<Bg> = (0..4)
        .map(|i| {
            let mut cmd = bus.demo_cmd("5", "4", "0");
            cmd.env("SNAPBUS_SESSION_TAG", "run-7");
            Bg::spawn(&format!("worker{i}"), cmd)
        })
        .collect();
    for w in &mut workers {
        let (status, _) = w.wait();
        assert!(status.success(), "{}", w.log());
    }
    let csv_dir = runtime_root().join("files").join("agg-combined");
    let _ = std::fs::remove_dir_all(&csv_dir);
    let out = bus.run(&[
        "aggregate",
        "--schema",
        "demo.step",
        "--from",
        "oldest",
        "--until-end",
        "--combine-producers",
        "--csv",
        csv_dir.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "aggregate: {}", out.stderr);
    assert!(
        out.stderr
            .contains("the 4 producer(s) named \"demo\" (session tag \"run-7\") have ended"),
        "{}",
        out.stderr
    );
    // 4 workers × 5 episode windows, then one experiment summary for all of them.
    let got = summaries(&bus, "demo.step.summary", 21);
    let (windows, experiments): (Vec<&Value>, Vec<&Value>) = got
        .iter()
        .partition(|g| g["payload"]["window"] == "episode");
    assert_eq!((windows.len(), experiments.len()), (20, 1));
    let pids: BTreeSet<u64> = windows
        .iter()
        .map(|w| w["payload"]["producer_pid"].as_u64().expect("pid"))
        .collect();
    assert_eq!(pids.len(), 4, "windows stay per worker");
    let exp = &experiments[0]["payload"];
    assert_eq!(exp["producer"], "demo");
    assert_eq!(exp["producer_pid"], 0);
    assert_eq!(exp["index"], 20, "the windows of all four");
    let every: Vec<(u64, u64)> = (0..4)
        .flat_map(|_| (0..5u64).flat_map(|e| (0..4).map(move |s| (e, s))))
        .collect();
    check_stats(experiments[0], &every);
    let text = std::fs::read_to_string(csv_dir.join("demo.step.summary.csv")).expect("csv");
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 21, "{text}");
    assert_eq!(
        rows.iter().filter(|r| r.contains(",experiment,")).count(),
        1,
        "{text}"
    );
}

/// Two aggregators of one schema, one grouped and one not: each summary layout has its own id
/// (`demo.step.summary`, `demo.step.by_mode.summary`), so `ls` shows no `CONFLICT` (the
/// grouped one used to reuse `demo.step.summary` v1 with another descriptor).
#[test]
fn grouped_and_ungrouped_summaries_have_ids_of_their_own() {
    let bus = TestBus::up();
    attach(&bus, &["attach", "aggregator", "--schema", "demo.step"]);
    attach(
        &bus,
        &[
            "attach",
            "aggregator",
            "--schema",
            "demo.step",
            "--group-by",
            "mode",
        ],
    );
    bus.demo(2, 3, 0, &[]);
    summaries(&bus, "demo.step.by_mode.summary", 1);
    summaries(&bus, "demo.step.summary", 1);
    let mut schemas = Vec::new();
    wait_until("ls lists both summary schemas", WATCHDOG, || {
        schemas = bus.ls()["schemas"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s["id"].as_str().is_some_and(|i| i.ends_with(".summary")))
            .collect();
        schemas.len() >= 2
    });
    let ids: BTreeSet<&str> = schemas.iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(
        ids,
        ["demo.step.by_mode.summary", "demo.step.summary"]
            .into_iter()
            .collect(),
        "{schemas:?}"
    );
    for s in &schemas {
        assert_eq!(s["conflict"], false, "{s}");
    }
    let ls = bus.run(&["ls"]);
    assert!(!ls.stdout.contains("CONFLICT"), "{}", ls.stdout);
}

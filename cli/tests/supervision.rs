//! Supervised consumers across broker restarts, `down`, failed attaches and many
//! attach/detach cycles, with the real binary: ids stay the same, supervision is re-adopted,
//! `detach` stops the right process, nothing is left behind by a failed attach, ended entries
//! and their logs are bounded, and `down` stops (or keeps) supervised consumers and keeps the
//! logs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, runtime_root};

/// Whether process `pid` is still running (not a zombie of ours: these are not our children).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|st| st != "Z")
        })
        .unwrap_or(false)
}

fn kill9(pid: u64) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// Kills the processes named on drop (supervised consumers are not children of the test).
struct Reaper(Vec<u64>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                kill9(pid);
            }
        }
    }
}

fn consumer(ls: &Value, id: u64) -> Option<Value> {
    ls["consumers"]
        .as_array()?
        .iter()
        .find(|c| c["id"] == id)
        .cloned()
}

fn attach(bus: &TestBus, args: &[&str]) -> (u64, u64) {
    let id: u64 = bus.attach(args).parse().expect("attach prints the id");
    let pid = consumer(&bus.ls(), id).expect("attached consumer in ls")["info"]["pid"]
        .as_u64()
        .expect("pid");
    (id, pid)
}

fn bus_dir(bus: &TestBus) -> PathBuf {
    runtime_root().join(&bus.name)
}

fn logs(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("consumer-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `attach recorder -o FILE EXTRA`: its id and pid.
fn attach_recorder(bus: &TestBus, file: &Path, extra: &[&str]) -> (u64, u64) {
    let mut args = vec!["attach", "recorder", "-o", file.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    attach(bus, &args)
}

#[test]
fn a_restarted_broker_keeps_ids_readopts_supervision_and_detach_stops_the_right_consumer() {
    let bus = TestBus::up();
    let tmp = tempdir("readopt");
    let demo = bus.spawn_demo("200");
    let (rec, rec_pid) = attach_recorder(&bus, &tmp.join("rec.mcap"), &[]);
    let (agg, agg_pid) = attach(&bus, &["attach", "aggregator", "--schema", "demo.step"]);
    let mut reaper = Reaper(vec![rec_pid, agg_pid]);
    let echo = bus.spawn_subscribed("echo", &["echo"]);
    let echo_id = bus
        .consumer_where(|c| c["info"]["pid"] == echo.pid())
        .expect("echo in ls")["id"]
        .as_u64()
        .expect("id");
    let demo_id = bus.producer(demo.pid()).expect("demo")["id"].clone();
    // Log names match ids.
    let dir = bus_dir(&bus);
    assert!(dir.join(format!("consumer-{rec}.log")).exists());
    assert!(dir.join(format!("consumer-{agg}.log")).exists());

    // Twice: the second broker's state file must be as good as the first's.
    for _ in 0..2 {
        bus.kill9_broker();
        let out = bus.run(&["up"]);
        assert!(out.status.success(), "{}", out.stderr);
        // Everyone rejoins with the id they had; the attached ones are supervised again.
        wait_until("every consumer rejoined", WATCHDOG, || {
            let ls = bus.ls();
            [rec, agg, echo_id].iter().all(|&id| {
                consumer(&ls, id).is_some_and(|c| {
                    let status = c["status"].as_str().unwrap_or("");
                    status.starts_with("running") && !status.contains("not connected")
                })
            })
        });
        let ls = bus.ls();
        for (id, pid, supervised) in [
            (rec, rec_pid, true),
            (agg, agg_pid, true),
            (echo_id, u64::from(echo.pid()), false),
        ] {
            let c = consumer(&ls, id).expect("consumer");
            assert_eq!(c["info"]["pid"], pid, "{c}");
            assert_eq!(c["supervised"], supervised, "{c}");
            assert!(
                c["status"].as_str().unwrap_or("").starts_with("running"),
                "{c}"
            );
        }
    }
    wait_until("the demo rejoined with its id", WATCHDOG, || {
        bus.producer(demo.pid())
            .is_some_and(|p| p["id"] == demo_id && p["status"] == "live")
    });
    // A consumer attached now gets an id no earlier broker gave out.
    let (fresh, fresh_pid) = attach(&bus, &["attach", "aggregator", "--schema", "x.*"]);
    reaper.0.push(fresh_pid);
    assert!(
        ![rec, agg, echo_id].contains(&fresh) && demo_id != fresh,
        "id {fresh} given out again"
    );
    let out = bus.run(&["detach", &fresh.to_string()]);
    assert!(out.status.success(), "{}", out.stderr);

    // `detach` of the recorder's id stops the recorder, and only it.
    let out = bus.run(&["detach", &rec.to_string()]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("exited 0"), "{}", out.stdout);
    wait_until("the recorder is gone", WATCHDOG, || !alive(rec_pid));
    assert!(alive(u64::from(echo.pid())), "detach stopped the echo");
    assert!(alive(agg_pid), "detach stopped the aggregator");
    // A detached id is not reused, and detaching it again is refused.
    let out = bus.run(&["detach", &rec.to_string()]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("already ended"), "{}", out.stderr);

    // The re-adopted aggregator, killed, is restarted under its id.
    kill9(agg_pid);
    let mut new_pid = 0;
    wait_until("the aggregator is restarted", WATCHDOG, || {
        consumer(&bus.ls(), agg).is_some_and(|c| {
            new_pid = c["info"]["pid"].as_u64().unwrap_or(0);
            new_pid != agg_pid
                && c["status"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("running (restarted 1x")
        })
    });
    reaper.0.push(new_pid);

    // `down` stops it (it is supervised) and leaves the echo and the demo running.
    let out = bus.run(&["down"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("stopped 1 supervised consumer"),
        "{}",
        out.stdout
    );
    assert!(
        !alive(new_pid),
        "down left the supervised aggregator running"
    );
    assert!(alive(u64::from(echo.pid())), "down stopped the echo");
    // The logs stay.
    assert!(dir.join("broker.log").exists());
    assert!(dir.join(format!("consumer-{agg}.log")).exists());
    assert!(dir.join(format!("consumer-{rec}.log")).exists());
    drop(echo);
    drop(demo);
}

#[test]
fn down_keep_consumers_leaves_them_for_the_next_up_which_readopts_them() {
    let bus = TestBus::up();
    let (agg, pid) = attach(&bus, &["attach", "aggregator", "--schema", "demo.step"]);
    let _reaper = Reaper(vec![pid]);
    let out = bus.run(&["down", "--keep-consumers"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("left 1 supervised"), "{}", out.stdout);
    assert!(alive(pid), "--keep-consumers stopped the aggregator");
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    wait_until(
        "the aggregator is re-adopted and rejoined",
        WATCHDOG,
        || {
            consumer(&bus.ls(), agg).is_some_and(|c| {
                c["info"]["pid"] == pid
                    && c["supervised"] == true
                    && c["status"] == "running (re-adopted)"
            })
        },
    );
    let out = bus.run(&["down"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!alive(pid), "down left the re-adopted aggregator running");
    // The next broker shows how it ended; its log is still there.
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    let c = consumer(&bus.ls(), agg).expect("the ended aggregator is listed");
    assert!(
        c["status"].as_str().unwrap_or("").contains("snapbus down"),
        "{c}"
    );
    assert!(bus_dir(&bus).join(format!("consumer-{agg}.log")).exists());
}

#[test]
fn consumers_that_end_while_no_broker_runs_are_judged_by_the_next_one() {
    let bus = TestBus::up();
    let (killed, killed_pid) = attach(&bus, &["attach", "aggregator", "--schema", "demo.step"]);
    let (stopped, stopped_pid) = attach(&bus, &["attach", "aggregator", "--schema", "x.*"]);
    let mut reaper = Reaper(vec![killed_pid, stopped_pid]);
    bus.kill9_broker();
    // With no broker: one is killed (a failure), the other stopped cleanly (exit 0).
    kill9(killed_pid);
    let p = rustix::process::Pid::from_raw(stopped_pid as i32).expect("pid");
    rustix::process::kill_process(p, rustix::process::Signal::TERM).expect("SIGTERM");
    wait_until("both have ended", WATCHDOG, || {
        !alive(killed_pid) && !alive(stopped_pid)
    });
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    let mut restarted_pid = 0;
    wait_until("the killed one is restarted", WATCHDOG, || {
        consumer(&bus.ls(), killed).is_some_and(|c| {
            restarted_pid = c["info"]["pid"].as_u64().unwrap_or(0);
            c["status"]
                .as_str()
                .unwrap_or("")
                .starts_with("running (restarted 1x")
        })
    });
    reaper.0.push(restarted_pid);
    let c = consumer(&bus.ls(), stopped).expect("the stopped one is listed");
    assert_eq!(c["status"], "exited 0 while no broker was running", "{c}");
}

#[test]
fn a_damaged_state_file_is_reported_and_the_bus_starts_anyway() {
    let bus = TestBus::up();
    let out = bus.run(&["down"]);
    assert!(out.status.success(), "{}", out.stderr);
    let dir = bus_dir(&bus);
    std::fs::write(dir.join("broker.state"), b"\xff\xfe not a state file").expect("write");
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    let (id, _) = attach(&bus, &["attach", "aggregator", "--schema", "x.*"]);
    assert!(id >= 1);
    let log = std::fs::read_to_string(dir.join("broker.log")).expect("broker.log");
    assert!(log.contains("broker.state is unreadable"), "{log}");
}

#[test]
fn a_failed_attach_leaves_no_consumer_no_log_and_no_restarts() {
    let bus = TestBus::up();
    // Refused by the caller before anything is started (the output directory is checked).
    let out = bus.run(&["attach", "recorder", "-o", "/nonexistent-dir/r.mcap"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("nonexistent-dir"), "{}", out.stderr);
    // Started by the broker, failing before it subscribed: the port is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("addr").port().to_string();
    let out = bus.run(&["attach", "plotter", "--port", &port]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("before it subscribed"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("port in use"), "{}", out.stderr);
    let consumers = bus.ls()["consumers"].clone();
    assert_eq!(consumers, Value::Array(Vec::new()), "{consumers}");
    assert_eq!(logs(&bus_dir(&bus)), Vec::<String>::new());
    // Nothing restarts later either (the first restart would come after 1 s).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(bus.ls()["consumers"], Value::Array(Vec::new()));
    let out = bus.run(&["detach", "0"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("no consumer 0"), "{}", out.stderr);
}

#[test]
fn ended_consumers_and_their_logs_are_bounded() {
    let bus = TestBus {
        name: crate::util::unique_bus(),
    };
    let out = crate::util::run_cmd(bus.cmd(&["up"]).env("SNAPBUS_KEEP_ENDED", "3"));
    assert!(out.status.success(), "{}", out.stderr);
    let mut ids = Vec::new();
    for _ in 0..8 {
        let (id, _) = attach(&bus, &["attach", "aggregator", "--schema", "demo.step"]);
        let out = bus.run(&["detach", &id.to_string()]);
        assert!(out.status.success(), "{}", out.stderr);
        ids.push(id);
    }
    let ls = bus.ls();
    let listed: Vec<u64> = ls["consumers"]
        .as_array()
        .expect("consumers")
        .iter()
        .map(|c| c["id"].as_u64().expect("id"))
        .collect();
    let mut newest: Vec<u64> = ids[ids.len() - 3..].to_vec();
    let mut listed_sorted = listed.clone();
    listed_sorted.sort_unstable();
    newest.sort_unstable();
    assert_eq!(listed_sorted, newest, "{ls}");
    let want: Vec<String> = newest.iter().map(|i| format!("consumer-{i}.log")).collect();
    let mut want = want;
    want.sort();
    assert_eq!(logs(&bus_dir(&bus)), want);
}

#[test]
fn a_consumer_that_exits_no_restart_is_not_restarted() {
    let bus = TestBus::up();
    let tmp = tempdir("full");
    let _demo = bus.spawn_demo("200");
    let file = tmp.join("r.mcap");
    let (id, pid) = attach_recorder(&bus, &file, &["--force"]);
    let _reaper = Reaper(vec![pid]);
    // Its first restart cannot create its file (a directory is in the way: a failure a
    // restart cannot fix, like a full disk): exit 78. (A symlink to /dev/full no longer does:
    // output paths are replaced by rename, never written through a symlink.)
    std::fs::create_dir(tmp.join("r-restart1.mcap")).expect("mkdir");
    kill9(pid);
    let mut status = String::new();
    wait_until("the recorder ended for good", WATCHDOG, || {
        consumer(&bus.ls(), id).is_some_and(|c| {
            status = c["status"].as_str().unwrap_or("").to_owned();
            status.contains("not restarted")
        })
    });
    assert!(status.starts_with("exited 78"), "{status}");
    // No second restart, no further output files.
    std::thread::sleep(Duration::from_millis(2500));
    let c = consumer(&bus.ls(), id).expect("listed");
    assert_eq!(c["status"].as_str(), Some(status.as_str()));
    assert!(!tmp.join("r-restart2.mcap").exists());
}

/// A temporary directory, removed on drop (also when the test fails).
struct TempDir(PathBuf);

impl TempDir {
    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(name: &str) -> TempDir {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "sup-{name}-{}-{}",
        std::process::id(),
        crate::util::unique_bus()
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    TempDir(d)
}

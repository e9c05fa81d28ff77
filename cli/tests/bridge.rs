//! `snapbus bridge` between two network namespaces joined by a veth pair (root only, as CI
//! runs): a node (bus + demo + `bridge --send`) and a workstation (bus + `bridge --receive` +
//! `echo`), each with its own runtime directory. A late workstation gets the ring's history;
//! every record of the demo's grid arrives with its values; a node bridge killed mid-run and
//! restarted shows its gap as counted loss on the workstation (echo, the recorder's summary,
//! `ls`), the rest arriving intact; with a sending and a receiving bridge on each side, each
//! side's runs reach the other whole and nothing is relayed back.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::bus::{Bg, check_demo_line, demo_order, wait_until};
use crate::util::{WATCHDOG, run_cmd};

/// Two namespaces and their veth pair; deleted on drop, and by a watchdog thread if the test
/// hangs past `LIMIT`.
struct Netns {
    names: [String; 2],
    done: Arc<AtomicBool>,
}

const LIMIT: Duration = Duration::from_secs(240);

fn ip(args: &[&str]) {
    let st = Command::new("ip")
        .args(args)
        .status()
        .expect("run ip (iproute2)");
    assert!(st.success(), "ip {args:?} failed");
}

impl Netns {
    fn new(addr: [&str; 2]) -> Netns {
        let id = std::process::id();
        let names = [format!("sbz{id}n"), format!("sbz{id}w")];
        let ns = Netns {
            names: names.clone(),
            done: Arc::new(AtomicBool::new(false)),
        };
        let (va, vb) = (format!("vz{id}n"), format!("vz{id}w"));
        for n in &names {
            ip(&["netns", "add", n]);
        }
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        for (i, (n, v)) in names.iter().zip([&va, &vb]).enumerate() {
            ip(&["link", "set", v, "netns", n]);
            ip(&["-n", n, "addr", "add", &format!("{}/30", addr[i]), "dev", v]);
            ip(&["-n", n, "link", "set", v, "up"]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        let (done, names) = (Arc::clone(&ns.done), ns.names.clone());
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            while t0.elapsed() < LIMIT {
                if done.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            for n in &names {
                let _ = Command::new("ip").args(["netns", "del", n]).status();
            }
            eprintln!("bridge test: past {LIMIT:?}: namespaces deleted, test process ended");
            std::process::exit(101);
        });
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// One side: a namespace, a runtime directory and a bus in it.
struct Side {
    ns: String,
    rt: PathBuf,
    bus: &'static str,
}

impl Side {
    fn new(ns: &str, tag: &str) -> Side {
        let rt = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("bridge-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&rt);
        std::fs::create_dir_all(&rt).expect("runtime dir");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let side = Side {
            ns: ns.to_owned(),
            rt,
            bus: "lab",
        };
        let out = run_cmd(&mut side.cmd(&["up"]));
        assert!(out.status.success(), "up in {ns}: {}", out.stderr);
        side
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, env!("CARGO_BIN_EXE_snapbus")])
            .args(args)
            .env("SNAPBUS_RUNTIME_DIR", &self.rt)
            .env("SNAPBUS_BUS", self.bus)
            .env_remove("SNAPBUS_FILTER");
        c
    }

    fn spawn(&self, name: &str, args: &[&str]) -> Bg {
        Bg::spawn(name, self.cmd(args))
    }

    fn ls(&self) -> Value {
        let out = run_cmd(&mut self.cmd(&["ls", "--json"]));
        assert!(out.status.success(), "ls: {}", out.stderr);
        serde_json::from_str(out.stdout.trim()).expect("ls --json")
    }

    /// The consumer `pid` as `ls --json` shows it.
    fn consumer(&self, pid: u32) -> Option<Value> {
        self.ls()["consumers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["info"]["pid"] == pid).cloned())
    }

    /// Records the producer `pid` has written, by `ls`.
    fn records_of(&self, pid: u32) -> u64 {
        self.ls()["producers"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["info"]["pid"] == pid))
            .and_then(|p| p["frames"].as_u64())
            .unwrap_or(0)
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        let _ = run_cmd(&mut self.cmd(&["down"]));
        let _ = std::fs::remove_dir_all(&self.rt);
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
}

/// Checks a workstation line: a record of the remote demo of `steps` steps an episode, with
/// its values; returns its place in the demo's order.
#[track_caller]
fn check_remote(line: &Value, steps: u64) -> u64 {
    assert_eq!(line["producer"]["name"], "demo@node", "{line}");
    let e = line["payload"]["episode"].as_u64().expect("episode");
    let s = line["payload"]["step"].as_u64();
    let mut local = line.clone();
    local["producer"]["name"] = "demo".into();
    check_demo_line(&local, e, s);
    e * (steps + 1) + s.unwrap_or(steps)
}

/// Sum of the losses `echo` reported on stderr.
fn echo_lost(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| l.split("snapbus echo: lost ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_bus_crosses_namespaces_whole_with_history_and_counted_gaps() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the bridge test needs root (network namespaces)"
        );
        eprintln!("skipped: the bridge test needs root (network namespaces)");
        return;
    }
    let octet = std::process::id() % 250 + 1;
    let (a, b) = (format!("10.211.{octet}.1"), format!("10.211.{octet}.2"));
    let netns = Netns::new([&a, &b]);
    let node = Side::new(&netns.names[0], "node");
    let ws = Side::new(&netns.names[1], "ws");
    let listen = format!("tcp/{a}:7447");
    let send = ["bridge", "--send", "--host", "node", "--listen", &listen];
    let bridge = node.spawn("node bridge", &send);
    bridge.expect_stderr("sending");
    let connect = format!("tcp/{a}:7447");
    let station = late_workstation_gets_the_ring(&node, &ws, &connect);
    let bridge = restarted_node_bridge_is_counted_loss(&node, &ws, &send, bridge, &station);
    bridges_both_ways_relay_nothing_back(&node, &ws, &b, bridge);
}

/// A finished run on the node: the workstation, started after it, gets it from the node's ring,
/// whole and numbered as there. Returns the workstation's bridge.
fn late_workstation_gets_the_ring(node: &Side, ws: &Side, connect: &str) -> Bg {
    short_demo(node);
    let echo = ws.spawn("ws echo", &["echo", "--from", "oldest", "demo.*"]);
    echo.expect_stderr("subscribed");
    let station = ws.spawn("ws bridge", &["bridge", "--receive", "--connect", connect]);
    let lines = echo.json_lines(24);
    let places: Vec<u64> = lines.iter().map(|l| check_remote(l, 5)).collect();
    assert_eq!(
        places,
        (0..24).collect::<Vec<_>>(),
        "the whole grid, in order, once"
    );
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, places, "numbered as on the node");
    station
}

/// A live run on a small ring; the node's bridge is killed mid-run, restarted after the ring
/// has lapped: its gap arrives as counted loss (echo, `ls`), everything else intact; the
/// node's producers end here too.
fn restarted_node_bridge_is_counted_loss(
    node: &Side,
    ws: &Side,
    send: &[&str],
    mut bridge: Bg,
    station: &Bg,
) -> Bg {
    let echo = ws.spawn("ws echo 2", &["echo", "demo.*"]);
    echo.expect_stderr("subscribed");
    let file = ws.rt.join("ws.mcap");
    let file = file.to_str().expect("utf-8 path");
    let mut rec = ws.spawn("ws recorder", &["record", "-o", file, "--from", "latest"]);
    rec.expect_stderr("recording bus");
    let (episodes, steps) = (20u64, 100u64);
    let mut demo_cmd = node.cmd(&[
        "demo",
        "--no-echo",
        "--no-aggregator",
        "--episodes",
        "20",
        "--steps",
        "100",
        "--rate",
        "300",
    ]);
    demo_cmd.env("SNAPBUS_LANE_BYTES", "65536");
    let mut demo = Bg::spawn("demo 2", demo_cmd);
    let total = demo_order(episodes, steps).len() as u64;
    let mut got = echo.json_lines(100);
    bridge.kill9();
    let at_kill = node.records_of(demo.pid());
    // 64 KiB hold a few hundred of these records: 1000 more laps the ring.
    wait_until("the node's ring has lapped", WATCHDOG, || {
        node.records_of(demo.pid()) >= at_kill + 1000
    });
    let bridge = node.spawn("node bridge 2", send);
    bridge.expect_stderr("sending");
    let (status, _) = demo.wait();
    assert!(status.success(), "demo 2: {}", demo.log());
    // Every record either arrives or is counted lost: wait for the last one.
    loop {
        let l = echo.json_lines(1).remove(0);
        let last = l["schema"] == "demo.episode_end" && l["payload"]["episode"] == episodes - 1;
        got.push(l);
        if last {
            break;
        }
    }
    let places: Vec<u64> = got.iter().map(|l| check_remote(l, steps)).collect();
    assert!(
        places.windows(2).all(|w| w[0] < w[1]),
        "in order, nothing twice"
    );
    let lost = echo_lost(&echo.log());
    assert!(lost > 0, "the outage lost records: {}", echo.log());
    assert_eq!(
        got.len() as u64 + lost,
        total,
        "every record arrived or was counted lost\n{}",
        echo.log()
    );
    // The recording holds the same records and the same loss.
    let pid = rustix::process::Pid::from_raw(rec.pid() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let (status, _) = rec.wait();
    let log = rec.log();
    assert!(status.success(), "{log}");
    let summary = format!("snapbus record: {} records ({lost} lost", got.len());
    assert!(log.contains(&summary), "{summary:?} in\n{log}");
    // `ls` shows the loss: the echo's, as for a ring's overwrites, and the bridge's own count.
    wait_until("ls shows the echo's loss", WATCHDOG, || {
        ws.consumer(echo.pid())
            .is_some_and(|c| c["lost"].as_u64() == Some(lost))
    });
    wait_until("ls shows the bridge's loss", WATCHDOG, || {
        ws.consumer(station.pid())
            .is_some_and(|c| c["board"]["in.lost"].as_u64() == Some(lost))
    });
    // The node's producers ended, so do their stand-ins (`echo --until-end`, recorders).
    wait_until("the remote producers are closed here too", WATCHDOG, || {
        let ls = ws.ls();
        let ps = ls["producers"].as_array().cloned().unwrap_or_default();
        let remote: Vec<&Value> = ps
            .iter()
            .filter(|p| p["info"]["name"] == "demo@node")
            .collect();
        remote.len() == 2 && remote.iter().all(|p| p["status"] == "closed")
    });
    bridge
}

/// A short demo run to its end on `side`: 24 records.
fn short_demo(side: &Side) {
    let out = run_cmd(&mut side.cmd(&[
        "demo",
        "--no-echo",
        "--no-aggregator",
        "--episodes",
        "4",
        "--steps",
        "5",
        "--rate",
        "0",
    ]));
    assert!(out.status.success(), "demo: {}", out.stderr);
}

/// The lanes of the producers named `name` on `side`, by `ls`: their ids and records.
fn lanes_named(side: &Side, name: &str) -> Vec<(u64, u64)> {
    let ls = side.ls();
    let ps = ls["producers"].as_array().cloned().unwrap_or_default();
    ps.iter()
        .filter(|p| p["info"]["name"] == name)
        .map(|p| {
            let id = p["info"]["lane_id"].as_u64().expect("lane id");
            (id, p["frames"].as_u64().unwrap_or(0))
        })
        .collect()
}

/// Bridges both ways, each side with a sending and a receiving bridge as separate processes:
/// each side's own runs reach the other, and nothing a station re-emitted goes back out (it
/// would come back as `demo@node@ws`, and round again).
fn bridges_both_ways_relay_nothing_back(node: &Side, ws: &Side, ws_addr: &str, node_send: Bg) {
    let endpoint = format!("tcp/{ws_addr}:7447");
    let ws_send = ["bridge", "--send", "--host", "ws", "--listen", &endpoint];
    let ws_bridge = ws.spawn("ws sending bridge", &ws_send);
    ws_bridge.expect_stderr("sending");
    let _node_station = node.spawn(
        "node receiving bridge",
        &["bridge", "--receive", "--connect", &endpoint],
    );
    // Both directions carry the other side's runs: the node's to the workstation (re-emitted
    // there, where the sending bridge sees them), then the workstation's to the node.
    let before = lanes_named(ws, "demo@node");
    short_demo(node);
    wait_until(
        "the node's new run reaches the workstation",
        WATCHDOG,
        || {
            let now = lanes_named(ws, "demo@node");
            now.iter().any(|l| !before.contains(l) && l.1 == 24)
        },
    );
    short_demo(ws);
    wait_until("the workstation's run reaches the node", WATCHDOG, || {
        lanes_named(node, "demo@ws")
            .iter()
            .map(|l| l.1)
            .collect::<Vec<_>>()
            == [24]
    });
    // Sent after the relayed lanes were there: once it is across, the bridge has been past
    // them.
    short_demo(ws);
    wait_until(
        "the workstation's second run reaches the node",
        WATCHDOG,
        || {
            lanes_named(node, "demo@ws")
                .iter()
                .map(|l| l.1)
                .collect::<Vec<_>>()
                == [24, 24]
        },
    );
    // Nor does a station re-emit its own bus's runs, which reach it through the sending bridge
    // beside it (they do reach it: counted as `in.local`).
    let local = |side: &Side| -> u64 {
        let ls = side.ls();
        let cs = ls["consumers"].as_array().cloned().unwrap_or_default();
        cs.iter()
            .filter_map(|c| c["board"]["in.local"].as_u64())
            .sum()
    };
    // The stand-ins say they are: `relayed` in `ls --json`.
    let ls = ws.ls();
    let ps = ls["producers"].as_array().cloned().unwrap_or_default();
    for p in &ps {
        let remote = p["info"]["name"] == "demo@node";
        assert_eq!(p["info"]["relayed"], remote, "{p}");
    }
    wait_until("each station sees its own bus's records", WATCHDOG, || {
        local(node) > 0 && local(ws) > 0
    });
    for (side, names) in [
        (node, ["demo@node@ws", "demo@ws@node", "demo@node"]),
        (ws, ["demo@ws@node", "demo@node@ws", "demo@ws"]),
    ] {
        for name in names {
            assert_eq!(
                lanes_named(side, name),
                [],
                "{name} on {}: relayed back, or re-emitted into its own bus",
                side.ns
            );
        }
    }
    let sent = || {
        ws.consumer(ws_bridge.pid())
            .and_then(|c| c["board"]["out.sent"].as_u64())
            .unwrap_or(0)
    };
    wait_until("ls shows what the bridge sent", WATCHDOG, || sent() >= 48);
    assert_eq!(
        sent(),
        48,
        "the workstation's bridge sent its own two runs, nothing relayed"
    );
    drop(node_send);
}

//! `attach KIND [ARGS…]` takes the consumer's own arguments (issue 16, item 4): every flag of
//! the foreground verb is one of `attach KIND` (and of `spawn KIND`), and an attached consumer
//! runs with the arguments it was given. (The parsers themselves are compared flag by flag in
//! the unit tests of `cli/src/consumer_kinds.rs`.)

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, run, run_cmd};

/// The built-in consumers: (`attach` kind, foreground verb).
const KINDS: [(&str, &str); 6] = [
    ("recorder", "record"),
    ("plotter", "plot"),
    ("aggregator", "aggregate"),
    ("python", "python"),
    ("rerun", "rerun"),
    ("monty", "monty"),
];

/// The `--long` flags a `--help` text lists.
fn flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| l.split_whitespace())
        .filter(|w| w.starts_with("--"))
        .map(|w| w.trim_end_matches(',').to_owned())
        .collect()
}

fn help(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {}", out.stderr);
    out.stdout
}

#[test]
fn attach_help_shows_every_flag_of_the_consumers_own_verb() {
    for (kind, verb) in KINDS {
        let own = flags(&help(&[verb, "--help"]));
        assert!(own.contains("--bus"), "{verb}: {own:?}");
        let attach = flags(&help(&["attach", kind, "--help"]));
        let missing: Vec<_> = own.difference(&attach).collect();
        assert!(missing.is_empty(), "attach {kind} lacks {missing:?}");
        for extra in ["--foreground", "--restart"] {
            assert!(attach.contains(extra), "attach {kind}: {attach:?}");
        }
    }
    let own = flags(&help(&["aggregate", "--help"]));
    let spawn = flags(&help(&["spawn", "aggregator", "--help"]));
    let missing: Vec<_> = own.difference(&spawn).collect();
    assert!(missing.is_empty(), "spawn aggregator lacks {missing:?}");
}

#[test]
fn bad_consumer_arguments_fail_in_the_caller_with_clap_s_message() {
    let bus = TestBus::up();
    for (args, needle) in [
        (
            &["attach", "recorder", "-o", "x.mcap", "--nope"][..],
            "--nope",
        ),
        (&["attach", "plotter", "--history", "1"][..], "--history"),
        (
            &["attach", "aggregator", "--window", "weekly"][..],
            "--window",
        ),
        (&["spawn", "aggregator", "--from", "middle"][..], "--from"),
    ] {
        let out = bus.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    let ls = bus.ls();
    assert_eq!(ls["consumers"].as_array().map(Vec::len), Some(0), "{ls}");
}

/// An attached recorder records what its flags say: `--from oldest` (the history, emitted
/// before it was attached), `--schema` (one schema of two), into `-o` relative to the caller's
/// working directory.
#[test]
fn an_attached_consumer_runs_with_the_arguments_it_was_given() {
    let bus = TestBus::up();
    bus.demo(2, 3, 0, &[]);
    let cwd = crate::util::runtime_root().join(format!("attach-cwd-{}", bus.name));
    std::fs::create_dir_all(cwd.join("sub")).expect("cwd");
    let out = run_cmd(
        bus.cmd(&[
            "attach",
            "recorder",
            "-o",
            "sub/rec.mcap",
            "--from",
            "oldest",
            "--schema",
            "demo.step",
        ])
        .current_dir(&cwd),
    );
    assert!(out.status.success(), "attach: {}", out.stderr);
    let id = out.stdout.trim().to_owned();
    let file = cwd.join("sub/rec.mcap");
    let records = |file: &Path| -> Vec<Value> {
        let out = bus.run(&["replay", "--print", file.to_str().expect("utf-8")]);
        out.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    wait_until("the history is in the file", WATCHDOG, || {
        records(&file).len() == 6
    });
    // Its status board, as `ls` shows it: the file it writes and what is in it.
    let board = |ls: &Value| -> Value {
        ls["consumers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["id"].as_u64() == id.parse().ok()))
            .map(|c| c["board"].clone())
            .unwrap_or(Value::Null)
    };
    wait_until("the recorder's board shows its file", WATCHDOG, || {
        let b = board(&bus.ls());
        b["file"] == file.to_str().expect("utf-8") && b["messages"].as_u64() >= Some(6)
    });
    let text = bus.run(&["ls"]).stdout;
    assert!(
        text.contains(&format!("consumer {id} (recorder): file=")),
        "ls shows no board line: {text}"
    );
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);
    let got = records(&file);
    assert_eq!(got.len(), 6, "{got:?}");
    assert!(got.iter().all(|r| r["schema"] == "demo.step"), "{got:?}");
    let _ = std::fs::remove_dir_all(&cwd);
}

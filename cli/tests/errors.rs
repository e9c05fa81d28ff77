//! Bad input gets a clear message and a non-zero exit, never a panic.

use crate::util::run;

#[test]
fn bad_arguments_are_refused_with_a_message() {
    for (args, needle) in [
        (&["demo", "--image", "0x3"][..], "WIDTHxHEIGHT"),
        (&["demo", "--image", "big"][..], "WIDTHxHEIGHT"),
        (&["demo", "--episodes", "many"][..], "--episodes"),
        (&["demo", "--rate=-1"][..], "--rate must be"),
        (&["demo", "--rate", "NaN"][..], "--rate must be"),
        (&["frobnicate"][..], "unrecognized subcommand"),
        (
            &["aggregate", "--window", "fortnight"][..],
            "expected episode, steps:N",
        ),
        (
            &["aggregate", "--window", "steps:0"][..],
            "expected episode, steps:N",
        ),
        (
            &["aggregate", "--window", "secs:-1"][..],
            "expected episode, steps:N",
        ),
        (&["aggregate", "--worker", "4/3"][..], "expected I/N"),
        (&["aggregate", "--group-by", "a..b"][..], "not a field path"),
        (&["aggregate", "--schema", "bad glob!"][..], "glob"),
        (&["aggregate", "--field", "x y"][..], "--field"),
        (&["spawn", "aggregator", "-n", "0"][..], "--workers"),
        (
            &["aggregate", "--bus", "nobody-here"][..],
            "no bus 'nobody-here' is running",
        ),
        (
            &["attach", "aggregator", "--bus", "nobody-here"][..],
            "no bus",
        ),
        (
            &["spawn", "aggregator", "--worker", "2/2"][..],
            "set by spawn",
        ),
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn every_verb_has_help() {
    for verb in [
        "up",
        "down",
        "ls",
        "echo",
        "hz",
        "filter",
        "demo",
        "schemas",
        "aggregate",
        "spawn",
        "python",
    ] {
        let out = run(&[verb, "--help"]);
        assert!(out.status.success(), "{verb}: {}", out.stderr);
        assert!(
            out.stdout.contains("Usage: snapbus"),
            "{verb}: {}",
            out.stdout
        );
    }
    let demo = run(&["demo", "--help"]);
    assert!(
        demo.stdout
            .contains("reward       = ((31*e + 17*s) % 11) / 10 - 0.5"),
        "{}",
        demo.stdout
    );
}

/// Issue 15, item 13: a bus name starting with '-' is refused up front, by every verb and from
/// `$SNAPBUS_BUS`, instead of reaching the broker's command line as an option.
#[test]
fn bus_names_starting_with_a_dash_are_refused() {
    for args in [
        &["up", "--bus=-x"][..],
        &["up", "--bus=--help"][..],
        &["ls", "--bus=-x"][..],
        &["attach", "aggregator", "--bus=-x"][..],
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            out.stderr.contains("invalid bus name") && out.stderr.contains("'-'"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{args:?}: {}", out.stderr);
    }
    let out = crate::util::run_cmd(crate::util::snapbus().env("SNAPBUS_BUS", "-x").arg("up"));
    assert!(!out.status.success());
    out.assert_stderr_has("invalid bus name");
}

/// Issue 15, item 13: values the CLI passes on to a supervised consumer are passed as
/// `--flag=VALUE`, so a glob starting with '-' reaches it as a glob, not as an option.
#[test]
fn consumer_arguments_starting_with_a_dash_reach_the_consumer() {
    let bus = crate::bus::TestBus::up();
    let out = bus.run(&[
        "attach",
        "aggregator",
        "--schema=-odd.*",
        "--restart",
        "never",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    let id = out.stdout.trim().to_owned();
    let c = bus.consumer_by_id(&id).expect("the aggregator in ls");
    assert!(
        c["status"]
            .as_str()
            .is_some_and(|s| s.starts_with("running")),
        "{c}"
    );
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "{}", out.stderr);
}

/// Issue 15, item 17: an error whose message already holds its cause's text is not printed
/// with the cause a second time.
#[test]
fn errors_print_each_cause_once() {
    let out = crate::util::run_cmd(
        crate::util::snapbus()
            .env("SNAPBUS_RUNTIME_DIR", "/nonexistent-snapbus-dir/rt")
            .arg("up"),
    );
    assert!(!out.status.success());
    let os = "No such file or directory (os error 2)";
    assert_eq!(out.stderr.matches(os).count(), 1, "{}", out.stderr);
    let bus = crate::bus::TestBus::up();
    for verb in ["record", "snapshot"] {
        let out = bus.run(&[verb, "-o", "/nonexistent-snapbus-dir/r.mcap"]);
        assert!(!out.status.success(), "{verb}");
        assert_eq!(out.stderr.matches(os).count(), 1, "{verb}: {}", out.stderr);
        assert!(
            out.stderr.contains("/nonexistent-snapbus-dir/r.mcap"),
            "{verb}: {}",
            out.stderr
        );
    }
}

/// Issue 15, item 16: `replay` checks every file before it prints or publishes anything.
#[test]
fn replay_checks_every_file_before_printing_anything() {
    let good = crate::export::tmp("replay-good.mcap");
    crate::export::record_mixed(&good);
    let good = good.to_str().expect("utf-8");
    let missing = "/nonexistent-snapbus-dir/r.mcap";
    let out = run(&["replay", "--print", good, missing]);
    assert!(!out.status.success());
    out.assert_stderr_has(missing);
    assert_eq!(out.stdout, "", "nothing is printed before the check");
    // Not a recording at all.
    let not_mcap = crate::export::tmp("replay-not.mcap");
    std::fs::write(&not_mcap, b"hello, not a recording").expect("write");
    let out = run(&["replay", "--print", good, not_mcap.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert_eq!(out.stdout, "", "{}", out.stderr);
}

/// Issue 15, item 16: an empty replay producer name is refused.
#[test]
fn replay_refuses_an_empty_name() {
    let good = crate::export::tmp("replay-name.mcap");
    crate::export::record_mixed(&good);
    for name in ["", " ", "a\nb"] {
        let out = run(&[
            "replay",
            "--name",
            name,
            "--max",
            good.to_str().expect("utf-8"),
        ]);
        assert!(!out.status.success(), "{name:?}");
        assert!(out.stderr.contains("--name"), "{name:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
}

/// Issue 15, item 16: `snapshot --schema` matching no schema on the bus fails before the file
/// is created, naming the schemas that are there.
#[test]
fn snapshot_of_a_schema_glob_that_matches_nothing_is_an_error() {
    let bus = bus_after_a_short_demo();
    let file = crate::export::tmp("snap-nomatch.mcap");
    let out = bus.run(&[
        "snapshot",
        "-o",
        file.to_str().expect("utf-8"),
        "--schema",
        "nomatch.*",
    ]);
    assert!(!out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("'nomatch.*'") && out.stderr.contains("demo.step"),
        "{}",
        out.stderr
    );
    assert!(!file.exists(), "no file is created");
}

/// Issue 15, item 17: `record --rotate-mb` and `attach recorder --rotate-mb` name the files
/// they really write (`run-0000.mcap`, …), not `run.mcap`.
#[test]
fn rotating_recorders_name_the_files_they_write() {
    let bus = crate::bus::TestBus::up();
    let run_mcap = crate::export::tmp("rotname.mcap");
    let path = run_mcap.to_str().expect("utf-8");
    let first = crate::export::tmp("rotname-0000.mcap");
    let first = first.to_str().expect("utf-8");
    let out = bus.run(&["attach", "recorder", "--rotate-mb", "1", "-o", path]);
    assert!(out.status.success(), "{}", out.stderr);
    out.assert_stderr_has(first);
    assert!(!out.stderr.contains(&format!("{path} ")), "{}", out.stderr);
    let out = bus.run(&["detach", out.stdout.trim()]);
    assert!(out.status.success(), "{}", out.stderr);

    let second = crate::export::tmp("rotname2.mcap");
    let rec = bus.spawn(
        "record",
        &[
            "record",
            "--rotate-mb",
            "1",
            "-o",
            second.to_str().expect("utf-8"),
        ],
    );
    let line = rec.expect_stderr("recording bus");
    let want = crate::export::tmp("rotname2-0000.mcap");
    assert!(line.contains(want.to_str().expect("utf-8")), "{line}");
}

/// A bus whose rings hold a short demo that has ended (1 episode of 3 steps): its schemas are
/// on the bus.
fn bus_after_a_short_demo() -> crate::bus::TestBus {
    let bus = crate::bus::TestBus::up();
    bus.demo(1, 3, 0, &[]);
    bus
}

/// The ids of the consumers in `ls`.
fn consumer_ids(bus: &crate::bus::TestBus) -> Vec<String> {
    bus.consumers()
        .iter()
        .map(|c| c["id"].to_string())
        .collect()
}

/// Issue 15, item 16: `aggregate --csv DIR` where no file can be created fails before anything
/// is read; `attach aggregator` fails in the caller and starts nothing.
#[test]
fn aggregate_csv_into_an_unwritable_directory_fails_before_reading() {
    let bus = bus_after_a_short_demo();
    // /proc exists and takes no new files, even for root.
    let out = bus.run(&["aggregate", "--until-end", "--csv", "/proc"]);
    assert!(!out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("--csv: cannot create files in /proc");
    assert!(!out.stderr.contains("summarizing"), "{}", out.stderr);
    let out = bus.run(&["attach", "aggregator", "--csv", "/proc"]);
    assert!(!out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("--csv");
    assert_eq!(consumer_ids(&bus), Vec::<String>::new());
}

/// Issue 15, item 16: an aggregator `--schema` that matches no schema on the bus is an error
/// with `--until-end` and a warning to the caller on a live bus, naming the schemas there.
#[test]
fn aggregate_schema_globs_that_match_nothing_are_reported() {
    let bus = bus_after_a_short_demo();
    let out = bus.run(&["aggregate", "--until-end", "--schema", "nomatch.*"]);
    assert!(!out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("'nomatch.*'") && out.stderr.contains("demo.step"),
        "{}",
        out.stderr
    );
    let out = bus.run(&[
        "spawn",
        "aggregator",
        "-n",
        "2",
        "--until-end",
        "--schema",
        "nomatch.*",
    ]);
    assert!(!out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("demo.step");
    assert_eq!(consumer_ids(&bus), Vec::<String>::new());
    let out = attach_and_detach(&bus, &["attach", "aggregator", "--schema", "nomatch.*"]);
    assert!(
        out.stderr.contains("warning") && out.stderr.contains("demo.step"),
        "{}",
        out.stderr
    );
}

/// `ARGS` (an `attach`), which succeeds, then `detach` of the consumer it started; what the
/// `attach` printed.
fn attach_and_detach(bus: &crate::bus::TestBus, args: &[&str]) -> crate::util::Output {
    let out = bus.run(args);
    assert!(out.status.success(), "{}", out.stderr);
    let detached = bus.run(&["detach", out.stdout.trim()]);
    assert!(detached.status.success(), "{}", detached.stderr);
    out
}

/// Issue 15, item 16: `--field` and `--episode-field` that name no field of the summarized
/// schemas: an error with `--until-end`, a warning (in the log of an attached aggregator)
/// otherwise.
#[test]
fn aggregate_fields_that_match_nothing_are_reported() {
    let bus = bus_after_a_short_demo();
    for (flag, needle) in [
        ("--field", "--field 'nope' matched no field of demo.step v1"),
        ("--episode-field", "--episode-field 'nope'"),
    ] {
        let out = bus.run(&[
            "aggregate",
            "--until-end",
            "--schema",
            "demo.step",
            flag,
            "nope",
        ]);
        assert!(!out.status.success(), "{flag}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{flag}: {}", out.stderr);
    }
    let out = bus.run(&[
        "attach",
        "aggregator",
        "--schema",
        "demo.step",
        "--field",
        "nope",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    // The caller is told (the demo's schemas are known to this build).
    out.assert_stderr_has("warning: --field 'nope' matches no numeric field of demo.step v1");
    let id = out.stdout.trim().to_owned();
    let log = bus
        .consumer_by_id(&id)
        .and_then(|c| c["log"].as_str().map(str::to_owned))
        .expect("the aggregator's log");
    crate::bus::wait_until(
        "the aggregator warns about --field",
        crate::util::WATCHDOG,
        || {
            std::fs::read_to_string(&log)
                .is_ok_and(|l| l.contains("warning: --field 'nope' matches no numeric field"))
        },
    );
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "{}", out.stderr);
    let out = attach_and_detach(
        &bus,
        &[
            "attach",
            "aggregator",
            "--schema",
            "demo.step",
            "--episode-field",
            "nope",
        ],
    );
    out.assert_stderr_has("warning: demo.step v1 has no integer field \"nope\"");
}

/// Issue 15, item 16 (and the repro of item 8): `attach recorder -o PATH` where the file cannot
/// be created fails in the caller, and starts no consumer.
#[test]
fn attach_recorder_into_an_unwritable_place_starts_nothing() {
    let bus = crate::bus::TestBus::up();
    for (path, needle) in [
        (
            "/nonexistent-snapbus-dir/r.mcap",
            "cannot create files in /nonexistent-snapbus-dir",
        ),
        ("/proc/r.mcap", "cannot create files in /proc"),
    ] {
        let out = bus.run(&["attach", "recorder", "-o", path]);
        assert!(!out.status.success(), "{path}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{path}: {}", out.stderr);
        assert_eq!(out.stderr.matches("os error").count(), 1, "{}", out.stderr);
    }
    assert_eq!(consumer_ids(&bus), Vec::<String>::new());
}

/// A negative number given to a numeric option (none takes one) is refused naming the option
/// and the value, as `--rate -1` and as `--rate=-1`, not with clap's tip to write `-- -1`
/// (which is wrong for an option): one row per numeric option of every verb that has one.
#[test]
fn negative_values_get_a_clear_error() {
    let f = "/nonexistent/f.mcap";
    for (verb, option, value) in [
        (&["up"][..], "--retention-secs", "-1"),
        (&["echo"][..], "--count", "-3"),
        (&["hz"][..], "--period-secs", "-1"),
        (&["hz"][..], "--reports", "-2"),
        (&["demo"][..], "--episodes", "-1"),
        (&["demo"][..], "--steps", "-1"),
        (&["demo"][..], "--rate", "-1"),
        (&["snapshot", "-o", f][..], "--last", "-5s"),
        (&["replay", f][..], "--speed", "-2"),
        (&["export", f, "--format", "jsonl"][..], "--timeout", "-1s"),
        (&["plot"][..], "--port", "-80"),
        (&["plot"][..], "--history", "-10"),
        (&["prometheus"][..], "--port", "-1"),
        (&["prometheus"][..], "--max-series", "-1"),
        (&["prometheus"][..], "--series-ttl", "-1m"),
        (&["otlp"][..], "--interval", "-1s"),
        (&["otlp"][..], "--max-queue-bytes", "-1"),
        (&["otlp"][..], "--max-series", "-1"),
        (&["record", "-o", f][..], "--rotate-mb", "-4"),
        (&["attach", "recorder", "-o", f][..], "--rotate-mb", "-4"),
        (&["spawn", "aggregator"][..], "-n", "-1"),
        (&["spawn", "aggregator"][..], "--workers", "-1"),
    ] {
        let joined = format!("{option}={value}");
        let forms: [&[&str]; 2] = [&[option, value], &[&joined]];
        for form in forms {
            if form.len() == 1 && !option.starts_with("--") {
                continue;
            }
            let args: Vec<&str> = verb.iter().chain(form).copied().collect();
            let out = run(&args);
            assert!(!out.status.success(), "{args:?} succeeded");
            let said = out.stderr.trim();
            assert!(
                said.contains(&format!("{option} takes no negative value (got '{value}')"))
                    || (form.len() == 1 && said.contains(option) && said.contains(value)),
                "{args:?}: {said}"
            );
            assert!(!said.contains("-- -"), "{args:?}: clap's tip: {said}");
            assert!(!said.contains("panicked"), "{args:?}: {said}");
        }
    }
    // A negative number where no option wants one (a consumer id).
    let out = run(&["detach", "-1"]);
    assert!(!out.status.success());
    assert!(
        out.stderr
            .contains("no argument here takes a negative number"),
        "{}",
        out.stderr
    );
}

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

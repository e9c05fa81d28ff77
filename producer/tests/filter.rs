//! Directive parsing and target matching, against a brute-force reference.

use std::ffi::OsStr;
use std::process::Command;

use proptest::prelude::*;
use snapbus::{Filter, Level, LevelFilter};

const ALL_LEVELS: [Level; 5] = [
    Level::TRACE,
    Level::DEBUG,
    Level::INFO,
    Level::WARN,
    Level::ERROR,
];

fn lf(s: &str) -> LevelFilter {
    s.parse().expect("level")
}

fn parse(s: &str) -> Filter {
    s.parse().expect("valid directives")
}

/// Asserts that `f` gives each of `targets` the level `want`.
fn assert_level(f: &Filter, want: LevelFilter, targets: &[&str]) {
    for target in targets {
        assert_eq!(f.level_for(target), want, "{target:?}");
    }
}

#[test]
fn the_most_specific_matching_target_wins() {
    let f = parse("warn,monty=info,monty.models=debug,monty.models.noisy=off");
    assert_level(&f, LevelFilter::WARN, &["other"]);
    assert_level(&f, LevelFilter::INFO, &["monty", "monty.env"]);
    assert_level(
        &f,
        LevelFilter::DEBUG,
        &["monty.models", "monty.models.policy"],
    );
    let noisy = ["monty.models.noisy", "monty.models.noisy.deep"];
    assert_level(&f, LevelFilter::OFF, &noisy);
    // The order of the directives does not matter.
    let g = parse("monty.models.noisy=off,monty.models=debug,monty=info,warn");
    assert_eq!(g, f);
}

#[test]
fn a_target_matches_only_whole_segments() {
    let f = parse("error,monty.model=trace,mon=debug");
    assert_level(
        &f,
        LevelFilter::ERROR,
        &["monty.models", "monty", "montypython"],
    );
    assert_level(&f, LevelFilter::TRACE, &["monty.model", "monty.model.x"]);
    assert_level(&f, LevelFilter::DEBUG, &["mon.ty"]);
    // A directive longer than the target does not match it.
    assert_level(&f, LevelFilter::ERROR, &["monty.", ""]);
}

#[test]
fn double_colon_and_dot_are_the_same_separator() {
    let f = parse("error,monty::models=debug,monty.models::noisy=off");
    assert_eq!(f, parse("error,monty.models=debug,monty::models.noisy=off"));
    assert_eq!(f.level_for("monty.models.x"), LevelFilter::DEBUG);
    assert_eq!(f.level_for("monty::models::x"), LevelFilter::DEBUG);
    assert_eq!(f.level_for("monty::models.noisy"), LevelFilter::OFF);
    assert_eq!(
        f.to_string(),
        "error,monty.models=debug,monty.models.noisy=off"
    );
}

#[test]
fn the_default_is_info_and_blank_items_and_whitespace_are_fine() {
    for text in ["", "  ", ",", " , ,", "info", " INFO ,"] {
        assert_eq!(parse(text), Filter::default(), "{text:?}");
    }
    let f = parse(" , monty = debug , \t");
    assert_eq!(f.level_for("x"), LevelFilter::INFO);
    assert_eq!(f.level_for("monty"), LevelFilter::DEBUG);
    assert_eq!(Filter::default().default_level(), LevelFilter::INFO);
    assert_eq!(Filter::default().to_string(), "info");
}

#[test]
fn off_enables_no_level() {
    let f = parse("off,monty=OFF");
    for target in ["x", "monty", "monty.models"] {
        let level = f.level_for(target);
        assert_eq!(level, LevelFilter::OFF);
        assert!(ALL_LEVELS.iter().all(|l| !level.enabled(*l)), "{target}");
    }
    assert_eq!(f.max_level(), LevelFilter::OFF);
    assert_eq!(f.to_string(), "off,monty=off");
    // Off by default, one target on.
    let g = parse("off,monty.models=warn");
    assert_eq!(g.level_for("monty"), LevelFilter::OFF);
    assert_eq!(g.level_for("monty.models"), LevelFilter::WARN);
    assert_eq!(g.max_level(), LevelFilter::WARN);
}

#[test]
fn max_level_is_the_most_verbose_level_any_directive_enables() {
    assert_eq!(parse("").max_level(), LevelFilter::INFO);
    assert_eq!(parse("error,a=warn,b=off").max_level(), LevelFilter::WARN);
    assert_eq!(parse("error,a.b.c=trace").max_level(), LevelFilter::TRACE);
    assert_eq!(parse("debug,a=error").max_level(), LevelFilter::DEBUG);
}

#[test]
fn a_later_directive_for_the_same_target_replaces_an_earlier_one() {
    let f = parse("trace,a.b=debug,error,a::b=off");
    assert_eq!(f.default_level(), LevelFilter::ERROR);
    assert_eq!(f.level_for("a.b"), LevelFilter::OFF);
    assert_eq!(f.max_level(), LevelFilter::ERROR);
    assert_eq!(f.to_string(), "error,a.b=off");
}

#[test]
fn bad_directives_name_the_directive_and_the_problem() {
    for (text, directive, why) in [
        ("info,monty=loud", "monty=loud", "unknown level \"loud\""),
        ("monty=", "monty=", "unknown level \"\""),
        ("blah", "blah", "unknown level \"blah\""),
        (
            "monty.models",
            "monty.models",
            "unknown level \"monty.models\" (expected trace, debug, info, warn, error or off); \
             a target needs '=LEVEL'",
        ),
        ("=debug", "=debug", "the target before '=' is empty"),
        (" = debug", "= debug", "the target before '=' is empty"),
        ("a=b=c", "a=b=c", "more than one '='"),
        ("info, a==debug ,", "a==debug", "more than one '='"),
        (
            "mon ty=debug",
            "mon ty=debug",
            "target segment \"mon ty\" has a character other than A-Z a-z 0-9 _",
        ),
        (
            "a-b=debug",
            "a-b=debug",
            "target segment \"a-b\" has a character other than A-Z a-z 0-9 _",
        ),
        (
            "a:b=debug",
            "a:b=debug",
            "target segment \"a:b\" has a character other than",
        ),
        (
            "mödel=debug",
            "mödel=debug",
            "target segment \"mödel\" has a character other than",
        ),
        (
            "a..b=debug",
            "a..b=debug",
            "target \"a..b\" has an empty segment",
        ),
        ("a.=debug", "a.=debug", "target \"a.\" has an empty segment"),
        (
            "::a=debug",
            "::a=debug",
            "target \"::a\" has an empty segment",
        ),
    ] {
        let err = text.parse::<Filter>().expect_err(text);
        assert_eq!(err.directive, directive, "{text}");
        let msg = err.to_string();
        let prefix = format!("invalid filter directive {directive:?}: ");
        assert!(msg.starts_with(&prefix), "{text}: {msg}");
        assert!(msg.contains(why), "{text}: {msg}");
    }
}

/// What `Filter::from_env()` returns in a child process, as `ok FILTER` or `err MESSAGE`.
#[test]
#[ignore = "run by `from_env_reads_snapbus_filter_and_defaults_to_info` in a child process with SNAPBUS_FILTER set"]
fn from_env_in_this_process() {
    match Filter::from_env() {
        Ok(f) => println!("from_env: ok {f}"),
        Err(e) => println!("from_env: err {e}"),
    }
}

fn from_env_in_child(value: Option<&OsStr>) -> String {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([
        "--exact",
        "filter::from_env_in_this_process",
        "--ignored",
        "--nocapture",
    ]);
    match value {
        Some(v) => cmd.env("SNAPBUS_FILTER", v),
        None => cmd.env_remove("SNAPBUS_FILTER"),
    };
    let out = cmd.output().expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("from_env: "))
        .unwrap_or_else(|| panic!("no result in the child's output: {stdout}"))
        .to_owned()
}

#[test]
fn from_env_reads_snapbus_filter_and_defaults_to_info() {
    assert_eq!(from_env_in_child(None), "ok info");
    assert_eq!(from_env_in_child(Some(OsStr::new(""))), "ok info");
    assert_eq!(
        from_env_in_child(Some(OsStr::new("warn,monty::models=debug"))),
        "ok warn,monty.models=debug"
    );
    assert_eq!(
        from_env_in_child(Some(OsStr::new("warn,monty=loud"))),
        "err invalid filter directive \"monty=loud\": unknown level \"loud\" (expected trace, \
         debug, info, warn, error or off)"
    );
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let got = from_env_in_child(Some(OsStr::from_bytes(b"info,\xff=debug")));
        assert!(
            got.starts_with("err ") && got.ends_with("SNAPBUS_FILTER is not valid UTF-8"),
            "{got}"
        );
    }
}

const NAMES: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// The reference matcher: among the directives whose target is the target's first segments,
/// the longest (and of equal ones the last) wins; else the last default given, else `info`.
fn reference_level_for(
    default: Option<&str>,
    directives: &[(Vec<String>, &str)],
    target: &[String],
) -> LevelFilter {
    let mut best: Option<(usize, &str)> = None;
    for (t, l) in directives {
        let matches = t.len() <= target.len() && t[..] == target[..t.len()];
        if matches && best.is_none_or(|(n, _)| t.len() >= n) {
            best = Some((t.len(), l));
        }
    }
    lf(best.map_or(default.unwrap_or("info"), |(_, l)| l))
}

/// The reference `max_level`: the most verbose of the default and of the directives not
/// replaced by a later one for the same target.
fn reference_max_level(default: Option<&str>, directives: &[(Vec<String>, &str)]) -> LevelFilter {
    let live = directives
        .iter()
        .enumerate()
        .filter(|(i, (t, _))| directives[i + 1..].iter().all(|(u, _)| u != t))
        .map(|(_, (_, l))| *l);
    let rank = |name: &str| NAMES.iter().position(|n| *n == name).expect("name");
    let most = std::iter::once(default.unwrap_or("info"))
        .chain(live)
        .min_by_key(|n| rank(n))
        .expect("at least the default");
    lf(most)
}

fn segs() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "ab", "m_1"]), 1..4)
        .prop_map(|v| v.into_iter().map(str::to_owned).collect())
}

fn level() -> impl Strategy<Value = &'static str> {
    prop::sample::select(NAMES.to_vec())
}

fn sep() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![".", "::"])
}

proptest! {
    #[test]
    fn level_for_and_max_level_match_the_reference_and_display_round_trips(
        default in prop::option::of(level()),
        default_first in any::<bool>(),
        directives in prop::collection::vec((segs(), sep(), level()), 0..8),
        targets in prop::collection::vec((segs(), sep()), 1..10),
        loose in any::<bool>(),
    ) {
        let mut items: Vec<String> = directives
            .iter()
            .map(|(t, sep, l)| format!("{}={l}", t.join(sep)))
            .collect();
        if let Some(d) = default {
            if default_first { items.insert(0, d.to_owned()) } else { items.push(d.to_owned()) }
        }
        let text = if loose {
            format!(" {} ,", items.join(" , "))
        } else {
            items.join(",")
        };
        let f: Filter = text.parse().expect("valid directives");
        let directives: Vec<(Vec<String>, &str)> =
            directives.into_iter().map(|(t, _, l)| (t, l)).collect();
        for (t, sep) in &targets {
            prop_assert_eq!(
                f.level_for(&t.join(sep)),
                reference_level_for(default, &directives, t),
                "target {} in {}", t.join(sep), text
            );
        }
        prop_assert_eq!(f.max_level(), reference_max_level(default, &directives));
        let again: Filter = f.to_string().parse().expect("display parses");
        prop_assert_eq!(&again, &f);
        prop_assert_eq!(again.to_string(), f.to_string());
    }
}

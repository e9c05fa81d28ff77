//! Directive parsing and target matching, against a brute-force reference.

use proptest::prelude::*;
use snapbus::{Filter, LevelFilter};

fn lf(s: &str) -> LevelFilter {
    s.parse().expect("level")
}

#[test]
fn the_most_specific_whole_segment_prefix_wins() {
    let f: Filter = "warn,monty=info,monty.models=debug,monty.models.noisy=off"
        .parse()
        .expect("parse");
    assert_eq!(f.level_for("other"), lf("warn"));
    assert_eq!(f.level_for("monty"), lf("info"));
    assert_eq!(f.level_for("monty.env"), lf("info"));
    assert_eq!(f.level_for("monty.models"), lf("debug"));
    assert_eq!(f.level_for("monty.models.policy"), lf("debug"));
    assert_eq!(f.level_for("monty.models.noisy"), LevelFilter::OFF);
    assert_eq!(f.level_for("monty.models.noisy.deep"), LevelFilter::OFF);
    // Whole segments only: `monty.model` is not a prefix of `monty.models`.
    let g: Filter = "error,monty.model=trace".parse().expect("parse");
    assert_eq!(g.level_for("monty.models"), lf("error"));
    assert_eq!(g.level_for("montypython"), lf("error"));
    assert_eq!(f.max_level(), lf("debug"));
}

#[test]
fn double_colon_and_dot_are_the_same_separator() {
    let f: Filter = "error,monty::models=debug".parse().expect("parse");
    assert_eq!(f.level_for("monty.models.x"), lf("debug"));
    assert_eq!(f.level_for("monty::models::x"), lf("debug"));
    assert_eq!(f.to_string(), "error,monty.models=debug");
}

#[test]
fn the_default_is_info_and_blank_items_are_fine() {
    let f: Filter = " , monty=debug , ".parse().expect("parse");
    assert_eq!(f.level_for("x"), lf("info"));
    assert_eq!("".parse::<Filter>().expect("empty"), Filter::default());
    assert_eq!(Filter::default().to_string(), "info");
}

#[test]
fn bad_directives_name_the_directive_and_the_problem() {
    for (text, directive, why) in [
        ("info,monty=loud", "monty=loud", "unknown level \"loud\""),
        ("blah", "blah", "unknown level \"blah\""),
        ("=debug", "=debug", "the target before '=' is empty"),
        ("a=b=c", "a=b=c", "more than one '='"),
        ("mon ty=debug", "mon ty=debug", "module path segments"),
        ("a..b=debug", "a..b=debug", "module path segments"),
        ("a-b=debug", "a-b=debug", "module path segments"),
    ] {
        let err = text.parse::<Filter>().expect_err(text);
        let msg = err.to_string();
        assert!(msg.contains(&format!("{directive:?}")), "{text}: {msg}");
        assert!(msg.contains(why), "{text}: {msg}");
    }
}

/// The reference: the longest directive target that is a whole-segment prefix.
fn reference(
    default: &str,
    directives: &[(Vec<String>, String)],
    target: &[String],
) -> LevelFilter {
    let mut best: Option<(usize, &str)> = None;
    for (t, l) in directives {
        if t.len() <= target.len() && t[..] == target[..t.len()] {
            // Later directives for the same target replace earlier ones.
            if best.is_none_or(|(n, _)| t.len() >= n) {
                best = Some((t.len(), l));
            }
        }
    }
    lf(best.map_or(default, |(_, l)| l))
}

fn segs() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "ab", "m_1"]), 1..4)
        .prop_map(|v| v.into_iter().map(str::to_owned).collect())
}

fn level() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["trace", "debug", "info", "warn", "error", "off"])
        .prop_map(str::to_owned)
}

proptest! {
    #[test]
    fn level_for_matches_the_reference_and_display_round_trips(
        default in level(),
        directives in prop::collection::vec((segs(), level()), 0..6),
        targets in prop::collection::vec(segs(), 1..10),
        colons in any::<bool>(),
    ) {
        let sep = if colons { "::" } else { "." };
        let text: Vec<String> = std::iter::once(default.clone())
            .chain(directives.iter().map(|(t, l)| format!("{}={l}", t.join(sep))))
            .collect();
        let f: Filter = text.join(",").parse().expect("valid directives");
        for t in &targets {
            prop_assert_eq!(f.level_for(&t.join(".")), reference(&default, &directives, t));
        }
        let again: Filter = f.to_string().parse().expect("display parses");
        prop_assert_eq!(again, f);
    }
}

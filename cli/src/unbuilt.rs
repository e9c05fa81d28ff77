//! A clear error for a verb (or `attach` kind) this build left out: `snapbus bridge` from a
//! `snapbus` built without the `bridge` feature says so and how to get it, instead of clap's
//! "unrecognized subcommand".

use clap::error::{ContextKind, ErrorKind};

/// The verbs (and `attach` kinds) behind a cargo feature of the CLI: name, feature, and
/// whether this build has it (a name of a built feature mistyped where it does not belong,
/// `attach plot`, keeps clap's error and its suggestion).
const GATED: &[(&str, &str, bool)] = &[
    ("bridge", "bridge", cfg!(feature = "bridge")),
    ("plot", "plotter", cfg!(feature = "plotter")),
    ("plotter", "plotter", cfg!(feature = "plotter")),
    ("aggregate", "aggregator", cfg!(feature = "aggregator")),
    ("aggregator", "aggregator", cfg!(feature = "aggregator")),
    ("prometheus", "prometheus", cfg!(feature = "prometheus")),
    ("otlp", "otlp", cfg!(feature = "otlp")),
    ("foxglove", "foxglove", cfg!(feature = "foxglove")),
    ("mcp", "mcp", cfg!(feature = "mcp")),
];

/// The message for `err`, clap's error, if it is about a subcommand this build left out.
pub(crate) fn unbuilt_verb_error(err: &clap::Error) -> Option<String> {
    if err.kind() != ErrorKind::InvalidSubcommand {
        return None;
    }
    let verb = err.get(ContextKind::InvalidSubcommand)?.to_string();
    let (_, feature, _) = GATED
        .iter()
        .find(|(name, _, built)| *name == verb && !built)?;
    Some(format!(
        "'{verb}' is not in this build of snapbus (built without the cargo feature `{feature}`); \
         build it with `cargo build --release -p snapbus-cli --features {feature}`"
    ))
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;
    use crate::command::Cli;

    fn message(args: &[&str]) -> Option<String> {
        let err = Cli::try_parse_from(args).err()?;
        unbuilt_verb_error(&err)
    }

    #[test]
    fn a_verb_left_out_says_which_feature_brings_it() {
        let built = |name: &str| Cli::command().find_subcommand(name).is_some();
        if built("bridge") {
            assert_eq!(message(&["snapbus", "bridge", "--send"]), None);
        } else {
            let m = message(&["snapbus", "bridge", "--send"]).expect("a message");
            assert!(m.contains("feature `bridge`"), "{m}");
            let m = message(&["snapbus", "attach", "bridge"]).expect("a message");
            assert!(m.contains("--features bridge"), "{m}");
        }
    }

    #[test]
    fn an_unknown_verb_keeps_clap_s_error() {
        assert_eq!(message(&["snapbus", "frobnicate"]), None);
        assert_eq!(message(&["snapbus", "ls"]), None);
    }

    #[test]
    fn a_built_feature_s_name_in_the_wrong_place_keeps_clap_s_error() {
        // `plot` is the verb, `plotter` the attach kind: with the plotter built, `attach
        // plot` is a typo, not a missing feature.
        if cfg!(feature = "plotter") {
            assert_eq!(message(&["snapbus", "attach", "plot"]), None);
            assert_eq!(message(&["snapbus", "plotter"]), None);
        } else {
            assert!(message(&["snapbus", "attach", "plot"]).is_some());
        }
    }
}

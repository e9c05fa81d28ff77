//! A clear error for a negative number given to an option (or argument) that takes none.
//!
//! clap reads `--rate -1` as the option `--rate` with no value and a flag `-1` (and
//! `--last -5s` as flags `-5` and `-s`), and then tips "to pass '-1' as a value, use '-- -1'",
//! which is wrong for an option; `--count=-3` gets "invalid digit found in string". No option
//! of `snapbus` takes a negative value, so either error, when the value is a negative number,
//! becomes "--rate takes no negative value (got '-1')".

use clap::error::{ContextKind, ErrorKind};

/// The message for `err`, clap's error for `args` (the whole command line, program first), if
/// it is about a negative number; `None` for any other error.
pub(crate) fn negative_value_error(
    cmd: &clap::Command,
    err: &clap::Error,
    args: &[String],
) -> Option<String> {
    let context = |kind| err.get(kind).map(ToString::to_string);
    match err.kind() {
        ErrorKind::UnknownArgument => {
            // The unexpected argument (`-5` of `-5s`): the word it begins, after the option
            // that wanted it as its value.
            let invalid = context(ContextKind::InvalidArg)?;
            let at = args
                .iter()
                .position(|a| a.starts_with(&invalid) && looks_negative(a))?;
            let value = &args[at];
            let option = at
                .checked_sub(1)
                .map(|i| args[i].as_str())
                .filter(|o| takes_value(cmd, o));
            Some(match option {
                Some(option) => format!("{option} takes no negative value (got '{value}')"),
                None => format!("'{value}': no argument here takes a negative number"),
            })
        }
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let value = context(ContextKind::InvalidValue)?;
            if !looks_negative(&value) {
                return None;
            }
            // "--count <COUNT>": the option's name.
            let arg = context(ContextKind::InvalidArg)?;
            let option = arg.split_whitespace().next().unwrap_or(&arg).to_owned();
            Some(format!("{option} takes no negative value (got '{value}')"))
        }
        _ => None,
    }
}

/// A negative number, perhaps with a unit (`-1`, `-0.5`, `-5s`).
fn looks_negative(s: &str) -> bool {
    s.strip_prefix('-')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
}

/// Whether `option` (`--name` or `-n`) is an option that takes a value, in any command of the
/// tree.
fn takes_value(cmd: &clap::Command, option: &str) -> bool {
    let matches = |a: &clap::Arg| {
        let by_long = option
            .strip_prefix("--")
            .is_some_and(|l| a.get_long() == Some(l));
        let by_short = option
            .strip_prefix('-')
            .filter(|s| s.chars().count() == 1)
            .and_then(|s| s.chars().next())
            .is_some_and(|c| a.get_short() == Some(c));
        (by_long || by_short) && a.get_action().takes_values()
    };
    cmd.get_arguments().any(matches) || cmd.get_subcommands().any(|s| takes_value(s, option))
}

#[cfg(test)]
mod tests {
    use super::looks_negative;

    #[test]
    fn negative_numbers_are_told_from_options() {
        for s in ["-1", "-0.5", "-.5", "-5s", "-10ms"] {
            assert!(looks_negative(s), "{s}");
        }
        for s in ["--rate", "-n", "1", "-", "--", "-s5"] {
            assert!(!looks_negative(s), "{s}");
        }
    }
}

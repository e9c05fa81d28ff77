//! Per-target level filters parsed from directive strings (`SNAPBUS_FILTER`), the shape of
//! tracing-subscriber's `Targets`: `"info,monty.models=debug,monty.models.noisy=off"`.
//!
//! # Syntax
//!
//! Directives are separated by commas; whitespace around them and empty items (a trailing
//! comma, an empty string) are ignored.
//!
//! - `LEVEL` (`trace`, `debug`, `info`, `warn`, `error` or `off`, any case) sets the default
//!   for targets no other directive matches. Without one the default is `info`.
//! - `TARGET=LEVEL` sets the level of `TARGET` and everything below it. A target is a module
//!   path whose segments are `[A-Za-z0-9_]+`, separated by `.` or `::` interchangeably
//!   (`monty::models` is `monty.models`).
//!
//! The longest directive whose target is a whole-segment prefix of the emitter's target wins,
//! so `monty.models=debug` applies to `monty.models.policy` but `monty.model=debug` does not
//! apply to `monty.models`. When the same target (or the default) is given twice, the later
//! directive wins.
//!
//! A filter holds at most [`MAX_FILTER_DIRECTIVES`](crate::level::MAX_FILTER_DIRECTIVES)
//! directives in at most [`MAX_FILTER_BYTES`](crate::level::MAX_FILTER_BYTES) bytes.

use std::env::VarError;
use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::level::LevelFilter;

/// The environment variable read by [`Filter::from_env`].
pub const FILTER_ENV: &str = "SNAPBUS_FILTER";

/// A directive string that does not parse (returned by `str::parse::<Filter>()` and
/// [`Filter::from_env`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid filter directive {directive:?}: {why}")]
pub struct FilterParseError {
    /// The offending directive, trimmed (the whole variable for a non-UTF-8
    /// `SNAPBUS_FILTER`).
    pub directive: String,
    /// What is wrong with it.
    pub why: String,
}

/// A default level plus per-target levels: which snapshots are enabled, by target.
///
/// Parse one from a directive string (see the [module docs](self) for the syntax); its
/// `Display` is the canonical directive string, which parses back to an equal `Filter`.
///
/// ```
/// use snapbus::{Filter, Level, LevelFilter};
///
/// let filter: Filter = "warn, monty::models=debug, monty.models.noisy=off,".parse()?;
/// assert_eq!(filter.level_for("monty.models.policy"), LevelFilter::DEBUG);
/// assert!(!filter.level_for("monty::models::noisy").enabled(Level::ERROR));
/// assert_eq!(filter.level_for("monty.modelsx"), LevelFilter::WARN);
/// assert_eq!(filter.max_level(), LevelFilter::DEBUG);
/// assert_eq!(filter.to_string(), "warn,monty.models=debug,monty.models.noisy=off");
/// # Ok::<(), snapbus::FilterParseError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The level of targets no directive matches.
    default: LevelFilter,
    /// `(segments, level)`, sorted by segments with no target twice. Since a segment-wise
    /// prefix sorts before what it prefixes, the directives matching any one target appear in
    /// order of length: the last match is the most specific.
    targets: Vec<(Vec<String>, LevelFilter)>,
}

impl Default for Filter {
    /// Everything at `info` and above.
    fn default() -> Filter {
        Filter {
            default: LevelFilter::INFO,
            targets: Vec::new(),
        }
    }
}

/// The segments of a module path, `.` and `::` both separating.
fn segments(target: &str) -> impl Iterator<Item = &str> {
    target.split('.').flat_map(|s| s.split("::"))
}

/// Whether `prefix` is the first `prefix.len()` whole segments of `target`.
fn is_prefix(prefix: &[String], target: &str) -> bool {
    let mut segs = segments(target);
    prefix.iter().all(|p| segs.next() == Some(p.as_str()))
}

impl Filter {
    /// Parses `$SNAPBUS_FILTER`; the default (`info`) if it is not set. A value that is not
    /// UTF-8 is an error.
    pub fn from_env() -> Result<Filter, FilterParseError> {
        match std::env::var(FILTER_ENV) {
            Ok(v) => v.parse(),
            Err(VarError::NotPresent) => Ok(Filter::default()),
            Err(VarError::NotUnicode(raw)) => Err(FilterParseError {
                directive: raw.to_string_lossy().into_owned(),
                why: format!("{FILTER_ENV} is not valid UTF-8"),
            }),
        }
    }

    /// The level filter for `target` (a module path, `.` or `::` separated): that of the most
    /// specific directive whose target is a whole-segment prefix of it, else the default.
    ///
    /// Does not allocate. It walks the directives, so call it when a handle is created or the
    /// filter changes and cache the result, not per snapshot.
    pub fn level_for(&self, target: &str) -> LevelFilter {
        self.targets
            .iter()
            .rev()
            .find(|(t, _)| is_prefix(t, target))
            .map_or(self.default, |(_, level)| *level)
    }

    /// The most verbose level any directive (or the default) enables: if
    /// `!filter.max_level().enabled(level)`, no target has `level` enabled.
    pub fn max_level(&self) -> LevelFilter {
        self.targets
            .iter()
            .fold(self.default, |m, (_, l)| m.most_verbose(*l))
    }

    /// The level of targets no directive matches.
    pub fn default_level(&self) -> LevelFilter {
        self.default
    }
}

/// Checks a directive's target and splits it into segments.
fn parse_target(target: &str) -> Result<Vec<String>, String> {
    if target.is_empty() {
        return Err("the target before '=' is empty".to_owned());
    }
    segments(target)
        .map(|seg| {
            if seg.is_empty() {
                Err(format!(
                    "target {target:?} has an empty segment (segments are separated by one '.' \
                     or '::')"
                ))
            } else if !seg.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                Err(format!(
                    "target segment {seg:?} has a character other than A-Z a-z 0-9 _ \
                     (segments are separated by '.' or '::')"
                ))
            } else {
                Ok(seg.to_owned())
            }
        })
        .collect()
}

/// The start of a directive string too long to quote whole in an error.
fn abridged(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

impl FromStr for Filter {
    type Err = FilterParseError;

    /// Parses a directive string (see the [module docs](self)).
    fn from_str(s: &str) -> Result<Filter, FilterParseError> {
        crate::level::check_filter_size(s).map_err(|why| FilterParseError {
            directive: abridged(s),
            why,
        })?;
        let mut filter = Filter::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let err = |why: String| FilterParseError {
                directive: item.to_owned(),
                why,
            };
            let mut parts = item.split('=');
            let first = parts.next().unwrap_or_default().trim();
            match (parts.next(), parts.next()) {
                (None, _) => {
                    filter.default = first.parse().map_err(|e| {
                        let hint = if first.contains(['.', ':']) {
                            "; a target needs '=LEVEL'"
                        } else {
                            ""
                        };
                        err(format!("{e}{hint}"))
                    })?;
                }
                (Some(level), None) => {
                    let segs = parse_target(first).map_err(err)?;
                    let level: LevelFilter =
                        level.trim().parse().map_err(|e| err(format!("{e}")))?;
                    match filter.targets.binary_search_by(|(t, _)| t.cmp(&segs)) {
                        Ok(i) => filter.targets[i].1 = level,
                        Err(i) => filter.targets.insert(i, (segs, level)),
                    }
                }
                (Some(_), Some(_)) => return Err(err("more than one '='".to_owned())),
            }
        }
        Ok(filter)
    }
}

impl fmt::Display for Filter {
    /// The canonical directive string: the default level, then `target=level` for each target
    /// in sorted order, `.`-separated. It parses back to an equal filter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.default)?;
        for (t, l) in &self.targets {
            write!(f, ",{}={l}", t.join("."))?;
        }
        Ok(())
    }
}

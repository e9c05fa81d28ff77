//! Per-target level filters parsed from directive strings (`SNAPBUS_FILTER`), the shape of
//! tracing-subscriber's `Targets`: `"info,monty.models=debug,monty.models.noisy=off"`.
//!
//! A target is a module path; `::` and `.` separate its segments interchangeably. The longest
//! directive whose target is a whole-segment prefix of the emitter's target wins (so
//! `monty.model` does not match `monty.models`); a bare level sets the default (`info` if
//! absent).

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::level::LevelFilter;

/// The environment variable read by [`Filter::from_env`].
pub const FILTER_ENV: &str = "SNAPBUS_FILTER";

/// A directive string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid filter directive {directive:?}: {why}")]
pub struct FilterParseError {
    /// The offending directive.
    pub directive: String,
    /// What is wrong with it.
    pub why: String,
}

/// A default level plus per-target levels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    default: LevelFilter,
    /// (segments, level), sorted by target for a canonical form.
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

fn segments(target: &str) -> Vec<&str> {
    target.split('.').flat_map(|s| s.split("::")).collect()
}

impl Filter {
    /// Reads `SNAPBUS_FILTER` (absent or empty: the default, `info`).
    pub fn from_env() -> Result<Filter, FilterParseError> {
        match std::env::var(FILTER_ENV) {
            Ok(v) => v.parse(),
            Err(_) => Ok(Filter::default()),
        }
    }

    /// The level filter for `target` (the most specific matching directive, else the
    /// default).
    pub fn level_for(&self, target: &str) -> LevelFilter {
        let segs = segments(target);
        let mut best: Option<(usize, LevelFilter)> = None;
        for (t, level) in &self.targets {
            let matches = t.len() <= segs.len() && t.iter().zip(&segs).all(|(a, b)| a == b);
            if matches && best.is_none_or(|(n, _)| t.len() > n) {
                best = Some((t.len(), *level));
            }
        }
        best.map_or(self.default, |(_, l)| l)
    }

    /// The most verbose level any directive enables.
    pub fn max_level(&self) -> LevelFilter {
        self.targets
            .iter()
            .fold(self.default, |m, (_, l)| m.most_verbose(*l))
    }

    /// The default level.
    pub fn default_level(&self) -> LevelFilter {
        self.default
    }
}

impl FromStr for Filter {
    type Err = FilterParseError;
    fn from_str(s: &str) -> Result<Filter, FilterParseError> {
        let mut filter = Filter::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let err = |why: &str| FilterParseError {
                directive: item.to_owned(),
                why: why.to_owned(),
            };
            let mut parts = item.split('=');
            let first = parts.next().unwrap_or_default().trim();
            match (parts.next(), parts.next()) {
                (None, _) => {
                    filter.default = first
                        .parse::<LevelFilter>()
                        .map_err(|e| err(&e.to_string()))?;
                }
                (Some(level), None) => {
                    if first.is_empty() {
                        return Err(err("the target before '=' is empty"));
                    }
                    let segs = segments(first);
                    let bad = segs.iter().any(|s| {
                        s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    });
                    if bad {
                        return Err(err(
                            "a target is module path segments of A-Z a-z 0-9 _ separated by '.' or '::'",
                        ));
                    }
                    let level: LevelFilter =
                        level.trim().parse().map_err(|e| err(&format!("{e}")))?;
                    let segs: Vec<String> = segs.into_iter().map(str::to_owned).collect();
                    filter.targets.retain(|(t, _)| *t != segs);
                    filter.targets.push((segs, level));
                }
                (Some(_), Some(_)) => return Err(err("more than one '='")),
            }
        }
        filter.targets.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(filter)
    }
}

impl fmt::Display for Filter {
    /// The canonical directive string (parses back to an equal filter).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.default)?;
        for (t, l) in &self.targets {
            write!(f, ",{}={l}", t.join("."))?;
        }
        Ok(())
    }
}

//! Severity levels and level filters (the shape of tracing-core's `Level` / `LevelFilter`).
//!
//! A level is stored as one byte in every frame header: `TRACE = 0`, `DEBUG = 1`, `INFO = 2`,
//! `WARN = 3`, `ERROR = 4`; a larger number is more severe. Producers (`snapbus::Level`, the
//! same type) and consumers share it, so no side handles a bare byte.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Longest filter directive string (bytes) a producer, `snapbus filter` and the broker
/// accept: hundreds of `target=level` directives fit; what is longer is a mistake (a file
/// pasted in), and would be sent to every producer and shown by every `ls`.
pub const MAX_FILTER_BYTES: usize = 16 << 10;
/// Most directives (comma-separated items) in one filter.
pub const MAX_FILTER_DIRECTIVES: usize = 256;

/// Checks a filter directive string against [`MAX_FILTER_BYTES`] and
/// [`MAX_FILTER_DIRECTIVES`] (its syntax is the parser's to check); `Err` says which bound it
/// passes.
pub fn check_filter_size(directives: &str) -> Result<(), String> {
    if directives.len() > MAX_FILTER_BYTES {
        return Err(format!(
            "the filter is {} bytes long; at most {MAX_FILTER_BYTES} are accepted",
            directives.len()
        ));
    }
    let count = directives
        .split(',')
        .filter(|i| !i.trim().is_empty())
        .count();
    if count > MAX_FILTER_DIRECTIVES {
        return Err(format!(
            "the filter has {count} directives; at most {MAX_FILTER_DIRECTIVES} are accepted"
        ));
    }
    Ok(())
}

/// The severity of a snapshot, ordered `TRACE < DEBUG < INFO < WARN < ERROR`. Displays as
/// the upper-case name; parses any case (and `warning` for `WARN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Level(u8);

impl Level {
    /// Very fine detail.
    pub const TRACE: Level = Level(0);
    /// Diagnostics.
    pub const DEBUG: Level = Level(1);
    /// The normal level of experiment telemetry.
    pub const INFO: Level = Level(2);
    /// Something unexpected.
    pub const WARN: Level = Level(3);
    /// Something failed.
    pub const ERROR: Level = Level(4);

    /// The byte stored in frame headers.
    #[inline]
    pub const fn as_u8(self) -> u8 {
        self.0
    }

    /// The level stored as `b`, if it is one (`0..=4`).
    pub const fn from_u8(b: u8) -> Option<Level> {
        if b <= 4 { Some(Level(b)) } else { None }
    }

    /// The level a frame header's byte names, for readers of lanes (which are untrusted): a
    /// byte above `ERROR` (never written by a snapbus producer) reads as `ERROR`.
    pub const fn from_wire(b: u8) -> Level {
        Level(if b > 4 { 4 } else { b })
    }

    /// The level's name: `TRACE`, `DEBUG`, `INFO`, `WARN` or `ERROR`.
    pub fn name(self) -> &'static str {
        ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"][usize::from(self.0.min(4))]
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A level or filter name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown level {0:?} (expected trace, debug, info, warn, error or off)")]
pub struct ParseLevelError(pub String);

impl FromStr for Level {
    type Err = ParseLevelError;
    fn from_str(s: &str) -> Result<Level, ParseLevelError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trace" => Ok(Level::TRACE),
            "debug" => Ok(Level::DEBUG),
            "info" => Ok(Level::INFO),
            "warn" | "warning" => Ok(Level::WARN),
            "error" => Ok(Level::ERROR),
            _ => Err(ParseLevelError(s.to_owned())),
        }
    }
}

/// "This level and everything more severe", or nothing at all.
///
/// Stored as the byte of the least severe enabled level ([`Level::as_u8`]), or `u8::MAX` for
/// [`LevelFilter::OFF`], so [`LevelFilter::enabled`] is one compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LevelFilter(u8);

impl LevelFilter {
    /// Nothing enabled.
    pub const OFF: LevelFilter = LevelFilter(u8::MAX);
    /// Everything.
    pub const TRACE: LevelFilter = LevelFilter(0);
    /// DEBUG and more severe.
    pub const DEBUG: LevelFilter = LevelFilter(1);
    /// INFO and more severe.
    pub const INFO: LevelFilter = LevelFilter(2);
    /// WARN and ERROR.
    pub const WARN: LevelFilter = LevelFilter(3);
    /// ERROR only.
    pub const ERROR: LevelFilter = LevelFilter(4);

    /// Whether `level` passes: it is this filter's level or more severe (one compare; never
    /// for `OFF`).
    #[inline]
    pub const fn enabled(self, level: Level) -> bool {
        level.0 >= self.0
    }

    /// The least severe level that passes (`None` for `OFF`).
    pub const fn min_level(self) -> Option<Level> {
        Level::from_u8(self.0)
    }

    /// The more verbose of two filters.
    pub fn most_verbose(self, other: LevelFilter) -> LevelFilter {
        LevelFilter(self.0.min(other.0))
    }
}

impl From<Level> for LevelFilter {
    fn from(l: Level) -> LevelFilter {
        LevelFilter(l.0)
    }
}

impl fmt::Display for LevelFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.min_level() {
            Some(l) => f.write_str(&l.name().to_ascii_lowercase()),
            None => f.write_str("off"),
        }
    }
}

impl FromStr for LevelFilter {
    type Err = ParseLevelError;
    fn from_str(s: &str) -> Result<LevelFilter, ParseLevelError> {
        if s.trim().eq_ignore_ascii_case("off") {
            return Ok(LevelFilter::OFF);
        }
        s.parse::<Level>().map(LevelFilter::from)
    }
}

//! Which level a Python handle emits at: the one rule that combines the bus's filter, Python
//! `logging` levels and the process's own filter.
//!
//! First that applies decides:
//! 1. a filter set on the bus (`snapbus filter`, until `snapbus filter --reset`);
//! 2. the level of the nearest logger from `telemetry.<name>` up to (not including) the root
//!    that has a level set: emit iff `levelno >= level` (`logging.disable(n)` also mutes
//!    `levelno <= n`, as in `logging`);
//! 3. the process's own filter (`SNAPBUS_FILTER`, default `info`).
//!
//! Rule 2 is cached as `Logger.isEnabledFor` caches it: `logging` clears its caches whenever a
//! level changes (`setLevel`, `logging.disable`, `dictConfig`), `snapbus.telemetry` wraps that
//! to bump [`GENERATION`], and a handle whose cached generation is stale recomputes it (one
//! Python call) at its next snapshot. So a disabled call is three atomic loads.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use snapbus::{AtLevel, Level};

/// Bumped whenever `logging` clears its level caches; starts above every handle's 0.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The generation's bits kept in a handle's cache (it wraps after 2^31 level changes).
const GEN_MASK: u64 = (1 << 31) - 1;
/// The cache's flag: a logger level decides (rule 2) rather than the process's own filter.
const BY_LOGGER: u64 = 1 << 32;

/// A Python `logging` level as a snapbus level: <10 TRACE, 10–19 DEBUG, 20–29 INFO, 30–39
/// WARN, ≥40 ERROR.
#[inline]
pub(crate) fn level_of(level: i64) -> Level {
    match level {
        i64::MIN..=9 => Level::TRACE,
        10..=19 => Level::DEBUG,
        20..=29 => Level::INFO,
        30..=39 => Level::WARN,
        _ => Level::ERROR,
    }
}

/// A handle's view of `logging`: its logger's name and the rule-2 result last computed.
pub(crate) struct LoggingLevel {
    /// `telemetry.<name>`.
    logger: String,
    /// Generation (bits 33..64; 0: never computed), [`BY_LOGGER`], and the least `levelno`
    /// emitted (bits 0..32, an `i32`).
    cache: AtomicU64,
}

impl LoggingLevel {
    pub(crate) fn new(target: &str) -> LoggingLevel {
        LoggingLevel {
            logger: format!("telemetry.{target}"),
            cache: AtomicU64::new(0),
        }
    }

    /// The handle at `level` if the rule lets it through (`py`: to recompute a stale cache).
    #[inline]
    pub(crate) fn at<'t>(
        &self,
        py: Python<'_>,
        telemetry: &'t snapbus::Telemetry,
        level: i64,
    ) -> PyResult<Option<AtLevel<'t>>> {
        if snapbus::bus_filter_in_force() {
            return Ok(telemetry.at(level_of(level)));
        }
        let mut cache = self.cache.load(Ordering::Relaxed);
        if cache >> 33 != GENERATION.load(Ordering::Relaxed) & GEN_MASK {
            cache = self.refresh(py)?;
        }
        if level < i64::from(cache as u32 as i32) {
            Ok(None)
        } else if cache & BY_LOGGER != 0 {
            Ok(Some(telemetry.at_unfiltered(level_of(level))))
        } else {
            Ok(telemetry.at(level_of(level)))
        }
    }

    /// Asks `logging` (`snapbus.telemetry._logging_threshold`) and caches the answer under the
    /// generation read before asking: a change while it runs leaves it stale.
    #[cold]
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        static ASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let generation = GENERATION.load(Ordering::Acquire) & GEN_MASK;
        let ask = ASK.get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("snapbus.telemetry")?
                    .getattr("_logging_threshold")?
                    .unbind(),
            )
        })?;
        let (by_logger, least): (bool, i64) = ask.bind(py).call1((&self.logger,))?.extract()?;
        let least = least.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let cache = generation << 33 | u64::from(by_logger) << 32 | u64::from(least as u32);
        self.cache.store(cache, Ordering::Relaxed);
        Ok(cache)
    }
}

/// The handle at `level` by rule 1 alone (`SnapbusHandler`: `logging` has applied rule 2
/// already, the record reached it): the bus filter if one is in force, else always.
#[inline]
pub(crate) fn bus_first(telemetry: &snapbus::Telemetry, level: i64) -> Option<AtLevel<'_>> {
    if snapbus::bus_filter_in_force() {
        telemetry.at(level_of(level))
    } else {
        Some(telemetry.at_unfiltered(level_of(level)))
    }
}

/// Called by `snapbus.telemetry` whenever `logging` clears its caches (a level changed).
#[pyfunction]
pub(crate) fn _logging_changed() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

//! The aggregator's options: how records are cut into windows and what is summarized.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use snapbus_bus::subscriber::Glob;

use super::summary::SUMMARY_SUFFIX;

/// How records are cut into windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// One window per value of the episode field (it closes when the value changes).
    Episode,
    /// Every N records of a group.
    Steps(u64),
    /// Every T of record time, aligned to the epoch.
    Secs(Duration),
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Window::Episode => write!(f, "episode"),
            Window::Steps(n) => write!(f, "steps:{n}"),
            Window::Secs(d) => write!(f, "secs:{}", d.as_secs_f64()),
        }
    }
}

impl FromStr for Window {
    type Err = String;
    fn from_str(s: &str) -> Result<Window, String> {
        let bad = || format!("expected episode, steps:N (N ≥ 1) or secs:T (T > 0), got {s:?}");
        match s.split_once(':') {
            None if s == "episode" => Ok(Window::Episode),
            Some(("steps", n)) => match n.parse::<u64>() {
                Ok(n) if n > 0 => Ok(Window::Steps(n)),
                _ => Err(bad()),
            },
            Some(("secs", t)) => match t.parse::<f64>() {
                Ok(t) if (0.001..=1e9).contains(&t) => Ok(Window::Secs(Duration::from_secs_f64(t))),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

/// What to summarize and how.
#[derive(Debug, Clone)]
pub struct AggregatorOptions {
    /// The subscription globs (a summary schema is summarized only if one of these ends in
    /// `.summary`).
    pub globs: Vec<Glob>,
    /// Dotted paths of the fields that group records (besides the producer).
    pub group_by: Vec<String>,
    /// How records are cut into windows.
    pub window: Window,
    /// The field holding the episode number (for [`Window::Episode`]).
    pub episode_field: String,
    /// Dotted-path globs of the fields to summarize (empty: every numeric field).
    pub fields: Vec<Glob>,
    /// This worker's number, `0..workers`.
    pub worker: u32,
    /// How many workers share the work.
    pub workers: u32,
    /// A directory to write one CSV file per summary schema into (one row per closed window).
    pub csv_dir: Option<PathBuf>,
    /// Combine the producers of one run (same name and session tag: the workers of a
    /// parallel experiment) into one experiment summary per group, instead of one per
    /// producer (see the module docs).
    pub combine_producers: bool,
    /// With `combine_producers`: how long after the last of a run's producers ended its
    /// experiment summary waits for another one to join.
    pub combine_grace: Duration,
}

impl AggregatorOptions {
    /// Every schema, per episode (field `episode`), one worker, no CSV.
    pub fn new(window: Window) -> AggregatorOptions {
        AggregatorOptions {
            globs: Vec::new(),
            group_by: Vec::new(),
            window,
            episode_field: "episode".to_owned(),
            fields: Vec::new(),
            worker: 0,
            workers: 1,
            csv_dir: None,
            combine_producers: false,
            combine_grace: Duration::from_secs(5),
        }
    }

    /// The worker's label, `2of3` (empty for a single worker).
    pub fn worker_label(&self) -> String {
        if self.workers > 1 {
            format!("{}of{}", self.worker + 1, self.workers)
        } else {
            String::new()
        }
    }
}

impl AggregatorOptions {
    /// The field that cuts windows, if the window setting has one (the episode field).
    pub(super) fn window_field(&self) -> Option<&str> {
        match self.window {
            Window::Episode => Some(self.episode_field.as_str()),
            _ => None,
        }
    }

    /// Whether a subscription glob asks for summary schemas (`*.summary`).
    pub(super) fn summaries_wanted(&self) -> bool {
        self.globs
            .iter()
            .any(|g| g.as_str().ends_with(SUMMARY_SUFFIX))
    }
}

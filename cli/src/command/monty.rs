//! `snapbus monty --output-dir DIR [--layout monty|generic] [--schema GLOB] [--run ID] [--detailed-per-episode]
//! [--detailed-episodes N,N,…] [--wandb [PROJECT]] [--from WHERE] [--until-end] [--python PATH]`: writes tbp.monty's
//! result files (`{mode}_stats.csv`, `detailed_run_stats.json`) from `monty.EpisodeStats`
//! records; `snapbus attach monty …` runs it under the broker.
//!
//! - **What runs.** The Python consumer of the `snapbus` package, `PYTHON -m snapbus.reports`
//!   (python/snapbus/reports/; the record's contract is in docs/python.md), exec'd like `snapbus
//!   python` does ([`python::exec`]): the broker supervises that pid.
//! - **Which interpreter.** One that imports `snapbus` and pandas (and `wandb` for `--wandb`): `--python PATH`, else
//!   `$SNAPBUS_PYTHON`, else `python3` on `$PATH`, resolved by `attach` in the caller.
//! - **Errors.** `attach` first runs the consumer's `--check` in that interpreter (it imports
//!   snapbus and pandas and makes the output directory); a failure is a clear message and a
//!   non-zero exit, with nothing started.

use std::path::{Path, PathBuf};

use clap::{ArgMatches, Args};
use snapbus_bus::runtime::BusDir;

use crate::cli::BusArgs;
use crate::command::python::{self, PYTHON_ENV};
use crate::consumer_kinds::kind::BuiltinConsumer;

/// The consumer's module.
const MODULE: &str = "snapbus.reports";

/// Options of `snapbus monty` (and `attach monty`).
#[derive(Debug, Clone, Args)]
pub(crate) struct MontyArgs {
    /// The directory of the files (made if missing); existing files are renamed `*_old` at the
    /// first write, as tbp.monty does.
    #[arg(long, value_name = "DIR")]
    pub(crate) output_dir: PathBuf,
    /// `monty` (the default): tbp.monty's files from monty.EpisodeStats records; `generic`: a
    /// row per record of any schema with an integer episode field (--schema), into
    /// `{mode}_episodes.csv` and `episodes.json`.
    #[arg(long, value_name = "LAYOUT", value_parser = ["monty", "generic"])]
    pub(crate) layout: Option<String>,
    /// The per-episode records' schema (default: monty.EpisodeStats; required by `--layout
    /// generic`).
    #[arg(long, value_name = "GLOB")]
    pub(crate) schema: Option<String>,
    /// The generic layout's episode field (default: episode).
    #[arg(long, value_name = "FIELD")]
    pub(crate) episode_field: Option<String>,
    /// The generic layout's mode field, naming the CSV (default: mode; none: `episodes.csv`).
    #[arg(long, value_name = "FIELD")]
    pub(crate) mode_field: Option<String>,
    /// Only this run's records (default: the newest run; earlier runs' records are skipped).
    #[arg(long, value_name = "ID")]
    pub(crate) run: Option<String>,
    /// One `detailed_run_stats/episode_%06d.json` per episode instead of JSON Lines.
    #[arg(long)]
    pub(crate) detailed_per_episode: bool,
    /// Only these episodes' detailed JSON (default: all).
    #[arg(long, value_name = "N,N,...")]
    pub(crate) detailed_episodes: Option<String>,
    /// Also log each run to W&B in offline mode, into DIR/wandb (`wandb sync` uploads it):
    /// the records' `overall` series and the stats table. PROJECT defaults to Monty.
    #[arg(long, value_name = "PROJECT", num_args = 0..=1, default_missing_value = "Monty")]
    pub(crate) wandb: Option<String>,
    /// Where to start: `oldest` (the default: also what the rings hold) or `latest`.
    #[arg(long = "from", value_name = "WHERE", value_parser = ["latest", "oldest"])]
    pub(crate) start: Option<String>,
    /// Stop once every producer has ended.
    #[arg(long)]
    pub(crate) until_end: bool,
    /// The Python interpreter, one with `snapbus` and pandas (default: $SNAPBUS_PYTHON, else
    /// `python3` on $PATH).
    #[arg(long, value_name = "PATH")]
    pub(crate) python: Option<String>,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

impl MontyArgs {
    /// The consumer's arguments (after `-m snapbus.reports`), without the bus.
    fn consumer_args(&self) -> Vec<String> {
        let mut args = vec![format!("--output-dir={}", self.output_dir.display())];
        let flags = [
            ("layout", &self.layout),
            ("schema", &self.schema),
            ("episode-field", &self.episode_field),
            ("mode-field", &self.mode_field),
            ("run", &self.run),
            ("detailed-episodes", &self.detailed_episodes),
            ("from", &self.start),
            ("wandb", &self.wandb),
        ];
        for (flag, value) in flags {
            if let Some(v) = value {
                args.push(format!("--{flag}={v}"));
            }
        }
        if self.detailed_per_episode {
            args.push("--detailed-per-episode".to_owned());
        }
        if self.until_end {
            args.push("--until-end".to_owned());
        }
        args
    }
}

fn interpreter(given: Option<&str>) -> Result<PathBuf, python::PythonError> {
    python::interpreter(given, &[PYTHON_ENV])
}

fn check_consumer(python: &Path, args: &[String]) -> anyhow::Result<()> {
    python::check_module(python, MODULE, "report consumer", "", args)
}

impl BuiltinConsumer for MontyArgs {
    const KIND: &'static str = "monty";
    const VERB: &'static str = "monty";
    const VERB_ABOUT: &'static str = "Write tbp.monty's result files ({mode}_stats.csv, \
        detailed_run_stats.json) from monty.EpisodeStats records, in this terminal";
    const ATTACH_ABOUT: &'static str = "Write tbp.monty's result files ({mode}_stats.csv, \
        detailed_run_stats.json) from monty.EpisodeStats records; Python with pandas";
    const PATH_FLAGS: &'static [&'static str] = &["output_dir"];

    fn bus(&self) -> &BusArgs {
        &self.bus
    }

    fn run(&self) -> anyhow::Result<()> {
        let python = interpreter(self.python.as_deref());
        python::exec_module(&self.bus, python, MODULE, &self.consumer_args())
    }

    fn check(&self, _dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        if let Some(g) = &self.schema {
            crate::bus::globs(std::slice::from_ref(g))?;
        } else if self.layout.as_deref() == Some("generic") {
            anyhow::bail!("--layout generic needs --schema GLOB (the per-episode records)");
        }
        let python = interpreter(self.python.as_deref())?;
        check_consumer(&python, &self.consumer_args())
    }

    fn what(&self) -> String {
        format!("tbp.monty's result files in {}", self.output_dir.display())
    }

    /// What the user gave, with the interpreter resolved here.
    fn argv(&self, m: &ArgMatches, dir: &BusDir, skip: &[&str]) -> anyhow::Result<Vec<String>> {
        let python = interpreter(self.python.as_deref())?;
        python::forward_with_python::<Self>(m, dir, skip, &python)
    }
}

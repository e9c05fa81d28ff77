//! `snapbus rerun [--schema GLOB]… [--connect [URL]] [--spawn] [--save FILE.rrd] [--timeline
//! FIELD]… [--python PATH]`: streams the bus into rerun (a viewer, a gRPC server, an `.rrd`
//! file); `snapbus attach rerun …` runs it under the broker. Also `snapbus export --format rrd`
//! ([`export`]).
//!
//! - **What runs.** The Python bridge of the `snapbus` package, `PYTHON -m snapbus.rerun`
//!   (python/snapbus/rerun/: the mapping, batched `send_columns`), exec'd like `snapbus
//!   python` does ([`python::exec`]): the broker supervises that pid.
//! - **Which interpreter.** One that imports `snapbus` and rerun-sdk 0.36 to 0.41 (Python >= 3.10,
//!   numpy >= 2), which the experiment's need not: `--python PATH`, else
//!   `$SNAPBUS_RERUN_PYTHON`, else `$SNAPBUS_PYTHON`, else `python3` on `$PATH`. `attach`
//!   resolves it in the caller and passes the absolute path on (not the caller's
//!   `$PYTHONPATH`, which is the experiment's, maybe another Python's).
//! - **Errors.** `attach` (and `export`) first run the bridge's `--check` in that interpreter:
//!   it imports snapbus and rerun (else the message names the `pip install` line and the
//!   interpreter), parses `--connect`'s URL and connects to it, and creates the `--save` file;
//!   a failure is a clear message and a non-zero exit, with nothing started.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use clap::{ArgMatches, Args};
use snapbus_bus::runtime::BusDir;

use crate::cli::{BusArgs, ExportArgs};
use crate::command::python::{self, PYTHON_ENV, PythonError};
use crate::consumer_kinds::kind::BuiltinConsumer;

/// The environment variable naming the bridge's interpreter (before `$SNAPBUS_PYTHON`).
pub(crate) const RERUN_PYTHON_ENV: &str = "SNAPBUS_RERUN_PYTHON";

/// rerun's default viewer address (`--connect` without a URL).
const DEFAULT_URL: &str = "rerun+http://127.0.0.1:9876/proxy";

/// The bridge's module.
const MODULE: &str = "snapbus.rerun";

/// Options of `snapbus rerun` (and `attach rerun`).
#[derive(Debug, Clone, Args)]
pub(crate) struct RerunArgs {
    /// Schema-id globs to show (default: all); repeatable.
    #[arg(long = "schema", value_name = "GLOB")]
    pub(crate) schemas: Vec<String>,
    /// Stream to the rerun viewer or gRPC server at URL (`rerun+http://HOST:PORT/proxy`; default
    /// rerun's, on port 9876); it must be listening.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = DEFAULT_URL)]
    pub(crate) connect: Option<String>,
    /// Start a rerun viewer (one already listening on port 9876 is reused) and stream to it:
    /// the default when neither --connect nor --save is given.
    #[arg(long)]
    pub(crate) spawn: bool,
    /// Write an `.rrd` file (complete once the bridge stops: `snapbus detach`); with --connect
    /// or --spawn, both.
    #[arg(long, value_name = "FILE.rrd")]
    pub(crate) save: Option<PathBuf>,
    /// An integer field to use as a timeline (name or dotted path; repeatable). Default: every
    /// integer field named episode, step, epoch or iteration; the record time is always one.
    #[arg(long = "timeline", value_name = "FIELD")]
    pub(crate) timelines: Vec<String>,
    /// Where to start: `latest` (records from now on) or `oldest` (also what the rings hold).
    #[arg(long = "from", value_name = "WHERE", value_parser = ["latest", "oldest"])]
    pub(crate) start: Option<String>,
    /// The Python interpreter, one with `snapbus` and rerun-sdk 0.36 to 0.41 (default:
    /// $SNAPBUS_RERUN_PYTHON, else $SNAPBUS_PYTHON, else `python3` on $PATH).
    #[arg(long, value_name = "PATH")]
    pub(crate) python: Option<String>,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
}

/// The bridge's interpreter: `--python`, else the environment's.
fn interpreter(given: Option<&str>) -> Result<PathBuf, PythonError> {
    python::interpreter(given, &[RERUN_PYTHON_ENV, PYTHON_ENV])
}

impl RerunArgs {
    /// The bridge's arguments (after `-m snapbus.rerun`), without the bus.
    fn bridge_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for g in &self.schemas {
            args.push(format!("--schema={g}"));
        }
        if let Some(url) = &self.connect {
            args.push(format!("--connect={url}"));
        }
        if self.spawn {
            args.push("--spawn".to_owned());
        }
        if let Some(path) = &self.save {
            args.push(format!("--save={}", path.display()));
        }
        for t in &self.timelines {
            args.push(format!("--timeline={t}"));
        }
        if let Some(start) = &self.start {
            args.push(format!("--from={start}"));
        }
        args
    }
}

/// Runs the bridge's `--check` with `args` in `python`.
fn check_bridge(python: &Path, args: &[String]) -> anyhow::Result<()> {
    python::check_module(python, MODULE, "rerun bridge", "RerunMissing", args)
}

impl BuiltinConsumer for RerunArgs {
    const KIND: &'static str = "rerun";
    const VERB: &'static str = "rerun";
    const VERB_ABOUT: &'static str = "Stream the bus into rerun (a viewer, a gRPC server or an \
        .rrd file) through the Python bridge, in this terminal";
    const ATTACH_ABOUT: &'static str = "Stream the bus into rerun: a viewer (--spawn), a gRPC \
        server (--connect URL) or an .rrd file (--save); Python with rerun-sdk 0.36 to 0.41";
    const PATH_FLAGS: &'static [&'static str] = &["save"];

    fn bus(&self) -> &BusArgs {
        &self.bus
    }

    fn run(&self) -> anyhow::Result<()> {
        let python = interpreter(self.python.as_deref());
        python::exec_module(&self.bus, python, MODULE, &self.bridge_args())
    }

    fn check(&self, _dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        crate::bus::globs(&self.schemas)?;
        let python = interpreter(self.python.as_deref())?;
        check_bridge(&python, &self.bridge_args())
    }

    fn what(&self) -> String {
        let mut to = Vec::new();
        if let Some(url) = &self.connect {
            to.push(format!("the rerun server at {url}"));
        }
        if let Some(path) = &self.save {
            to.push(path.display().to_string());
        }
        if self.spawn || to.is_empty() {
            to.push("a rerun viewer".to_owned());
        }
        format!("rerun ({})", to.join(" and "))
    }

    /// What the user gave, with the interpreter resolved here.
    fn argv(&self, m: &ArgMatches, dir: &BusDir, skip: &[&str]) -> anyhow::Result<Vec<String>> {
        let python = interpreter(self.python.as_deref())?;
        python::forward_with_python::<Self>(m, dir, skip, &python)
    }
}

/// `snapbus export --format rrd FILE -o OUT.rrd`: the bridge reads the recording
/// (`--from-recording`) and writes the `.rrd`, with the same mapping.
pub(crate) fn export(args: &ExportArgs) -> anyhow::Result<()> {
    // The bridge matches with `fnmatch`: the same as a valid glob (only `*` and `?`).
    crate::bus::globs(&args.schemas)?;
    let Some(output) = args.output.as_deref() else {
        bail!("--output is required with --format rrd");
    };
    if args.endpoint.is_some() {
        bail!("--endpoint is for --format otlp only");
    }
    std::fs::File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    // Absent, or (with --force) a file of ours: never another user's, nor a symlink.
    if snapbus_consumers::output::check(output, args.force)? {
        // The bridge writes the file: it gets a fresh one, not the old one opened anew.
        std::fs::remove_file(output).with_context(|| format!("replacing {}", output.display()))?;
    }
    let python = interpreter(args.python.as_deref())?;
    let mut bridge = vec![
        format!("--from-recording={}", args.file.display()),
        format!("--save={}", output.display()),
    ];
    bridge.extend(args.schemas.iter().map(|g| format!("--schema={g}")));
    check_bridge(&python, &bridge)?;
    let mut cmd = Command::new(&python);
    // The conversion is this command's work: it stops with it (Ctrl-C reaches it anyway).
    let status = snapbus_bus::orphan::die_with_parent(&mut cmd, snapbus_bus::orphan::Signal::TERM)
        .args(["-m", MODULE])
        .args(&bridge)
        .status()
        .with_context(|| format!("starting {}", python.display()))?;
    if !status.success() {
        bail!(
            "the rerun bridge ({} -m {MODULE}) failed ({status}) converting {}",
            python.display(),
            args.file.display()
        );
    }
    snapbus_bus::say!(
        "snapbus export: wrote {} (open it with `rerun {}`)",
        output.display(),
        output.display()
    );
    Ok(())
}

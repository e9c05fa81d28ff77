//! The Python rows (issue 17, "Speed"): `snapshot()` from Python, and a Python producer → Python
//! consumer pair against `multiprocessing.Queue` and a `QueueHandler`/`QueueListener` pipeline,
//! measured by `benches/python/compare_py.py` in the same run as the Rust rows, on the harness's
//! own bus.
//!
//! **Which interpreter.** `--python PATH`, else `$SNAPBUS_PYTHON`, else the virtualenv the test
//! command `.ci/test` makes for `python3` (`target/py-3.X/bin/python`, which has snapbus built
//! in release, numpy and the rest), if it exists. Without any of them the rows are "not
//! measured", with the reason, and the run does not fail; with one, a row that fails fails the
//! run (as a failed peer run does).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use snapbus_bus::runtime::BusDir;

/// The script, in the source tree.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/compare_py.py");

/// How long the script may take (a full run takes about a minute).
const WATCHDOG: Duration = Duration::from_secs(900);

/// One row the script measured.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PyRow {
    /// What was measured.
    pub(crate) row: String,
    /// The figure, as text.
    pub(crate) text: String,
    /// The target for it ("" for none).
    pub(crate) target: String,
    /// `yes`, `no` or `-`.
    pub(crate) verdict: String,
    /// Why it failed.
    pub(crate) error: Option<String>,
    /// The figure.
    pub(crate) value: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct PyResult {
    info: serde_json::Value,
    rows: Vec<PyRow>,
}

/// What became of the Python rows.
#[derive(Debug)]
pub(crate) enum PyOutcome {
    /// Not measured: no interpreter was given or found.
    Skipped(String),
    /// The script ran (some rows may have failed).
    Ran {
        /// The interpreter.
        python: PathBuf,
        /// Versions (Python, numpy, snapbus) and mode.
        info: serde_json::Value,
        /// Its rows.
        rows: Vec<PyRow>,
    },
    /// The script did not run to its result line.
    Failed(String),
}

impl PyOutcome {
    /// Whether the run should fail for it.
    pub(crate) fn failed(&self) -> bool {
        match self {
            PyOutcome::Skipped(_) => false,
            PyOutcome::Ran { rows, .. } => rows.iter().any(|r| r.error.is_some()),
            PyOutcome::Failed(_) => true,
        }
    }

    /// The row named `prefix…`, measured.
    pub(crate) fn value(&self, prefix: &str) -> Option<f64> {
        match self {
            PyOutcome::Ran { rows, .. } => rows
                .iter()
                .find(|r| r.row.starts_with(prefix))
                .and_then(|r| r.value),
            _ => None,
        }
    }
}

/// The interpreter: `explicit`, else `$SNAPBUS_PYTHON`, else `.ci/test`'s venv for `python3`.
pub(crate) fn interpreter(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("SNAPBUS_PYTHON").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let version = Command::new("python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .ok_or("no --python given, no $SNAPBUS_PYTHON, and no python3 to find the test venv")?;
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("the benches crate has no parent directory")?;
    let venv = workspace
        .join("target")
        .join(format!("py-{version}"))
        .join("bin")
        .join("python");
    if venv.is_file() {
        Ok(venv)
    } else {
        Err(format!(
            "no --python given, no $SNAPBUS_PYTHON, and no {} (`.ci/test python` makes it)",
            venv.display()
        ))
    }
}

/// Runs the script under `python` against the bus of `bus` (its broker must be running).
/// `only`: the groups of rows to run (all when empty).
pub(crate) fn run(
    python: &Path,
    quick: bool,
    reps: usize,
    bus: &BusDir,
    only: &[String],
) -> PyOutcome {
    match run_script(python, quick, reps, bus, only) {
        Ok((info, rows)) => PyOutcome::Ran {
            python: python.to_path_buf(),
            info,
            rows,
        },
        Err(why) => PyOutcome::Failed(why),
    }
}

fn run_script(
    python: &Path,
    quick: bool,
    reps: usize,
    bus: &BusDir,
    only: &[String],
) -> Result<(serde_json::Value, Vec<PyRow>), String> {
    let runtime = bus
        .path()
        .parent()
        .ok_or("the bus directory has no parent")?;
    let mut cmd = Command::new(python);
    cmd.arg(SCRIPT)
        .args(["--reps", &reps.min(3).to_string()])
        .env("SNAPBUS_RUNTIME_DIR", runtime)
        .env("SNAPBUS_BUS", bus.name().as_str())
        .env_remove("SNAPBUS_FILTER")
        .env_remove("SNAPBUS_STRICT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if quick {
        cmd.arg("--quick");
    }
    for group in only {
        cmd.args(["--only", group]);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting {} {SCRIPT}: {e}", python.display()))?;
    let mut pipe = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + WATCHDOG;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("killed after {} s", WATCHDOG.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for the script: {e}")),
        }
    };
    let out = reader.join().unwrap_or_default();
    let Some(line) = out.lines().rev().find_map(|l| l.strip_prefix("result ")) else {
        return Err(format!("{SCRIPT} exited {status} without a result line"));
    };
    let result: PyResult =
        serde_json::from_str(line).map_err(|e| format!("its result line: {e}"))?;
    Ok((result.info, result.rows))
}

/// The one line of progress for `outcome`.
pub(crate) fn progress_line(outcome: &PyOutcome) -> String {
    match outcome {
        PyOutcome::Skipped(why) => format!("python rows: not measured: {why}"),
        PyOutcome::Failed(why) => format!("python rows: FAILED: {why}"),
        PyOutcome::Ran { rows, .. } => format!(
            "python rows: {} measured, {} failed",
            rows.iter().filter(|r| r.error.is_none()).count(),
            rows.iter().filter(|r| r.error.is_some()).count()
        ),
    }
}

/// The report's Python section.
pub(crate) fn render(out: &mut String, outcome: &PyOutcome) {
    use std::fmt::Write;
    let _ = writeln!(out, "\n### Python (snapbus from Python, same run)\n");
    match outcome {
        PyOutcome::Skipped(why) => {
            let _ = writeln!(
                out,
                "Not measured in this run: {why}. Give `--python PATH`, an interpreter with \
                 snapbus, numpy installed."
            );
        }
        PyOutcome::Failed(why) => {
            let _ = writeln!(out, "**Failed**: {why}.");
        }
        PyOutcome::Ran { python, info, rows } => {
            let _ = writeln!(
                out,
                "Measured by [`benches/python/compare_py.py`](benches/python/compare_py.py) \
                 under `{}` (Python {}, numpy {}, snapbus {}{}). In-process rows: `timeit` \
                 medians, loop overhead included. Process pairs: producer on CPU 0, consumer on \
                 CPU 1, 64 B-class events (a 5-field dataclass: 3 numbers, an int, a short \
                 string); messages delivered per second at the consumer, the producer never \
                 slowed down for snapbus (what it could not keep up with is lost, counted), the \
                 queues block their producer; median of {} repetition(s).\n",
                python.display(),
                info["python"].as_str().unwrap_or("?"),
                info["numpy"].as_str().unwrap_or("?"),
                info["snapbus"].as_str().unwrap_or("?"),
                if info["quick"].as_bool() == Some(true) {
                    "; **quick mode: not for comparing**"
                } else {
                    ""
                },
                info["reps"].as_u64().unwrap_or(1),
            );
            let _ = writeln!(out, "| row | measured | target | met |\n|---|---:|---|---|");
            for r in rows {
                let measured = match &r.error {
                    Some(e) => format!("**failed**: {e}"),
                    None => r.text.clone(),
                };
                let verdict = match r.verdict.as_str() {
                    "no" => "**no**",
                    "yes" => "yes",
                    _ => "–",
                };
                let target = if r.target.is_empty() {
                    "–"
                } else {
                    &r.target
                };
                let _ = writeln!(out, "| {} | {measured} | {target} | {verdict} |", r.row);
            }
        }
    }
}

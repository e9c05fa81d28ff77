//! `snapbus python [--python PATH] -- <module:Class | SCRIPT.py> [ARGS…]`: a Python consumer in
//! this terminal; `snapbus attach python -- …` runs it under the broker (restarted like the
//! built-in consumers, shown in `snapbus ls`, stopped by `snapbus detach`).
//!
//! - **What runs.** `module:Class` runs as `PYTHON -m snapbus run module:Class ARGS…` (the
//!   package's runner: it subscribes and feeds the class's hooks); a script (a target ending in
//!   `.py`, or naming a file) runs as `PYTHON SCRIPT ARGS…` and subscribes itself
//!   (`snapbus.run` or `snapbus.subscribe`). The bus is passed as `$SNAPBUS_BUS`.
//! - **Same process.** This verb *replaces itself* with the interpreter (`exec`): the broker
//!   knows a supervised consumer by the pid it started, and the Python subscriber's
//!   `HelloConsumer` / `Subscribed` handshake (the bus crate's `Subscriber::connect`) comes
//!   from that pid, so `attach` returns once the Python side has subscribed. The broker's
//!   `$SNAPBUS_RESTART` and `$SNAPBUS_SUPERVISED_BY` pass through to it.
//! - **Which interpreter.** `--python PATH`, else `$SNAPBUS_PYTHON`, else `python3`; a bare name
//!   is looked up on `$PATH`. `attach` resolves it in the caller (so an activated virtualenv's
//!   `python3` is the one the broker runs, on every restart) and passes on the caller's
//!   `$PYTHONPATH`; a script is passed on with an absolute path (the consumer runs in the
//!   caller's working directory, as every supervised consumer does).
//! - **Errors.** `attach` checks first, in the caller: the interpreter exists, imports
//!   `snapbus`, and finds the target's module (or the script exists); a failure is a clear
//!   message and a non-zero exit with nothing started. An interpreter that disappears later
//!   exits [`EXIT_NO_RESTART`](snapbus_bus::runtime::EXIT_NO_RESTART): no restart loop. A
//!   consumer that fails before it subscribes fails the `attach` with its output's tail (the
//!   Python traceback), and is not restarted.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{ArgMatches, Args};
use snapbus_bus::runtime::{BUS_ENV, BusDir};

use crate::bus::bus_dir;
use crate::cli::BusArgs;
use crate::consumer_kinds::kind::{BuiltinConsumer, forward};

/// The environment variable naming the default interpreter.
pub(crate) const PYTHON_ENV: &str = "SNAPBUS_PYTHON";

/// How long `attach`'s check of the interpreter may take (it imports `snapbus`).
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// Options of `snapbus python` (and `attach python`).
#[derive(Debug, Clone, Args)]
pub(crate) struct PythonArgs {
    /// The Python interpreter, one that can `import snapbus` (default: $SNAPBUS_PYTHON, else
    /// `python3` on $PATH).
    #[arg(long, value_name = "PATH")]
    pub(crate) python: Option<String>,
    /// The consumer's module search path ($PYTHONPATH; `attach` passes on the caller's).
    #[arg(long, value_name = "PATHS", hide = true)]
    pub(crate) pythonpath: Option<String>,
    #[command(flatten)]
    pub(crate) bus: BusArgs,
    /// `module:Class` or `FILE.py:Class` (a `snapbus.Consumer` subclass, run by `python -m
    /// snapbus run`) or a script `FILE.py` (run as is), then its own arguments, e.g. `--glob
    /// 'lab.*' --start oldest` (put `--` before the target).
    #[arg(value_name = "TARGET", required = true, num_args = 1..,
          trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) target: Vec<String>,
}

/// What stops a Python consumer from starting (a restart would fail the same way).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PythonError {
    /// The interpreter is not there.
    #[error(
        "no Python interpreter '{given}' ({from}){where_}; give one with --python PATH or \
         ${env}"
    )]
    NoInterpreter {
        given: String,
        from: String,
        where_: &'static str,
        env: &'static str,
    },
    /// The interpreter could not be started.
    #[error("starting {}: {source}", python.display())]
    Exec {
        python: PathBuf,
        source: std::io::Error,
    },
    /// The interpreter cannot run the target.
    #[error("{} cannot run {target}: {why}", python.display())]
    Unusable {
        python: PathBuf,
        target: String,
        why: String,
    },
    /// The script is not there.
    #[error("no script {0}")]
    NoScript(String),
}

/// A [`PythonError`] of the verb itself (the process the broker starts, and restarts).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct CannotStart(PythonError);

/// Whether `err` is why `snapbus python` could not start the interpreter: a supervised Python
/// consumer that failed so exits `EXIT_NO_RESTART` (`attach`'s own checks exit 1).
pub(crate) fn restart_cannot_help(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|c| c.downcast_ref::<CannotStart>().is_some())
}

impl PythonArgs {
    /// The target (`module:Class` or a script) and its arguments.
    fn split(&self) -> (&str, &[String]) {
        match self.target.split_first() {
            Some((t, rest)) => (t, rest),
            None => ("", &[]),
        }
    }

    /// The interpreter, resolved in this process's environment.
    pub(crate) fn interpreter(&self) -> Result<PathBuf, PythonError> {
        interpreter(self.python.as_deref(), &[PYTHON_ENV])
    }

    /// The command line this consumer runs, with interpreter `python`.
    fn command(&self, python: &Path) -> Command {
        let (target, rest) = self.split();
        let mut cmd = Command::new(python);
        if is_script(target) {
            cmd.arg(target);
        } else {
            cmd.args(["-m", "snapbus", "run", target]);
        }
        cmd.args(rest);
        if let Some(pp) = &self.pythonpath {
            cmd.env("PYTHONPATH", pp);
        }
        cmd
    }
}

/// The interpreter `given` (`--python`), else the first of the environment variables `envs`
/// that is set, else `python3`; a bare name is looked up on `$PATH` of this process.
pub(crate) fn interpreter(
    given: Option<&str>,
    envs: &[&'static str],
) -> Result<PathBuf, PythonError> {
    let from_env = envs.iter().find_map(|var| {
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| (v, format!("${var}")))
    });
    let (given, from) = match (given, from_env) {
        (Some(p), _) => (p.to_owned(), "--python".to_owned()),
        (None, Some(found)) => found,
        (None, None) => ("python3".to_owned(), "the default".to_owned()),
    };
    let missing = |where_| PythonError::NoInterpreter {
        given: given.clone(),
        from: from.clone(),
        where_,
        env: envs.first().copied().unwrap_or(PYTHON_ENV),
    };
    if given.contains('/') {
        let path = std::path::absolute(&given).map_err(|_| missing(""))?;
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(missing(": not an executable file"))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(&given))
        .find(|p| p.is_absolute() && is_executable(p))
        .ok_or_else(|| missing(": not found on $PATH"))
}

/// Replaces this process with `cmd` (interpreter `python`) reading bus `dir`; returns only if
/// that failed, with an error that tells the broker not to restart it.
pub(crate) fn exec(mut cmd: Command, python: PathBuf, dir: &BusDir) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    // `exec` returns only if it failed.
    let source = cmd.env(BUS_ENV, dir.name().as_str()).exec();
    CannotStart(PythonError::Exec { python, source }).into()
}

/// Wraps why an interpreter could not be found so that a supervised consumer that failed so
/// is not restarted.
pub(crate) fn cannot_start(err: PythonError) -> anyhow::Error {
    CannotStart(err).into()
}

/// The check a module consumer of the package (`snapbus.rerun`, `snapbus.reports`) runs in
/// its interpreter: it imports `snapbus` and the module (else says which to install or
/// reinstall), then runs the module's `main(["--check", ARGS…])`; one of `ValueError`,
/// `OSError` and the module's own error classes is printed as its message (one line).
const MODULE_CHECK: &str = r#"
import importlib, sys
module, what, extra = sys.argv[1:4]
try:
    import snapbus  # noqa: F401
except Exception as e:
    sys.exit("cannot import snapbus (%s: %s); install it into %s: pip install ./python" % (type(e).__name__, e, sys.executable))
try:
    m = importlib.import_module(module)
except ImportError as e:
    sys.exit("this snapbus (%s) has no %s (%s); reinstall it: pip install ./python" % (snapbus.__file__, what, e))
errors = tuple(getattr(m, n) for n in extra.split(",") if n) + (ValueError, OSError)
try:
    sys.exit(m.main(["--check", *sys.argv[4:]]))
except errors as e:
    sys.exit(" ".join(str(e).split()))
"#;

/// Runs [`MODULE_CHECK`] of `module` (`what` names it in messages; `errors`: the module's own
/// exception classes, comma-separated) with `args` in `python`.
pub(crate) fn check_module(
    python: &Path,
    module: &str,
    what: &str,
    errors: &str,
    args: &[String],
) -> anyhow::Result<()> {
    let mut cmd = Command::new(python);
    cmd.args(["-c", MODULE_CHECK, module, what, errors])
        .args(args);
    run_check(cmd, python, &format!("the {what}"))
}

/// Runs module consumer `module` in this terminal: execs `PYTHON -m MODULE --bus=NAME ARGS…`
/// (the broker supervises that pid); returns only if that failed.
pub(crate) fn exec_module(
    bus: &BusArgs,
    python: Result<PathBuf, PythonError>,
    module: &str,
    args: &[String],
) -> anyhow::Result<()> {
    let dir = bus_dir(bus)?;
    let python = python.map_err(cannot_start)?;
    let mut cmd = Command::new(&python);
    cmd.args(["-m", module, &format!("--bus={}", dir.name())])
        .args(args);
    Err(exec(cmd, python, &dir))
}

/// What a module consumer forwards: what the user gave (without `--python`), then the
/// interpreter `python` resolved in the caller.
pub(crate) fn forward_with_python<T: BuiltinConsumer>(
    m: &ArgMatches,
    dir: &BusDir,
    skip: &[&str],
    python: &Path,
) -> anyhow::Result<Vec<String>> {
    let mut skip = skip.to_vec();
    skip.push("python");
    let mut argv = forward::<T>(m, dir, &skip)?;
    argv.push(format!("--python={}", python.display()));
    Ok(argv)
}

/// Runs `cmd` (a check in interpreter `python`, for `target`) to its end, within
/// [`CHECK_TIMEOUT`]; on failure the error says why: the last line of its stderr.
pub(crate) fn run_check(mut cmd: Command, python: &Path, target: &str) -> anyhow::Result<()> {
    // A check is ours alone: it must not run on after a `kill -9` of this process.
    snapbus_bus::orphan::die_with_parent(&mut cmd, snapbus_bus::orphan::Signal::KILL)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let unusable = |why: String| PythonError::Unusable {
        python: python.to_owned(),
        target: target.to_owned(),
        why,
    };
    let mut child = cmd.spawn().map_err(|source| PythonError::Exec {
        python: python.to_owned(),
        source,
    })?;
    // Read stderr while waiting: a long message must not fill the pipe and block the check.
    let mut pipe = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        if let Some(pipe) = pipe.as_mut() {
            use std::io::Read;
            let _ = pipe.read_to_string(&mut err);
        }
        err
    });
    let deadline = Instant::now() + CHECK_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the interpreter")? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(unusable(format!(
                "the check did not finish within {} s",
                CHECK_TIMEOUT.as_secs()
            ))
            .into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let err = reader.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    let why = err.trim().lines().last().unwrap_or("").to_owned();
    Err(unusable(if why.is_empty() {
        format!("the check exited with {status}")
    } else {
        why
    })
    .into())
}

/// A script rather than `module:Class`: ends in `.py`, or names a file.
fn is_script(target: &str) -> bool {
    target.ends_with(".py") || (!target.contains(':') && Path::new(target).is_file())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks, in the interpreter, that it imports `snapbus` and finds the module of `target`
/// (`module:Class`, or the file of `path/script.py:Class`); prints why not on stderr and exits
/// non-zero.
const CHECK: &str = r#"
import importlib.util, os, sys
try:
    import snapbus  # noqa: F401
except Exception as e:
    sys.exit("cannot import snapbus (%s: %s); install it into this interpreter: pip install ./python" % (type(e).__name__, e))
target = sys.argv[1]
mod = target.split(":", 1)[0]
if ":" in target and (mod.endswith(".py") or "/" in mod):
    if not os.path.isfile(mod):
        sys.exit("no script %r" % mod)
elif ":" in target:
    try:
        found = importlib.util.find_spec(mod) is not None
    except Exception as e:
        sys.exit("finding module %r: %s: %s" % (mod, type(e).__name__, e))
    if not found:
        sys.exit("no module named %r (the consumer runs in %s; set PYTHONPATH?)" % (mod, sys.path[0] or "."))
"#;

impl BuiltinConsumer for PythonArgs {
    const KIND: &'static str = "python";
    const VERB: &'static str = "python";
    const VERB_ABOUT: &'static str = "Run a Python consumer in this terminal: `module:Class` \
        (by `python -m snapbus run`) or a script, with its arguments after `--`";
    const ATTACH_ABOUT: &'static str = "A Python consumer: `module:Class` (a snapbus.Consumer \
        subclass, run by `python -m snapbus run`) or a script, with its arguments after `--` \
        (see `snapbus python --help`)";

    fn bus(&self) -> &BusArgs {
        &self.bus
    }

    fn run(&self) -> anyhow::Result<()> {
        let dir = bus_dir(&self.bus)?;
        let python = self.interpreter().map_err(CannotStart)?;
        let (target, _) = self.split();
        if is_script(target) && !Path::new(target).is_file() {
            return Err(CannotStart(PythonError::NoScript(target.to_owned())).into());
        }
        Err(exec(self.command(&python), python, &dir))
    }

    fn check(&self, dir: &BusDir, _who: &'static str) -> anyhow::Result<()> {
        let python = self.interpreter()?;
        let (target, _) = self.split();
        if is_script(target) {
            if !Path::new(target).is_file() {
                return Err(PythonError::NoScript(target.to_owned()).into());
            }
            return Ok(());
        }
        let mut cmd = Command::new(&python);
        cmd.args(["-c", CHECK, target])
            .env(BUS_ENV, dir.name().as_str());
        if let Some(pp) = &self.pythonpath {
            cmd.env("PYTHONPATH", pp);
        }
        run_check(cmd, &python, target)
    }

    fn what(&self) -> String {
        format!("Python ({})", self.split().0)
    }

    /// The interpreter resolved here, the caller's `$PYTHONPATH`, a script made absolute.
    fn argv(&self, _m: &ArgMatches, dir: &BusDir, _skip: &[&str]) -> anyhow::Result<Vec<String>> {
        let python = self.interpreter()?;
        let mut argv = vec![
            Self::VERB.to_owned(),
            format!("--bus={}", dir.name()),
            format!("--python={}", python.display()),
        ];
        let pythonpath = self.pythonpath.clone().or_else(|| {
            std::env::var_os("PYTHONPATH")
                .map(OsString::into_string)
                .and_then(Result::ok)
        });
        if let Some(pp) = pythonpath {
            argv.push(format!("--pythonpath={pp}"));
        }
        argv.push("--".to_owned());
        let (target, rest) = self.split();
        if is_script(target) {
            let abs = std::path::absolute(target).with_context(|| format!("resolving {target}"))?;
            argv.push(abs.display().to_string());
        } else {
            argv.push(target.to_owned());
        }
        argv.extend(rest.iter().cloned());
        Ok(argv)
    }
}

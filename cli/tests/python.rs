//! `snapbus attach python -- <module:Class | script.py> [ARGS…]` (issue 17, item 7): which
//! interpreter runs, with which command line and environment, under the broker's supervision
//! (same pid as the broker started, restarted, detached), and the errors that stop it before
//! anything starts or keep it from a restart loop.
//!
//! The interpreter here is a stand-in (a shell script): it writes down what it was run with,
//! in its working directory, then replaces itself with `snapbus echo`, a real consumer that
//! subscribes the way the Python one does (the bus crate's subscriber). The real Python
//! consumer is tested end to end by `python/tests/test_attach.py`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, run_cmd};

/// A fresh directory for one test.
fn workdir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("python-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("workdir");
    dir
}

/// A stand-in interpreter in `dir`: `-c CHECK TARGET` (attach's check) runs in the real
/// `python3`, with a stub `snapbus` module, in `dir`, which holds the modules `m` and `pkg.mod`;
/// any other run writes its environment to `env-$RESTART`, then its arguments (one per line) to
/// `argv-$RESTART` (each file whole, by a rename: once `argv-N` exists, both do), then becomes
/// `snapbus echo`.
fn fake_python(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    for (file, text) in [
        ("stub/snapbus.py", "# stands in for the package\n"),
        ("m.py", "class C: pass\n"),
        ("pkg/__init__.py", ""),
        ("pkg/mod.py", "class Cls: pass\n"),
    ] {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let path = dir.join("fakepy");
    let script = format!(
        r#"#!/bin/sh
if [ "$1" = "-c" ]; then
    PYTHONPATH={stub} exec python3 "$@"
fi
r=${{SNAPBUS_RESTART:-none}}
printf 'pid=%s\nbus=%s\npythonpath=%s\nsupervised=%s\n' "$$" "$SNAPBUS_BUS" "$PYTHONPATH" \
    "$SNAPBUS_SUPERVISED_BY" > env-$r.tmp && mv env-$r.tmp env-$r
printf '%s\n' "$@" > argv-$r.tmp && mv argv-$r.tmp argv-$r
exec {exe} echo --from oldest >/dev/null
"#,
        exe = env!("CARGO_BIN_EXE_snapbus"),
        stub = dir.join("stub").display()
    );
    std::fs::write(&path, script).expect("write fakepy");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::to_owned)
        .collect()
}

fn consumer(bus: &TestBus, id: u64) -> Option<Value> {
    bus.ls()["consumers"]
        .as_array()?
        .iter()
        .find(|c| c["id"] == id)
        .cloned()
}

fn kill9(pid: u64) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// `attach` in `dir` with extra environment; returns the id.
fn attach(bus: &TestBus, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> u64 {
    let mut cmd = bus.cmd(args);
    cmd.current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_cmd(&mut cmd);
    assert!(out.status.success(), "{args:?}: {}", out.stderr);
    assert!(out.stderr.contains("python"), "{}", out.stderr);
    out.stdout.trim().parse().expect("attach prints the id")
}

#[test]
fn a_python_consumer_runs_under_the_broker_as_the_process_it_started() {
    let bus = TestBus::up();
    let dir = workdir("module");
    fake_python(&dir);
    let args = [
        "attach",
        "python",
        "--python",
        "./fakepy",
        "--",
        "pkg.mod:Cls",
        "--glob",
        "a.*",
        "--start",
        "oldest",
    ];
    let id = attach(&bus, &dir, &[("PYTHONPATH", "/some/where")], &args);
    // The runner's command line: the target and its arguments as given.
    assert_eq!(
        lines(&dir.join("argv-0")),
        [
            "-m",
            "snapbus",
            "run",
            "pkg.mod:Cls",
            "--glob",
            "a.*",
            "--start",
            "oldest"
        ]
    );
    let env = lines(&dir.join("env-0"));
    assert!(env.contains(&format!("bus={}", bus.name)), "{env:?}");
    assert!(
        env.contains(&"pythonpath=/some/where".to_owned()),
        "{env:?}"
    );
    assert!(
        env.iter()
            .any(|l| l.starts_with("supervised=") && l.ends_with("broker.sock")),
        "{env:?}"
    );
    // The subscribed consumer is the process the broker started (the interpreter replaced
    // `snapbus python`, and was replaced in turn): `attach` returned once it subscribed.
    let c = consumer(&bus, id).expect("in ls");
    assert_eq!(c["supervised"], true, "{c}");
    let pid = c["info"]["pid"].as_u64().expect("pid");
    assert!(env.contains(&format!("pid={pid}")), "{env:?} vs {c}");

    // Killed: restarted like the built-ins, with the same interpreter, path and arguments.
    kill9(pid);
    wait_until("the restart", WATCHDOG, || dir.join("argv-1").exists());
    assert_eq!(lines(&dir.join("argv-1")), lines(&dir.join("argv-0")));
    let env1 = lines(&dir.join("env-1"));
    assert!(
        env1.contains(&"pythonpath=/some/where".to_owned()),
        "{env1:?}"
    );
    wait_until("it subscribed again", WATCHDOG, || {
        consumer(&bus, id).is_some_and(|c| {
            c["status"].as_str().unwrap_or("").starts_with("running")
                && c["info"]["pid"].as_u64() != Some(pid)
        })
    });
    let pid1 = consumer(&bus, id).expect("in ls")["info"]["pid"]
        .as_u64()
        .expect("pid");

    // `detach` stops it.
    let out = bus.run(&["detach", &id.to_string()]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!Path::new(&format!("/proc/{pid1}")).exists() || zombie_or_gone(pid1));
    let c = consumer(&bus, id).expect("an ended consumer stays in ls");
    assert!(
        !c["status"].as_str().unwrap_or("").starts_with("running"),
        "{c}"
    );
}

fn zombie_or_gone(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s[s.rfind(')').unwrap_or(0) + 1..]
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

#[test]
fn a_script_target_is_run_as_is_with_an_absolute_path() {
    let bus = TestBus::up();
    let dir = workdir("script");
    let py = fake_python(&dir);
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("sub/cons.py"), "# a consumer script\n").expect("script");
    let py = py.display().to_string();
    // The interpreter from $SNAPBUS_PYTHON; the script's own arguments, options included.
    let id = attach(
        &bus,
        &dir,
        &[("SNAPBUS_PYTHON", &py)],
        &["attach", "python", "--", "sub/cons.py", "--every", "3", "x"],
    );
    let script = dir.join("sub/cons.py").display().to_string();
    assert_eq!(lines(&dir.join("argv-0")), [&*script, "--every", "3", "x"]);
    let out = bus.run(&["detach", &id.to_string()]);
    assert!(out.status.success(), "{}", out.stderr);
}

#[test]
fn bad_python_consumers_fail_in_the_caller_with_nothing_started() {
    let bus = TestBus::up();
    let dir = workdir("errors");
    fake_python(&dir);
    for (env, args, needles) in [
        (
            vec![],
            vec!["--python", "/nonexistent/python3", "--", "m:C"],
            vec!["no Python interpreter '/nonexistent/python3' (--python): not an executable"],
        ),
        (
            vec![("SNAPBUS_PYTHON", "snapbus-no-such-python")],
            vec!["--", "m:C"],
            vec![
                "no Python interpreter 'snapbus-no-such-python' ($SNAPBUS_PYTHON): not found on $PATH",
            ],
        ),
        (
            vec![("PATH", "/nonexistent")],
            vec!["--", "m:C"],
            vec!["no Python interpreter 'python3' (the default): not found on $PATH"],
        ),
        (
            vec![],
            vec!["--python", "./fakepy", "--", "missing:Cls"],
            vec!["cannot run missing:Cls", "no module named 'missing'"],
        ),
        (
            vec![],
            vec!["--python", "./fakepy", "--", "nope.py"],
            vec!["no script nope.py"],
        ),
        (
            vec![],
            vec!["--python", "./fakepy", "--", "sub/nope.py:Cls"],
            vec!["cannot run sub/nope.py:Cls", "no script 'sub/nope.py'"],
        ),
    ] {
        let mut cmd = bus.cmd(&["attach", "python"]);
        cmd.args(&args).current_dir(&dir);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = run_cmd(&mut cmd);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", out.stderr);
        for needle in needles {
            assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        }
    }
    // No target: clap's usage error.
    // An interpreter without the package (python3 -I: no user site, no $PYTHONPATH).
    let bare = dir.join("barepy");
    std::fs::write(&bare, "#!/bin/sh\nexec python3 -I \"$@\"\n").expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mut cmd = bus.cmd(&["attach", "python", "--python", "./barepy", "--", "m:C"]);
    let out = run_cmd(cmd.current_dir(&dir));
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("cannot import snapbus") && out.stderr.contains("pip install"),
        "{}",
        out.stderr
    );
    let out = bus.run(&["attach", "python", "--python", "/bin/sh"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("<TARGET>"), "{}", out.stderr);
    // Nothing was started, and nothing runs the stand-in.
    assert_eq!(bus.ls()["consumers"], Value::Array(Vec::new()));
    assert!(!dir.join("argv-0").exists());
}

/// An interpreter gone by the time of a restart: the consumer exits 78, and the broker does
/// not restart it into the same failure.
#[test]
fn an_interpreter_gone_at_a_restart_is_not_restarted_again() {
    let bus = TestBus::up();
    let dir = workdir("gone");
    fake_python(&dir);
    let args = ["attach", "python", "--python", "./fakepy", "--", "m:C"];
    let id = attach(&bus, &dir, &[], &args);
    let pid = consumer(&bus, id).expect("in ls")["info"]["pid"]
        .as_u64()
        .expect("pid");
    std::fs::remove_file(dir.join("fakepy")).expect("rm");
    kill9(pid);
    let mut status = String::new();
    wait_until("the failed restart", WATCHDOG, || {
        status = consumer(&bus, id).expect("in ls")["status"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        status.contains("exited 78")
    });
    assert!(status.contains("not restarted"), "{status}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(!dir.join("argv-1").exists());
}

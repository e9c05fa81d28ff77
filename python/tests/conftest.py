"""Shared fixtures: a real bus per test (or one per session for in-process producers), the
`snapbus` CLI, Python child processes under a watchdog, and a condition poller.

Every test runs against its own runtime directory (SNAPBUS_RUNTIME_DIR), so tests never see a
user's bus or each other's. Every process a test starts is killed and reaped at teardown, and
every bus is taken down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]
# The first line of a child's code that imports the tests' own modules (rt_schema): children
# do not start in this directory (`CHILD_CWD`).
TESTS_ON_PATH = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
WATCHDOG_S = 60.0

# Set before any test imports snapbus: the in-process producer reads them once, at first use.
_RUNTIME = tempfile.mkdtemp(prefix="snapbus-pytest-")
os.environ["SNAPBUS_RUNTIME_DIR"] = _RUNTIME
SESSION_BUS = f"pytest-{os.getpid()}"
os.environ["SNAPBUS_BUS"] = SESSION_BUS
os.environ.pop("SNAPBUS_FILTER", None)
os.environ.setdefault("SNAPBUS_STRICT", "1")
# Tests start their buses themselves (`Bus.up`); those of the embedded default set it to 1.
os.environ["SNAPBUS_START_BUS"] = "0"
os.environ.pop("SNAPBUS_RECORD", None)

# Children must meet Ctrl-C as a terminal's program does. A shell without job control starts a
# background command (`cmd &`, how CI may be launched) with SIGINT ignored; the children would
# inherit that, and a Python child would never raise KeyboardInterrupt. A handler set here is
# reset to the default in every child at exec, where an ignored signal would stay ignored.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Python children start here, an empty directory: `-c` and `-m` put the working directory first
# on sys.path, and from the source tree's python/ that would be the source package (without the
# extension a pip install built) instead of the snapbus this test process imported.
CHILD_CWD = tempfile.mkdtemp(prefix="snapbus-pytest-cwd-")


def snapbus_bin() -> Path:
    """The CLI binary: $SNAPBUS_BIN, else the workspace's debug or release build."""
    explicit = os.environ.get("SNAPBUS_BIN")
    candidates = (
        [Path(explicit)]
        if explicit
        else [
            REPO / "target" / "debug" / "snapbus",
            REPO / "target" / "release" / "snapbus",
        ]
    )
    for c in candidates:
        if c.is_file():
            return c
    raise RuntimeError(
        f"no snapbus binary (looked at {', '.join(map(str, candidates))}): "
        "run `cargo build -p snapbus-cli` or set SNAPBUS_BIN"
    )


def wait_until(what: str, cond: Callable[[], object], timeout_s: float = WATCHDOG_S) -> object:
    """Polls `cond` until it returns something truthy; fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


class Proc:
    """A child process under a watchdog: killed (whole process group) and reaped on close."""

    def __init__(self, args: Sequence[str], env: Dict[str, str], **kw: object) -> None:
        self.args = list(args)
        self.popen = subprocess.Popen(
            self.args,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **kw,  # type: ignore[arg-type]
        )
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait(self, timeout_s: float = WATCHDOG_S) -> subprocess.CompletedProcess[str]:
        """Waits for the exit (killing it after `timeout_s`) and returns its output."""
        try:
            out, err = self.popen.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.popen.communicate()
            raise AssertionError(
                f"{self.args} ran over {timeout_s} s; stdout:\n{out}\nstderr:\n{err}"
            ) from None
        return subprocess.CompletedProcess(self.args, self.popen.returncode, out, err)

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait()


class Bus:
    """A real bus (`snapbus up`) with its own name; `down` on close."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.procs: List[Proc] = []

    @property
    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["SNAPBUS_BUS"] = self.name
        env["SNAPBUS_RUNTIME_DIR"] = _RUNTIME
        env.pop("SNAPBUS_FILTER", None)
        return env

    def cli(
        self,
        *args: str,
        check: bool = True,
        timeout_s: float = WATCHDOG_S,
    ) -> subprocess.CompletedProcess[str]:
        """Runs `snapbus ARGS` against this bus to its end."""
        out = subprocess.run(
            [str(snapbus_bin()), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if check and out.returncode != 0:
            raise AssertionError(f"snapbus {' '.join(args)}: exit {out.returncode}\n{out.stderr}")
        return out

    def spawn_cli(self, *args: str) -> Proc:
        """Starts `snapbus ARGS` in the background (killed at teardown)."""
        p = Proc([str(snapbus_bin()), *args], self.env)
        self.procs.append(p)
        return p

    def spawn_py(
        self,
        code_or_args: str | Sequence[str],
        env: Optional[Dict[str, str]] = None,
    ) -> Proc:
        """Starts this interpreter on a code string (or on argv) with the bus's environment, in
        an empty working directory (`CHILD_CWD`)."""
        full_env = self.env
        full_env.update(env or {})
        args = ["-c", code_or_args] if isinstance(code_or_args, str) else list(code_or_args)
        p = Proc([sys.executable, *args], full_env, cwd=CHILD_CWD)
        self.procs.append(p)
        return p

    def ls(self) -> Dict[str, object]:
        """`snapbus ls --json`, parsed."""
        return json.loads(self.cli("ls", "--json").stdout)  # type: ignore[no-any-return]

    def up(self) -> None:
        out = self.cli("up")
        assert "is up" in out.stdout, out.stdout

    def close(self) -> None:
        for p in self.procs:
            p.kill()
        self.cli("down", check=False)


def _new_bus(name: str) -> Iterator[Bus]:
    bus = Bus(name)
    bus.up()
    try:
        yield bus
    finally:
        bus.close()


@pytest.fixture(scope="session")
def session_bus() -> Iterator[Bus]:
    """The bus this test process's own telemetry joins (SNAPBUS_BUS of the session)."""
    yield from _new_bus(SESSION_BUS)


@pytest.fixture()
def bus() -> Iterator[Bus]:
    """A fresh bus of the test's own; producers and consumers in child processes use it."""
    yield from _new_bus(f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="session", autouse=True)
def _runtime_dir() -> Iterator[None]:
    yield
    shutil.rmtree(_RUNTIME, ignore_errors=True)
    shutil.rmtree(CHILD_CWD, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Emit-side helpers (test_emit, test_handler, test_fork).
# ---------------------------------------------------------------------------------------------


def run_producer(
    bus: Bus,
    code: str,
    env: Optional[Dict[str, str]] = None,
) -> subprocess.CompletedProcess[str]:
    """Runs a Python producer (`code`, after `import snapbus`) on `bus` to its end; it must
    exit 0. Its stdout is returned (for values it prints)."""
    prelude = "import snapbus, sys\nassert snapbus.wait_for_bus(30), 'no bus'\n"
    out = bus.spawn_py(prelude + code, env=env).wait()
    assert out.returncode == 0, f"producer failed ({out.returncode}):\n{out.stderr}"
    return out


def echo_oldest(bus: Bus, count: int, *globs: str) -> List[Dict[str, object]]:
    """`snapbus echo --from oldest --count COUNT GLOBS`: the first `count` events still in
    the rings, as parsed JSON objects."""
    out = bus.cli("echo", "--from", "oldest", "--count", str(count), *globs)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == count, f"expected {count} events, got {len(lines)}: {out.stderr}"
    return lines


# ---------------------------------------------------------------------------------------------
# The read side's helpers (test_subscribe, test_event, test_consumer, test_aio, test_recording).
# ---------------------------------------------------------------------------------------------


# The fields of `demo.step`, in their order (`snapbus demo --help`).
DEMO_STEP_FIELDS = ["episode", "step", "mode", "reward", "position", "observation"]


def demo_step_expected(e: int, s: int, width: int = 8, height: int = 6) -> dict[str, object]:
    """What `snapbus demo --help` says step `s` of episode `e` holds (observation as rows)."""
    return {
        "episode": e,
        "step": s,
        "mode": "Eval" if e % 4 == 3 else "Train",
        "reward": ((31 * e + 17 * s) % 11) / 10 - 0.5,
        "position": [0.5 * s, float(e), float((s % 8) - 4)],
        "observation": [
            [(x + 2 * y + 3 * s + 5 * e) % 256 for x in range(width)] for y in range(height)
        ],
    }


def demo_episode_end_expected(e: int, steps: int) -> dict[str, object]:
    """What `snapbus demo --help` says the end of episode `e` holds."""
    total = 0.0
    for s in range(steps):
        total += ((31 * e + 17 * s) % 11) / 10 - 0.5
    return {
        "episode": e,
        "steps": steps,
        "mode": "Eval" if e % 4 == 3 else "Train",
        "total_reward": total,
        "mean_reward": total / steps,
    }


def demo_emitted(proc_stdout_stderr: str) -> int:
    """The N of `snapbus demo: emitted N of M events`."""
    import re

    m = re.search(r"emitted (\d+) of (\d+) events", proc_stdout_stderr)
    assert m, proc_stdout_stderr
    return int(m.group(1))


# The demo run of `demo_while_stopped`: 50 000 steps, 50 episode ends.
LAP_EPISODES, LAP_STEPS = 50, 1000


def demo_while_stopped(bus: Bus, consumer: Proc, monkeypatch: pytest.MonkeyPatch) -> int:
    """Runs `snapbus demo` (LAP_EPISODES x LAP_STEPS) flat out into a 1 MiB ring (~7000
    records) while `consumer` is stopped (SIGSTOP, SIGCONT after): the ring is lapped under it.
    How many events the demo emitted."""
    consumer.signal(signal.SIGSTOP)
    monkeypatch.setenv("SNAPBUS_LANE_BYTES", str(1 << 20))
    size = ("--episodes", str(LAP_EPISODES), "--steps", str(LAP_STEPS))
    try:
        out = bus.cli("demo", "--no-echo", "--rate", "0", *size)
    finally:
        consumer.signal(signal.SIGCONT)
    return demo_emitted(out.stdout + out.stderr)

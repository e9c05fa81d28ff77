"""`python -m snapbus run MODULE:CLASS`: a Consumer class run as a process, shown in
`snapbus ls` under its kind, flushed on SIGTERM, failing loudly on a hook's exception."""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path
from typing import Optional

from conftest import Bus, Proc, wait_until

CONSUMER = textwrap.dedent("""
    import json, snapbus

    class Count(snapbus.Consumer):
        kind = "counter"

        def __init__(self, out):
            self.out = out
            self.steps = []

        def on_event(self, ev):
            self.steps.append([ev.payload.episode, ev.payload.step])

        def flush(self):
            with open(self.out, "w") as f:
                json.dump(self.steps, f)

    class Broken(snapbus.Consumer):
        def on_event(self, ev):
            raise ValueError("broken consumer")
""")


def _module(tmp_path: Path) -> dict:
    (tmp_path / "my_consumers.py").write_text(CONSUMER)
    return {"PYTHONPATH": str(tmp_path)}


def _run(bus: Bus, target: str, *args: str, env: Optional[dict] = None) -> Proc:
    """Starts `python -m snapbus run TARGET ARGS` on `bus`."""
    return bus.spawn_py(["-m", "snapbus", "run", target, *args], env=env)


def _steps_to_end(bus: Bus, target: str, out: Path, env: Optional[dict] = None) -> object:
    """Runs the `Count` consumer TARGET over the demo's steps, from the oldest to the end; the
    [episode, step] pairs it wrote to `out`."""
    args = ("--glob", "demo.step", "--start", "oldest", "--until-end", "--", str(out))
    res = _run(bus, target, *args, env=env).wait()
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text())


def test_run_a_consumer_class_to_the_end(bus: Bus, tmp_path: Path) -> None:
    env = _module(tmp_path)
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "2", "--steps", "3")
    out = tmp_path / "steps.json"
    got = _steps_to_end(bus, "my_consumers:Count", out, env)
    assert got == [[e, s] for e in range(2) for s in range(3)]


def test_a_running_consumer_shows_its_kind_and_flushes_on_sigterm(
    bus: Bus,
    tmp_path: Path,
) -> None:
    env = _module(tmp_path)
    out = tmp_path / "steps.json"
    args = ("--glob", "demo.step", "--flush-every", "60", "--", str(out))
    p = _run(bus, "my_consumers:Count", *args, env=env)
    wait_until("the consumer in snapbus ls", lambda: "counter" in json.dumps(bus.ls()))
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "1", "--steps", "2")
    wait_until(
        "the consumer to read the demo",
        lambda: '"delivered": 2' in json.dumps(bus.ls()) or "'delivered': 2" in str(bus.ls()),
    )
    p.signal(signal.SIGTERM)
    res = p.wait()
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text()) == [[0, 0], [0, 1]]


def test_a_hook_exception_fails_the_process_with_its_traceback(bus: Bus, tmp_path: Path) -> None:
    env = _module(tmp_path)
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "1", "--steps", "1")
    p = _run(bus, "my_consumers:Broken", "--start", "oldest", env=env)
    res = p.wait()
    assert res.returncode == 1
    assert "ValueError: broken consumer" in res.stderr


def test_bad_targets_are_refused(bus: Bus, tmp_path: Path) -> None:
    env = _module(tmp_path)
    for target, msg in [
        ("my_consumers", "expected MODULE:CLASS"),
        ("my_consumers:Nope", "has no 'Nope'"),
        ("json:dumps", "not a snapbus.Consumer subclass"),
    ]:
        res = _run(bus, target, env=env).wait()
        assert res.returncode != 0 and msg in res.stderr, (target, res.stderr)


def test_a_script_path_target(bus: Bus, tmp_path: Path) -> None:
    script = tmp_path / "consumers_script.py"
    script.write_text(CONSUMER)
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "1", "--steps", "2")
    out = tmp_path / "steps.json"
    assert _steps_to_end(bus, f"{script}:Count", out) == [[0, 0], [0, 1]]

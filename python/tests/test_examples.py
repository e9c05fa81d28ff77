"""The examples (issue 17, item 8): examples/monty_like.py emits on a real bus while
examples/live_plot.py, a `snapbus.Consumer` in another process, plots it into a PNG (Agg); the
consumer sees every episode and every step, and the PNG is written. Needs numpy and matplotlib
(in the test venv): without them this fails, it does not skip.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO, WATCHDOG_S, Bus, snapbus_bin, wait_until

EXAMPLES = REPO / "python" / "examples"


def test_the_live_plot_sees_every_episode_of_the_monty_like_experiment(
    bus: Bus, tmp_path: Path
) -> None:
    import matplotlib  # noqa: F401  (the consumer needs it: fail here, clearly, if missing)

    png = tmp_path / "plot.png"
    episodes, steps = 4, 6
    plot = bus.spawn_py(
        [
            str(EXAMPLES / "live_plot.py"),
            "--out",
            str(png),
            "--episodes",
            str(episodes),
            "--start",
            "oldest",
        ]
    )
    # The plot subscribes first (its `snapbus ls` entry), so it reads every record live.
    wait_until(
        "the live plot subscribed",
        lambda: any(c["info"]["pid"] == plot.pid for c in bus.ls()["consumers"]),
    )
    exp = bus.spawn_py(
        [
            str(EXAMPLES / "monty_like.py"),
            "--episodes",
            str(episodes),
            "--steps",
            str(steps),
            "--rate",
            "0",
        ]
    )
    done = exp.wait()
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("episode ") == episodes, done.stdout

    out = plot.wait()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("episode ")] == [
        str(e) for e in range(episodes)
    ], out.stdout
    seen = ast.literal_eval(lines[-1][len("seen ") :])
    assert seen == {"episodes": list(range(episodes)), "steps": episodes * steps}, out.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, len(data)


def test_the_producer_runs_without_a_bus(bus: Bus, tmp_path: Path) -> None:
    """Telemetry never blocks nor fails the experiment: no bus, the run still completes."""
    exp = bus.spawn_py(
        [
            str(EXAMPLES / "monty_like.py"),
            "--episodes",
            "2",
            "--steps",
            "3",
            "--rate",
            "0",
            "--wait-bus",
            "0.1",
        ],
        env={"SNAPBUS_BUS": "pytest-no-such-bus"},
    )
    done = exp.wait()
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("episode ") == 2, done.stdout
    assert "no bus yet" in done.stderr, done.stderr


def test_the_live_plot_runs_under_the_broker_and_detach_stops_it(bus: Bus, tmp_path: Path) -> None:
    """`snapbus attach python -- live_plot.py …`: a script, run as is, supervised."""
    import matplotlib  # noqa: F401

    png = tmp_path / "plot.png"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(snapbus_bin()), *args],
            env=bus.env,
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            timeout=WATCHDOG_S,
        )

    out = cli(
        "attach",
        "python",
        "--python",
        sys.executable,
        "--",
        str(EXAMPLES / "live_plot.py"),
        "--out",
        "plot.png",
    )
    assert out.returncode == 0, out.stderr
    cid = int(out.stdout.strip())
    exp = bus.spawn_py(
        [str(EXAMPLES / "monty_like.py"), "--episodes", "2", "--steps", "4", "--rate", "0"]
    )
    assert exp.wait().returncode == 0
    # It redraws (and rewrites the PNG, in its working directory) a few times a second.
    wait_until("the PNG", png.exists)
    out = cli("detach", str(cid))
    assert out.returncode == 0, out.stderr
    [c] = [c for c in bus.ls()["consumers"] if c["id"] == cid]  # type: ignore[union-attr, index]
    assert "exited 0" in str(c["status"]), c
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

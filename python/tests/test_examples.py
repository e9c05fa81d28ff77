"""The examples (issue 17, item 8): examples/monty_like.py emits on a real bus while
examples/live_plot.py, a `snapbus.Consumer` in another process, plots it into a PNG (Agg); the
consumer sees every episode and every step, and the PNG is written. Needs numpy and matplotlib
(in the test venv): without them this fails, it does not skip.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO, Bus, wait_until

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

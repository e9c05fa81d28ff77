"""The quick start: an experiment on snapbus whose run is kept, then read back into pandas.

    pip install "./python[pandas]"
    python python/examples/quickstart.py [--runs DIR] [--episodes N] [--steps N]

Nothing else to start: with no bus running, `snapbus.init(record=DIR)` starts one in the
background (the `snapbus` command pip installed), which keeps every run in DIR (one MCAP file a
run, the oldest removed past a size cap) and stops by itself a minute after the last program
leaves. While it runs, `snapbus echo 'quickstart.*'` or `snapbus attach plotter` in another
terminal show the steps live.

Values are deterministic: reward = ((7*e + 3*s) % 10) / 10 at step s of episode e.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import snapbus


@dataclass
class Step:
    """One step of an episode."""

    schema_id: ClassVar[str] = "quickstart.step"
    schema_version: ClassVar[int] = 1
    episode: int
    step: int
    reward: float


def reward(episode: int, step: int) -> float:
    return ((7 * episode + 3 * step) % 10) / 10


def newest_run(runs: Path, since: float, timeout_secs: float = 30.0) -> Any:
    """The run this script recorded, once its file is complete (its recorder finishes it when
    the run ends: when this process has left the bus), as a pandas DataFrame."""
    deadline = time.monotonic() + timeout_secs
    while True:
        files = sorted(p for p in runs.glob("run-*.mcap") if p.stat().st_mtime >= since)
        if files:
            rec = snapbus.open_recording(files[-1])
            df = rec.to_pandas("quickstart.step")
            if rec.complete:
                return df
        if time.monotonic() > deadline:
            raise SystemExit(
                f"no complete run appeared in {runs} within {timeout_secs:.0f} s (a bus that was "
                "already running keeps runs only if started with `snapbus up --record DIR`)"
            )
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where runs are kept")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(format="%(name)s: %(message)s")

    started = time.time() - 1
    snapbus.init(record=args.runs)  # joins the bus, or starts one that keeps every run
    telemetry = snapbus.get_telemetry("quickstart")
    for e in range(args.episodes):
        for s in range(args.steps):
            telemetry.snapshot(logging.INFO, Step(episode=e, step=s, reward=reward(e, s)))
    snapbus.shutdown()  # this process leaves the bus: its run ends and its file is finished

    df = newest_run(args.runs, since=started)
    print(df.groupby("episode")["reward"].agg(["count", "mean"]))
    expected = args.episodes * args.steps
    if len(df) != expected:
        raise SystemExit(f"the run holds {len(df)} steps, not {expected}")
    print(f"{len(df)} steps kept in {args.runs}/; `snapbus ls` shows the bus")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""`Recording.to_pandas()` in rows per second, on the demo's step events with 16x16 images
(issue 40: >= 1 M rows/s): a `snapbus record` of `snapbus demo --image 16x16 --rate 0` made on
the bus this process is given, then read back

- by `to_pandas("demo.step")` (the Rust Arrow path: columns built in Rust, handed to pyarrow,
  tensors reshaped; the median of 3 calls on the same `Recording`, which also shows it can be
  called again; by wall time, and by this process's CPU time, which a loaded machine does not
  inflate), and
- row by row, as `to_pandas` did before (iterate the events, flatten each payload with
  `snapbus.fields.columns`, `pandas.DataFrame(rows)`), on the first `--loop-rows` rows.

A row of `compare` (`compare --python-rows recording` runs only these); alone, against a running
bus (`snapbus up`):

    python benches/python/recording_rows.py [--quick]

The `snapbus` command: $SNAPBUS_BIN, else target/release/snapbus of this workspace.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import snapbus
from compare_py import row  # the harness's row format
from snapbus.fields import columns

ROOT = Path(__file__).resolve().parents[2]


def snapbus_bin() -> str:
    env = os.environ.get("SNAPBUS_BIN")
    if env:
        return env
    exe = ROOT / "target" / "release" / "snapbus"
    if not exe.is_file():
        raise RuntimeError(f"no $SNAPBUS_BIN and no {exe} (cargo build --release -p snapbus-cli)")
    return str(exe)


def wait_until(what: str, cond: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def recorder_delivered(exe: str) -> int:
    """Records the recorder has read (-1 while it is not attached)."""
    out = subprocess.run([exe, "ls", "--json"], capture_output=True, text=True, check=True)
    for c in json.loads(out.stdout).get("consumers", []):
        if c["info"]["kind"] == "recorder":
            return int(c["delivered"])
    return -1


def make_recording(path: Path, episodes: int, steps: int) -> None:
    """Records `episodes` x `steps` demo steps (16x16 images) into `path`."""
    exe = snapbus_bin()
    rec = subprocess.Popen(
        [exe, "record", "-o", str(path), "--schema", "demo.step"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until("the recorder to attach", lambda: recorder_delivered(exe) >= 0)
        subprocess.run(
            [
                *(exe, "demo", "--no-echo", "--rate", "0", "--image", "16x16"),
                *("--episodes", str(episodes), "--steps", str(steps)),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        total = episodes * steps
        last = [-1, time.monotonic()]

        def settled() -> bool:
            # All read, or nothing more for a second (what it lost is in the file as loss).
            n = recorder_delivered(exe)
            if n >= total:
                return True
            if n != last[0]:
                last[0], last[1] = n, time.monotonic()
            return time.monotonic() - last[1] > 1.0

        wait_until("the recorder to read the demo", settled)
        rec.send_signal(signal.SIGINT)
        if rec.wait(timeout=60) != 0:
            raise RuntimeError(f"snapbus record exited {rec.returncode}")
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()


def old_to_pandas(rec: Any, schema: str, limit: int) -> Any:
    """`Recording.to_pandas` as it was before the Arrow path: a Python loop over the events."""
    import pandas  # type: ignore[import-untyped]

    rows: list[dict[str, Any]] = []
    for ev in rec:
        if ev.schema.id != schema:
            continue
        row: dict[str, Any] = {
            "t_nanos": ev.t_nanos,
            "producer": ev.producer.name,
            "pid": ev.producer.pid,
            "seq": ev.seq,
            "version": ev.schema.version,
        }
        for k, v in columns(ev.payload, ev.schema).items():
            row["payload." + k if k in row else k] = v
        rows.append(row)
        if len(rows) == limit:
            break
    return pandas.DataFrame(rows)


def rate_text(per_s: float) -> str:
    if per_s >= 1e6:
        return f"{per_s / 1e6:.2f} M rows/s"
    return f"{per_s / 1e3:.1f} k rows/s"


def recording_rows(quick: bool, loop_rows: int = 50_000) -> list[dict[str, Any]]:
    episodes, steps = (10, 1_000) if quick else (200, 5_000)
    tmp = Path(tempfile.mkdtemp(prefix="snapbus-recording-rows-"))
    try:
        path = tmp / "demo.mcap"
        make_recording(path, episodes, steps)
        rec = snapbus.open_recording(path)
        times, cpu, n = [], [], 0
        for _ in range(3):
            start, start_cpu = time.perf_counter(), time.process_time()
            frame = rec.to_pandas("demo.step")
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            n = len(frame)
            del frame
        new = n / statistics.median(times)
        new_cpu = n / statistics.median(cpu)
        limit = min(loop_rows, n)
        start = time.perf_counter()
        old = len(old_to_pandas(snapbus.open_recording(path), "demo.step", limit))
        before = old / (time.perf_counter() - start)
        size = path.stat().st_size >> 20
        what = f"demo.step, 16x16 u8 images, {n} rows, {size} MiB recording"
        return [
            row(
                f"Recording.to_pandas(), Rust Arrow path ({what})",
                new,
                "rows/s",
                f"{rate_text(new)} (CPU time: {rate_text(new_cpu)})",
                "≥ 1 M rows/s",
                new >= 1e6,
            ),
            row(
                f"to_pandas() row by row in Python, as before (first {old} rows)",
                before,
                "rows/s",
                rate_text(before),
                "",
                None,
            ),
            row(
                "to_pandas(): Arrow path ÷ row by row",
                new / before,
                "x",
                f"{new / before:.0f}x",
                "",
                None,
            ),
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 k rows: proves the row runs")
    args = parser.parse_args(argv)
    for r in recording_rows(args.quick):
        print(f"{r['row']}: {r['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

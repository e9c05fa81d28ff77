#!/usr/bin/env python3
"""How fast `snapbus mcp` answers an assistant about a recording (issue #42, "Speed").

The question: "which episodes were confused, and what did learning module 1 believe at their last
step?", on a recording of 231 episodes x 100 steps with a 64x64 observation per step. The
recording is made the real way: a bus, `snapbus attach recorder`, and a Python producer emitting
`bench.mcp.step` (episode, step, lm1_belief, lm1_evidence, observation: 64x64 uint8) and
`bench.mcp.episode` (episode, steps, result). Then the official MCP client (`mcp`) starts `snapbus
mcp --recordings DIR` and asks, with two `query_recording` calls: the episodes whose `result` is
"confused", then those episodes' last step, projected to `lm1_belief`. The answers are checked
against the values emitted; the time is the two calls' wall time, median of the repetitions (the
server already running, as an assistant keeps it).

    python benches/python/mcp_query.py [--quick] [--reps N]

Needs snapbus (`pip install ./python`), numpy, the `mcp` package (Python >= 3.10) and the CLI
binary: $SNAPBUS_BIN, else `snapbus` on PATH (build it in release for a figure:
`cargo build --release -p snapbus-cli`). Prints one JSON line; exit status 1 on a wrong answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Dict, List

import numpy as np
from numpy.typing import NDArray

RUNTIME = tempfile.mkdtemp(prefix="snapbus-mcp-bench-")
os.environ["SNAPBUS_RUNTIME_DIR"] = RUNTIME
os.environ["SNAPBUS_BUS"] = f"mcp-bench-{uuid.uuid4().hex[:8]}"
os.environ["SNAPBUS_START_BUS"] = "0"
os.environ.pop("SNAPBUS_FILTER", None)

import snapbus  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

BELIEFS = ["mug", "bowl", "spoon", "fork", "knife", "plate", "cup", "banana", "apple", "can"]


@dataclass
class Step:
    schema_id: ClassVar[str] = "bench.mcp.step"
    schema_version: ClassVar[int] = 1
    episode: int
    step: int
    lm1_belief: str
    lm1_evidence: float
    observation: NDArray[np.uint8]


@dataclass
class Episode:
    schema_id: ClassVar[str] = "bench.mcp.episode"
    schema_version: ClassVar[int] = 1
    episode: int
    steps: int
    result: str


def belief(e: int, s: int) -> str:
    return BELIEFS[(13 * e + s) % len(BELIEFS)]


def result(e: int) -> str:
    return "confused" if e % 7 == 3 else ("correct" if e % 5 else "no_match")


def snapbus_bin() -> str:
    found = os.environ.get("SNAPBUS_BIN") or shutil.which("snapbus")
    if not found:
        raise SystemExit("no snapbus binary: set SNAPBUS_BIN or put snapbus on PATH")
    return found


def cli(*args: str) -> str:
    out = subprocess.run(
        [snapbus_bin(), *args], capture_output=True, text=True, timeout=300, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"snapbus {' '.join(args)}: {out.stderr}")
    return out.stdout


def record(path: Path, episodes: int, steps: int) -> float:
    """Emits the run with a recorder attached; returns the recording's size in MB."""
    rec = cli("attach", "recorder", "-o", str(path), "--schema", "bench.mcp.*").strip()
    snapbus.init(start_bus=False)
    if not snapbus.wait_for_bus(30):
        raise SystemExit("no bus")
    tel = snapbus.get_telemetry("bench.mcp")
    y, x = np.mgrid[0:64, 0:64]
    for e in range(episodes):
        for s in range(steps):
            obs = ((x + 2 * y + 3 * s + 5 * e) % 256).astype(np.uint8)
            tel.snapshot(
                logging.INFO,
                Step(e, s, belief(e, s), ((7 * e + 3 * s) % 10) / 10, obs),
            )
        tel.snapshot(logging.INFO, Episode(e, steps, result(e)))
        time.sleep(0.002)  # a recorder compressing 4 KiB images keeps up at this pace
    snapbus.shutdown()
    cli("detach", rec)
    info = json.loads(cli("inspect", "--json", str(path)))
    counts = {s["id"]: s["records"] for s in info["schemas"]}
    want = {"bench.mcp.step": episodes * steps, "bench.mcp.episode": episodes}
    if counts != want:
        raise SystemExit(f"the recording holds {counts}, not {want}")
    return path.stat().st_size / 1e6


async def ask(session: ClientSession, path: str) -> List[Dict[str, Any]]:
    """The two calls: the confused episodes, then LM 1's belief at their last step."""
    confused = await session.call_tool(
        "query_recording",
        {
            "path": path,
            "schema": "bench.mcp.episode",
            "where": [{"field": "result", "op": "==", "value": "confused"}],
            "fields": ["episode"],
            "limit": 1000,
        },
    )
    assert not confused.is_error and confused.structured_content, confused.content
    episodes = [r["episode"] for r in confused.structured_content["records"]]
    last = await session.call_tool(
        "query_recording",
        {
            "path": path,
            "schema": "bench.mcp.step",
            "episodes": episodes,
            "per_episode": "last",
            "fields": ["episode", "step", "lm1_belief"],
        },
    )
    assert not last.is_error and last.structured_content, last.content
    return list(last.structured_content["records"])


async def measure(directory: Path, path: Path, reps: int) -> Dict[str, Any]:
    params = StdioServerParameters(
        command=snapbus_bin(), args=["mcp", "--recordings", str(directory)], env=dict(os.environ)
    )
    times: List[float] = []
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            started = time.perf_counter() - t0
            for _ in range(reps):
                t = time.perf_counter()
                rows = await ask(session, str(path))
                times.append(time.perf_counter() - t)
    return {"rows": rows, "times_s": times, "server_start_s": started}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small recording, one repetition")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    args = parser.parse_args(argv)
    episodes, steps = (14, 10) if args.quick else (231, 100)
    reps = args.reps or (1 if args.quick else 3)
    directory = Path(tempfile.mkdtemp(prefix="snapbus-mcp-bench-rec-"))
    path = directory / "run.mcap"
    cli("up")
    try:
        mb = record(path, episodes, steps)
        got = asyncio.run(measure(directory, path, reps))
    finally:
        cli("down")
        shutil.rmtree(RUNTIME, ignore_errors=True)
    want = [
        {"episode": e, "step": steps - 1, "lm1_belief": belief(e, steps - 1)}
        for e in range(episodes)
        if result(e) == "confused"
    ]
    answers = [{k: r[k] for k in ("episode", "step", "lm1_belief")} for r in got["rows"]]
    shutil.rmtree(directory, ignore_errors=True)
    out = {
        "episodes": episodes,
        "steps": steps,
        "recording_mb": round(mb, 1),
        "server_start_s": round(got["server_start_s"], 3),
        "query_s": [round(t, 3) for t in got["times_s"]],
        "median_s": round(statistics.median(got["times_s"]), 3),
        "correct": answers == want,
    }
    print(json.dumps(out))
    if answers != want:
        print(f"wrong answer: {answers} != {want}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

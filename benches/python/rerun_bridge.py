#!/usr/bin/env python3
"""How fast the rerun bridge (`snapbus.rerun.Bridge`, issue 19, "Speed") drains the bus, and
what it costs at the demo's default rate.

Rows:

- `demo.step` (the demo's step event: 8x6 u8 image, 3 scalars, a 3-vector, an enum): N events
  are emitted first into a ring big enough to hold them all (`snapbus demo --rate 0`), then the
  bridge reads them from the oldest (`snapbus.run(..., start="oldest", cut=True,
  until_end=True)`) and sends them to an `.rrd` file (rerun's FileSink): events/s = N / the
  bridge's wall time, flushes included (one `send_columns` per entity per flush, every 0.2 s
  as `snapbus attach rerun` does). Nothing may be lost. Also per CPU second of this process
  (`time.process_time`, rerun's encoder and file threads included): the figure a shared
  machine disturbs least.
- `bench.depth` (a 64x64 f32 depth image, 16 KiB, and a step counter), the same way, from a
  Python producer; N/4 of them (the ring holds them all: 1 GiB lanes).
- CPU % of a supervised bridge (`snapbus attach rerun --save`) while `snapbus demo` runs at its
  default rate (20 steps/s) for `--seconds`: its user+system CPU time over the wall time.

Run alone: `python benches/python/rerun_bridge.py [--quick]` in an interpreter with snapbus and
rerun-sdk==0.41.0 (target/py-rerun after `.ci/test`), with `SNAPBUS_BIN` naming the CLI
(default: target/debug/snapbus). It starts its own bus in a temporary runtime directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import snapbus
from snapbus.rerun import Bridge, import_rerun

REPO = Path(__file__).resolve().parents[2]

PRODUCER = textwrap.dedent(
    """
    from dataclasses import dataclass
    from typing import ClassVar
    import numpy as np
    import snapbus

    @dataclass
    class Depth:
        schema_id: ClassVar[str] = "bench.depth"
        schema_version: ClassVar[int] = 1
        step: int
        depth: snapbus.Tensor[np.float32]

    assert snapbus.wait_for_bus(30)
    t = snapbus.get_telemetry("bench")
    imgs = np.random.default_rng(1).random((64, 64, 64), dtype=np.float32)
    for i in range({n}):
        t.snapshot(snapbus.INFO, Depth(step=i, depth=imgs[i % 64]))
    snapbus.shutdown()
    """
)


def cli() -> str:
    return os.environ.get("SNAPBUS_BIN", str(REPO / "target" / "debug" / "snapbus"))


def drain(rr: Any, out: Path, glob: str, expect: int) -> dict[str, Any]:
    """Runs the bridge over what the rings hold; events/s."""
    rec = rr.RecordingStream("bench")
    rec.set_sinks(rr.FileSink(str(out)))
    bridge = Bridge(rec, rr=rr)
    t0, c0 = time.perf_counter(), time.process_time()
    summary = snapbus.run(bridge, glob, start="oldest", cut=True, until_end=True, flush_every=0.2)
    rec.flush()
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    rec.disconnect()
    if summary.delivered != expect or summary.lost:
        got = f"delivered {summary.delivered} of {expect}, lost {summary.lost}"
        raise RuntimeError(f"{glob}: {got}")
    return {
        "events": summary.delivered,
        "seconds": round(elapsed, 3),
        "events_per_s": round(summary.delivered / elapsed),
        "cpu_seconds": round(cpu, 3),
        "events_per_cpu_s": round(summary.delivered / cpu),
        "rrd_bytes": out.stat().st_size,
    }


def cpu_at_demo_rate(env: dict[str, str], out: Path, seconds: float, python: str) -> dict[str, Any]:
    """The supervised bridge's CPU % while the demo runs at its default rate."""
    steps = int(seconds * 20)
    attached = subprocess.run(
        [cli(), "attach", "rerun", "--python", python, "--save", str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    cid = attached.stdout.strip()
    pid = next(c["info"]["pid"] for c in ls(env)["consumers"] if str(c["id"]) == cid)
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    c0, t0 = cpu(), time.perf_counter()
    subprocess.run(
        [cli(), "demo", "--no-echo", "--episodes", "1", "--steps", str(steps)],
        env=env,
        capture_output=True,
        check=True,
    )
    c1, t1 = cpu(), time.perf_counter()
    subprocess.run([cli(), "detach", cid], env=env, capture_output=True, check=True)
    return {"seconds": round(t1 - t0, 2), "cpu_percent": round(100 * (c1 - c0) / (t1 - t0), 2)}


def ls(env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([cli(), "ls", "--json"], env=env, capture_output=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts (proves it runs)")
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    n = 2_000 if args.quick else args.events
    seconds = 1.0 if args.quick else args.seconds
    rr = import_rerun()
    tmp = Path(tempfile.mkdtemp(prefix="snapbus-rerun-bench-"))
    runtime = tmp / "run"
    runtime.mkdir(mode=0o700)
    env = dict(os.environ, SNAPBUS_RUNTIME_DIR=str(runtime), SNAPBUS_BUS="rerun-bench")
    env["SNAPBUS_LANE_BYTES"] = str(1 << 30)
    env.pop("SNAPBUS_FILTER", None)
    os.environ.update(SNAPBUS_RUNTIME_DIR=str(runtime), SNAPBUS_BUS="rerun-bench")
    rows: dict[str, Any] = {}
    subprocess.run([cli(), "up"], env=env, capture_output=True, check=True)
    try:
        steps = 1000
        episodes = max(1, n // steps)
        demo = [cli(), "demo", "--no-echo", "--rate", "0", "--episodes", str(episodes)]
        subprocess.run(
            [*demo, "--steps", str(steps)],
            env=env,
            capture_output=True,
            check=True,
        )
        rows["demo.step 8x6 u8"] = drain(rr, tmp / "steps.rrd", "demo.step", episodes * steps)
        subprocess.run(
            [sys.executable, "-c", PRODUCER.format(n=n // 4)],
            env=env,
            capture_output=True,
            check=True,
        )
        rows["bench.depth 64x64 f32"] = drain(rr, tmp / "depth.rrd", "bench.depth", n // 4)
        rows["cpu at the demo's default rate"] = cpu_at_demo_rate(
            env, tmp / "cpu.rrd", seconds, sys.executable
        )
    finally:
        subprocess.run([cli(), "down"], env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    for name, row in rows.items():
        print(f"{name:32} {json.dumps(row)}")
    print("result " + json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

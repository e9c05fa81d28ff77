#!/usr/bin/env python3
"""`snapshot()` of a dataclass with one float32 numpy field of 4 KiB, 16 KiB, 64 KiB and 1 MiB,
each beside `np.copy` of the same array (`timeit`, the minimum of 5 repeats), printed on one
line: the figures behind BENCHMARKS.md's "Streaming copies for large arrays".

Against a running bus (`snapbus up`; `SNAPBUS_BUS` to choose it):

    python benches/python/array_rows.py [--lane-bytes N] [--tag TEXT]

`--lane-bytes` sizes this process's lane (default: snapbus's, 64 MiB). To compare two builds,
swap their `_snapbus` extension modules into one venv and run this alternately.
"""

from __future__ import annotations

import argparse
import logging
import sys
import timeit

import numpy as np
import snapbus
from compare_py import Patch  # the event of compare's numpy rows

SIZES = (4 << 10, 16 << 10, 64 << 10, 1 << 20)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lane-bytes", type=int, default=None)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    snapbus.init(lane_bytes=args.lane_bytes)
    if not snapbus.wait_for_bus(10):
        print("no bus: start one with `snapbus up`", file=sys.stderr)
        return 1
    snap = snapbus.get_telemetry("bench.py").snapshot
    out = []
    for size in SIZES:
        arr = np.random.default_rng(2).random(size // 4, dtype=np.float32)
        ev = Patch(step=1, obs=arr)
        snap(logging.INFO, ev)
        number = max(200, 10_000_000 // size)
        names = {"snap": snap, "ev": ev, "np": np, "arr": arr, "INFO": logging.INFO}
        ns_snap = min(timeit.repeat("snap(INFO, ev)", number=number, repeat=5, globals=names))
        ns_copy = min(timeit.repeat("np.copy(arr)", number=number, repeat=5, globals=names))
        s, c = ns_snap / number * 1e9, ns_copy / number * 1e9
        out.append(f"{size >> 10} KiB: {s:.0f} ns (np.copy {c:.0f} ns, {s / c:.2f}x)")
    stats = snapbus.stats()
    if stats["not_written"]:
        print(f"records not written: {stats}", file=sys.stderr)
        return 1
    print(args.tag, " | ".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

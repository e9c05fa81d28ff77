#!/usr/bin/env python3
"""What a Python consumer pays per event, in three steps, printed on one line: iterating a
subscription and reading a header field (`ev.seq`), then also decoding the payload
(`ev.payload.seq`), then also converting it into the user's dataclass (`ev.as_(Small).seq`).
Each step reads `--events` 64 B-class events (compare_py.py's 5-field `Small`) that this
process wrote into its own lane just before, so the producer never races the consumer: the
figures behind BENCHMARKS.md's "The binding's own costs".

Against a running bus (`snapbus up`; `SNAPBUS_BUS` to choose it):

    python benches/python/consumer_rows.py [--events N] [--lane-bytes N] [--tag TEXT]

The lane must hold the events (about 120 bytes each; at most one per 200 bytes of the lane is
accepted: 300 000 of the default 64 MiB lane).
To compare two builds, swap their `_snapbus` extension modules into one venv and run this
alternately.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Callable

import snapbus
from compare_py import Small  # the 64 B-class event of compare's Python pair


def header(ev: snapbus.Event) -> int:
    return ev.seq


def payload(ev: snapbus.Event) -> int:
    seq: int = ev.payload.seq
    return seq


def as_small(ev: snapbus.Event) -> int:
    small: Small = ev.as_(Small)
    return small.seq


def per_event_ns(events: int, read: Callable[[snapbus.Event], int]) -> float:
    """Writes `events` events, then reads them back through `read`; ns per event read."""
    snap = snapbus.get_telemetry("bench.py.consumer").snapshot
    with snapbus.subscribe(Small.schema_id, start="latest") as sub:
        for i in range(events):
            snap(logging.INFO, Small(seq=i, t=0.0, x=1.5, y=-2.5, tag="lm0"))
        n = 0
        start = time.perf_counter()
        for ev in sub:
            read(ev)
            n += 1
            if n == events:
                break
        took = time.perf_counter() - start
        if sub.lost:
            raise RuntimeError(f"{sub.lost} of {events} events lost: a larger lane?")
    return took / n * 1e9


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--lane-bytes", type=int, default=64 << 20)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    # A record of `Small` takes about 120 bytes of the ring; the events must all stay in it
    # (a subscription waits for the next event, so a lost one would never be made up).
    if args.events < 1 or args.events * 200 > args.lane_bytes:
        print(f"--events must be 1 to {args.lane_bytes // 200} for this lane", file=sys.stderr)
        return 2
    snapbus.init(lane_bytes=args.lane_bytes)
    if not snapbus.wait_for_bus(10):
        print("no bus: start one with `snapbus up`", file=sys.stderr)
        return 1
    rows = [("ev.seq", header), ("ev.payload.seq", payload), ("ev.as_(Small).seq", as_small)]
    out = [f"{name}: {per_event_ns(args.events, read):.0f} ns/event" for name, read in rows]
    print(args.tag, " | ".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

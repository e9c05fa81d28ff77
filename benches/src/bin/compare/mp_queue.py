#!/usr/bin/env python3
"""The Python peer of `compare`: a `multiprocessing.Queue` carrying pickled dataclass events.

A producer process (pinned to --producer-cpu) puts `Event`s into a `multiprocessing.Queue`
(maxsize 1024); this process, the consumer (pinned to --consumer-cpu), gets them, checks each
one as the Rust consumers do (`Tally::on_message` in common.rs) and prints one line,
`result {json}`, with the fields of `ConsumerReport`. Standard library only.

Every payload is `size` bytes laid out as in common.rs: the sequence number (u64 LE) at 0, the
send time (CLOCK_MONOTONIC ns, u64 LE; 0 in throughput runs) at 8, and the sequence number
again in the last 8 bytes (sizes >= 24). The end of the run is an event whose sequence number
is 2**64 - 1.

Bad arguments: a message on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import resource
import signal
import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

END_SEQ = (1 << 64) - 1
MASK64 = (1 << 64) - 1
HEADER_LEN = 16
QUEUE_MAXSIZE = 1024
# Latency samples discarded at the start of a run, as for every peer (WARMUP_FRACTION).
WARMUP_FRACTION = 0.05
# Throughput runs read the clock once per this many events, as `run_producer` does.
BATCH = 64
# How long the consumer waits for the end event once the producer has exited.
GRACE_SECS = 10.0

HEADER = struct.Struct("<QQ")
WORD = struct.Struct("<Q")


@dataclass
class Event:
    seq: int
    t_send_nanos: int
    payload: bytes


def pin(cpu: Optional[int]) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def die_with_parent(parent_pid: int) -> None:
    """Asks Linux to kill this process when the consumer dies (e.g. killed by the harness's
    watchdog), so that no producer outlives a run."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


def producer(
    q: mp.queues.Queue[Event], ready: Any, args: argparse.Namespace, parent_pid: int
) -> None:
    die_with_parent(parent_pid)
    pin(args.producer_cpu)
    size = args.size
    buf = unstamped(size)
    trailer_at = size - 8 if size >= 24 else None
    put = q.put
    now_ns = time.monotonic_ns

    def make(seq: int, t: int) -> Event:
        HEADER.pack_into(buf, 0, seq, t)
        if trailer_at is not None:
            WORD.pack_into(buf, trailer_at, seq)
        return Event(seq, t, bytes(buf))

    ready.wait()
    sent = 0
    if args.mode == "throughput":
        deadline = now_ns() + int(args.secs * 1e9)
        while True:
            for _ in range(BATCH):
                put(make(sent, 0))
                sent += 1
            if now_ns() >= deadline:
                break
    else:
        interval = args.interval_nanos
        yield_cpu = os.sched_yield
        nxt = now_ns() + interval
        while sent < args.count:
            now = now_ns()
            while now < nxt:
                # Busy-wait, but let the queue's feeder thread (same process, same CPU) have
                # the GIL and the CPU: it pickles and writes the previous event.
                yield_cpu()
                now = now_ns()
            put(make(sent, now))
            sent += 1
            # A transport that fell far behind does not get a burst to catch up with.
            nxt = max(nxt + interval, now)
    put(make(END_SEQ, 0))
    q.close()
    q.join_thread()


def percentile(sorted_lat: List[int], p: float) -> Optional[int]:
    if not sorted_lat:
        return None
    # Rust's f64::round: halves away from zero (Python's round() rounds halves to even).
    return sorted_lat[math.floor((len(sorted_lat) - 1) * p + 0.5)]


def cpu_nanos() -> int:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return int(total * 1e9)


def word_sum(payload: Union[bytes, bytearray]) -> int:
    """The sum (mod 2**64) of the payload's little-endian 8-byte words, the last zero-padded:
    every byte read (`--every-byte`, as `word_sum` in common.rs)."""
    whole = len(payload) // 8 * 8
    total = sum(memoryview(payload)[:whole].cast("Q")) if whole else 0
    if whole < len(payload):
        total += int.from_bytes(payload[whole:], "little")
    return total & MASK64


def unstamped(size: int) -> bytearray:
    """A message before its stamp, as `unstamped` in common.rs makes it: a byte pattern, zeros
    only where the header and the trailer go."""
    buf = bytearray(((i * 2654435761) & 0xFFFFFFFF) >> 24 | 1 for i in range(size))
    buf[: min(size, 16)] = bytes(min(size, 16))
    if size >= 24:
        buf[size - 8 :] = bytes(8)
    return buf


def expected_sum(seq: int, t_send: int, n: int, base: int) -> int:
    """What `word_sum` gives for a message as the producer sends it: `base` (the sum of the
    unstamped message, zeros where the stamp goes) plus the stamp's words (a trailer that
    straddles two words lands in their sum rotated)."""
    total = base + seq + t_send
    if n >= 24:
        r = 8 * (n % 8)
        total += ((seq << r) | (seq >> (64 - r))) & MASK64 if r else seq
    return total & MASK64


def consume(q: mp.queues.Queue[Event], args: argparse.Namespace) -> Dict[str, Any]:
    """Gets events until the end event, counting as `Tally::on_message` does."""
    size = args.size
    latency = args.mode == "latency"
    trailer_at = size - 8 if size >= 24 else None
    every_byte = args.every_byte
    base = word_sum(unstamped(size)) if every_byte else 0
    get = q.get
    now_ns = time.monotonic_ns
    unpack_header = HEADER.unpack_from
    unpack_word = WORD.unpack_from
    next_seq = 0
    delivered = lost = bad = 0
    first: Optional[int] = None
    lat: List[int] = []
    while True:
        ev = get()
        try:
            seq = ev.seq
            t_send = ev.t_send_nanos
            payload = ev.payload
        except AttributeError:
            bad += 1
            continue
        if seq == END_SEQ:
            end = now_ns()
            break
        n = len(payload) if isinstance(payload, bytes) else -1
        if (
            n != size
            or seq < next_seq
            or unpack_header(payload, 0) != (seq, t_send)
            or (trailer_at is not None and unpack_word(payload, trailer_at)[0] != seq)
            or (every_byte and word_sum(payload) != expected_sum(seq, t_send, n, base))
        ):
            bad += 1
            continue
        lost += seq - next_seq
        next_seq = seq + 1
        delivered += 1
        if latency:
            now = now_ns()
            if first is None:
                first = now
            lat.append(max(now - t_send, 0))
        elif first is None:
            first = now_ns()
    return {
        "delivered": delivered,
        "lost": lost,
        "bad": bad,
        "window_nanos": max(end - (end if first is None else first), 0),
        "lat": lat,
    }


def parse_args(argv: List[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="multiprocessing.Queue peer of snapbus's `compare` harness"
    )
    ap.add_argument("--size", type=int, required=True, help="bytes per payload (>= 16)")
    ap.add_argument("--mode", choices=("throughput", "latency"), required=True)
    ap.add_argument("--secs", type=float, default=1.0, help="throughput: seconds to send")
    ap.add_argument("--count", type=int, default=10_000, help="latency: events")
    ap.add_argument("--interval-nanos", type=int, default=50_000, help="latency: ns between events")
    ap.add_argument("--producer-cpu", type=int, default=None)
    ap.add_argument("--consumer-cpu", type=int, default=None)
    ap.add_argument(
        "--every-byte", action="store_true", help="the consumer sums every byte of every payload"
    )
    args = ap.parse_args(argv)
    if args.size < HEADER_LEN:
        ap.error(f"--size must be at least {HEADER_LEN} bytes, got {args.size}")
    if not (args.secs > 0 and math.isfinite(args.secs)):
        ap.error(f"--secs must be a positive number, got {args.secs}")
    if args.count < 0:
        ap.error(f"--count must not be negative, got {args.count}")
    if args.interval_nanos < 0:
        ap.error(f"--interval-nanos must not be negative, got {args.interval_nanos}")
    allowed = os.sched_getaffinity(0)
    for flag, cpu in (
        ("--producer-cpu", args.producer_cpu),
        ("--consumer-cpu", args.consumer_cpu),
    ):
        if cpu is not None and cpu not in allowed:
            ap.error(f"{flag} {cpu} is not a CPU this process may use: {sorted(allowed)}")
    return args


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    # Explicitly fork (the default on Linux up to 3.13): the child starts at once, with this
    # module's `Event` already defined.
    ctx = mp.get_context("fork")
    q = ctx.Queue(maxsize=QUEUE_MAXSIZE)
    ready = ctx.Event()
    proc = ctx.Process(
        target=producer, args=(q, ready, args, os.getpid()), name="producer", daemon=True
    )
    proc.start()
    pin(args.consumer_cpu)

    # If the producer dies before the end event arrives, say so instead of blocking in `get`
    # until the harness's watchdog fires.
    got_end = threading.Event()

    def watch() -> None:
        mp.connection.wait([proc.sentinel])
        if not got_end.wait(GRACE_SECS):
            print(
                f"mp_queue.py: the producer exited (status {proc.exitcode}) "
                "without the end event arriving",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)

    threading.Thread(target=watch, daemon=True).start()

    ready.set()
    tally = consume(q, args)
    got_end.set()
    proc.join()
    if proc.exitcode != 0:
        print(f"mp_queue.py: the producer exited with status {proc.exitcode}", file=sys.stderr)
        return 1

    lat = tally.pop("lat")
    skip = int(len(lat) * WARMUP_FRACTION)
    lat = sorted(lat[skip:])
    report = {
        "delivered": tally["delivered"],
        "lost": tally["lost"],
        "bad": tally["bad"],
        "window_nanos": tally["window_nanos"],
        "p50_nanos": percentile(lat, 0.50),
        "p99_nanos": percentile(lat, 0.99),
        "samples": len(lat),
        "cpu_nanos": cpu_nanos(),
    }
    print("result " + json.dumps(report, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

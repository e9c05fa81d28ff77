#!/usr/bin/env python3
"""The Python rows of `compare` (issue 17, "Speed"): snapbus from Python, side by side in one run
with what Python researchers use today.

Rows:

- `snapshot()` of an event of 5 dynamic fields (int, float, bool, str, a small dict): a
  pydantic model's extras and a `dict` event (calls/s).
- `snapshot()` of a 5-field dataclass with its level disabled (ns per call; by SNAPBUS_FILTER,
  and by the level of its `telemetry.*` logger), enabled (calls/s),
  with a 4 KiB numpy field (calls/s), and with a 1 MiB numpy field against `numpy.copy` of the
  same array (the ratio; one such record is read back by a subscriber, so it did go through);
  the two numpy rows again from a process whose lane fits the last-level cache (8 MiB: less
  history, the copies stay in the cache; a 16 MiB ring only partly does on this machine).
- tbp.monty's 5-extra-field `TelemetryEvent` through `SnapbusHandler` against monty's own
  `JsonFormatter` + `StreamHandler` to /dev/null: `logger.info(event)` and `handler.handle` of
  one record, and the ratios (logging_rows.py; needs tbp-monty).
- Python producer -> Python consumer in separate processes, 64 B-class events, messages
  delivered per second at the consumer (`for ev in sub: ev.payload`), against the same events
  pickled through a `multiprocessing.Queue` and through a `logging` `QueueHandler` ->
  `QueueListener` pipeline (the seed's prototype); the ratios.

Timings are wall-clock medians over repetitions (`timeit`, loop overhead included). The
process-pair runs pin the producer to the first CPU this process may use and the consumer to the
second, as `compare` does.

Run by `compare --python PYTHON` (benches/src/bin/compare), which gives it a bus
(`SNAPBUS_RUNTIME_DIR`, `SNAPBUS_BUS`) and reads its last line, `result {json}`; or alone,
against a running bus: `python benches/python/compare_py.py [--quick]`. Needs numpy and
snapbus (`pip install ./python`). Exit status 1 if a row failed (its error is in the row).
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time
import timeit
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np
import snapbus
from numpy.typing import NDArray

INFO = logging.INFO
DEBUG = logging.DEBUG
PRODUCER = 0  # the first CPU this process may run on
CONSUMER = 1  # the second (the first again if there is only one)
END = -1


@dataclass
class Step:
    """The 5-field event of the research probe (python.md §4)."""

    schema_id: ClassVar[str] = "bench.py.step"
    schema_version: ClassVar[int] = 1
    episode: int
    timestamp: float
    step: int
    lm_id: int
    mode: str


@dataclass
class Patch:
    """A step and a float32 numpy array: the 4 KiB numpy row's event (array_rows.py's too)."""

    schema_id: ClassVar[str] = "bench.py.patch4k"
    schema_version: ClassVar[int] = 1
    step: int
    obs: NDArray[np.float32]


class Patch1m(Patch):
    """The same fields under a schema of their own: the 1 MiB records, one read back."""

    schema_id: ClassVar[str] = "bench.py.patch1m"


@dataclass
class Small:
    """A 64 B-class event: what crosses the process pair (about 48 bytes of payload)."""

    schema_id: ClassVar[str] = "bench.py.small"
    schema_version: ClassVar[int] = 1
    seq: int
    t: float
    x: float
    y: float
    tag: str


ALLOWED_CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def cpu_of(which: int) -> int | None:
    """The producer's or the consumer's CPU: the first or the second this process may run on
    as first seen, before pinning (a container or `taskset` may leave CPU 0 out)."""
    return ALLOWED_CPUS[which % len(ALLOWED_CPUS)] if ALLOWED_CPUS else None


def pin(which: int) -> None:
    """Pins this process to the producer's (`PRODUCER`) or the consumer's (`CONSUMER`) CPU."""
    pin_to(cpu_of(which))


def pin_to(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def per_call_ns(stmt: str, names: dict[str, Any], number: int, repeat: int) -> float:
    """Median wall time per execution of the statement `stmt` (as a user writes it, over the
    variables `names`), in ns (timeit: GC off, its loop's overhead included)."""
    times = timeit.repeat(stmt, number=number, repeat=repeat, globals=names)
    return statistics.median(times) / number * 1e9


def row(
    name: str,
    value: float | None,
    unit: str,
    text: str,
    target: str,
    ok: bool | None,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "row": name,
        "value": value,
        "unit": unit,
        "text": text,
        "target": target,
        "verdict": "-" if ok is None else ("yes" if ok else "no"),
        "error": error,
    }


def rate_text(per_s: float) -> str:
    if per_s >= 1e6:
        return f"{per_s / 1e6:.2f} M/s"
    return f"{per_s / 1e3:.1f} k/s"


# ---------------------------------------------------------------------------------------------
# In-process: snapshot() costs.
# ---------------------------------------------------------------------------------------------


def snapshot_rows(quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    number, repeat = (20_000, 3) if quick else (1_000_000, 7)
    # Connected first: a snapshot before this process has its lane is counted as `no_bus`
    # and costs less than one written (its timing would flatter, and a record read back
    # would never come).
    if not snapbus.wait_for_bus(30.0):
        raise RuntimeError("no bus within 30 s")
    telemetry = snapbus.get_telemetry("bench.py")
    snap = telemetry.snapshot
    ev = Step(episode=1, timestamp=0.5, step=7, lm_id=2, mode="explore")
    snap(INFO, ev)  # registers the schema, compiles the plan

    ns = per_call_ns("snap(DEBUG, ev)", {**globals(), **locals()}, number, repeat)
    rows.append(
        row(
            "snapshot(), 5-field dataclass, level disabled",
            ns,
            "ns/call",
            f"{ns:.1f} ns/call",
            "≤ 40 ns",
            ns <= 40,
        )
    )
    # The same call with INFO off by the level of its `telemetry.*` logger (rule 2).
    logging.getLogger("telemetry.bench.py.off").setLevel(logging.WARNING)
    off = snapbus.get_telemetry("bench.py.off").snapshot
    off(INFO, ev)  # the cached logging level computed
    ns = per_call_ns("off(INFO, ev)", {**globals(), **locals()}, number, repeat)
    rows.append(
        row(
            "snapshot(), disabled by the logger's level",
            ns,
            "ns/call",
            f"{ns:.1f} ns/call",
            "≤ 50 ns",
            ns <= 50,
        )
    )
    ns = per_call_ns("snap(INFO, ev)", {**globals(), **locals()}, number, repeat)
    rows.append(
        row(
            "snapshot(), 5-field dataclass, enabled",
            1e9 / ns,
            "calls/s",
            f"{rate_text(1e9 / ns)} ({ns:.0f} ns/call)",
            "≤ 250 ns (≥ 4 M/s)",
            ns <= 250,
        )
    )

    rows += dynamic_rows(number, repeat, telemetry)
    rows += array_rows(quick, telemetry)
    stats = snapbus.stats()
    if stats["not_written"]:
        raise RuntimeError(f"snapshots timed were not all written: {stats}")
    return rows


def handler_rows(quick: bool) -> list[dict[str, Any]]:
    """tbp.monty's 5-extra-field event through `SnapbusHandler` and through monty's own
    `JsonFormatter` + `StreamHandler` to /dev/null: `logger.info(event)` and, on one record,
    `handler.handle(record)` (logging_rows.py)."""
    from logging_rows import handler_costs

    c = handler_costs(quick)
    rows: list[dict[str, Any]] = []
    for how, key in [("logger.info(event)", "info"), ("handler.handle(record)", "handle")]:
        ours, json_ns = c[f"snapbus_{key}"], c[f"json_{key}"]
        for who, ns in [("SnapbusHandler", ours), ("monty's JsonFormatter → /dev/null", json_ns)]:
            rows.append(
                row(f"{who}, monty event, {how}", ns, "ns/call", f"{ns:.0f} ns/call", "", None)
            )
        rows.append(
            row(
                f"SnapbusHandler ÷ monty's JSON lines, {how}",
                ours / json_ns,
                "x",
                f"{ours / json_ns:.2f}x",
                "≤ 0.33x",
                ours / json_ns <= 1 / 3,
            )
        )
    return rows


def dynamic_rows(number: int, repeat: int, telemetry: Any) -> list[dict[str, Any]]:
    """`snapshot()` of an event whose 5 fields are dynamic (an int, a float, a bool, a str and
    a 2-entry dict, as monty's `TelemetryEvent` extras): a pydantic model (its extras, after
    its declared `kind`), and the same fields as a `dict` event."""
    rows: list[dict[str, Any]] = []
    snap = telemetry.snapshot
    fields = {"matching_steps": 3, "ratio": 0.5, "done": False, "name": "ep", "model": MODEL}
    try:
        from pydantic import BaseModel, ConfigDict
    except ImportError:
        rows.append(
            row(
                "snapshot(), dynamic 5-field event (pydantic extras)",
                None,
                "",
                "failed",
                "",
                None,
                "pydantic is not installed",
            )
        )
    else:

        class TelemetryEvent(BaseModel):  # monty's shape: `kind`, extras allowed
            model_config = ConfigDict(extra="allow")
            kind: str = ""

        ev = TelemetryEvent(kind="bench.py.dynamic", **fields)
        snap(INFO, ev)
        ns = per_call_ns("snap(INFO, ev)", {"snap": snap, "ev": ev, "INFO": INFO}, number, repeat)
        rows.append(
            row(
                "snapshot(), dynamic 5-field event (pydantic extras)",
                1e9 / ns,
                "calls/s",
                f"{rate_text(1e9 / ns)} ({ns:.0f} ns/call)",
                "≥ 1 M/s",
                1e9 / ns >= 1e6,
            )
        )
    ev_dict = {"kind": "bench.py.dynamic_dict", **fields}
    snap(INFO, ev_dict)
    ns = per_call_ns("snap(INFO, ev)", {"snap": snap, "ev": ev_dict, "INFO": INFO}, number, repeat)
    rows.append(
        row(
            "snapshot(), dynamic 5-field event (dict)",
            1e9 / ns,
            "calls/s",
            f"{rate_text(1e9 / ns)} ({ns:.0f} ns/call)",
            "≥ 1 M/s",
            1e9 / ns >= 1e6,
        )
    )
    return rows


# The dict value of the dynamic rows.
MODEL = {"is_done": True, "steps": 7}


def array_rows(quick: bool, telemetry: Any, lane: str = "") -> list[dict[str, Any]]:
    """The numpy rows (4 KiB and 1 MiB fields) through this process's lane; `lane` names it in
    the row when it is not the default one."""
    rows: list[dict[str, Any]] = []
    number, repeat = (20_000, 3) if quick else (1_000_000, 7)
    snap = telemetry.snapshot
    p4 = Patch(step=1, obs=np.random.default_rng(1).random(1024, dtype=np.float32))
    snap(INFO, p4)
    ns = per_call_ns("snap(INFO, p4)", {**globals(), **locals()}, number // 2, repeat)
    rows.append(
        row(
            f"snapshot() with a 4 KiB numpy field{lane}",
            1e9 / ns,
            "calls/s",
            f"{rate_text(1e9 / ns)} ({ns:.0f} ns/call)",
            "≥ 2 M/s",
            1e9 / ns >= 2e6,
        )
    )

    big = np.random.default_rng(2).random(256 * 1024, dtype=np.float32)  # 1 MiB
    p1 = Patch1m(step=1, obs=big)
    with snapbus.subscribe(Patch1m.schema_id, start="latest") as sub:
        snap(INFO, p1)
        n1 = 50 if quick else 2_000
        ns_snap = per_call_ns("snap(INFO, p1)", {**globals(), **locals()}, n1, repeat)
        ns_copy = per_call_ns("np.copy(big)", {"np": np, "big": big}, n1, repeat)
        # One of them is read back whole: the records did go through the lane.
        got = sub.get(timeout=10.0)
        obs = getattr(got.payload, "obs", None)
        if obs is None and isinstance(got.payload, dict):
            obs = got.payload.get("obs")
        if obs is None or len(obs) != len(big):
            raise RuntimeError(f"the 1 MiB record read back is not whole: {got.payload!r:.200}")
    ratio = ns_snap / ns_copy
    rows.append(
        row(
            f"snapshot() with a 1 MiB numpy field ÷ numpy.copy of it{lane}",
            ratio,
            "x",
            f"{ratio:.2f}x ({ns_snap / 1e3:.1f} µs vs {ns_copy / 1e3:.1f} µs)",
            "≤ 1.5x",
            ratio <= 1.5,
        )
    )
    return rows


CACHE_LANE_BYTES = 8 << 20


def cache_lane_rows(quick: bool) -> list[dict[str, Any]]:
    """The numpy rows again in a child process whose lane fits the last-level cache (8 MiB;
    the lane size is fixed per process): the trade-off of a smaller ring, less history."""
    out = subprocess.run(
        [sys.executable, __file__, "_arrays", "--lane-bytes", str(CACHE_LANE_BYTES)]
        + (["--quick"] if quick else []),
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = out.stdout.strip().splitlines()[-1:] or [""]
    if out.returncode != 0 or not last[0].startswith("rows "):
        raise RuntimeError(f"the cache-lane child failed ({out.returncode}): {out.stderr[-500:]}")
    rows: list[dict[str, Any]] = json.loads(last[0][len("rows ") :])
    return rows


# ---------------------------------------------------------------------------------------------
# Across processes: snapbus, multiprocessing.Queue, QueueHandler/QueueListener.
# ---------------------------------------------------------------------------------------------


def snapbus_producer(secs: float, cpu: int | None) -> None:
    """The producer process of the snapbus pair: emits `Small` events for `secs`, then END."""
    pin_to(cpu)
    if not snapbus.wait_for_bus(10.0):
        sys.exit("the producer found no bus")
    snap = snapbus.get_telemetry("bench.py.pair").snapshot
    seq = 0
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        for _ in range(256):
            snap(INFO, Small(seq=seq, t=0.0, x=1.5, y=-2.5, tag="lm0"))
            seq += 1
    snap(INFO, Small(seq=END, t=0.0, x=0.0, y=0.0, tag="end"))
    snapbus.shutdown()


def snapbus_pair(secs: float) -> dict[str, float]:
    pin(CONSUMER)
    with snapbus.subscribe(Small.schema_id, start="latest") as sub:
        cpu = cpu_of(PRODUCER)  # passed on: this process's own set is narrowed by now
        args = ["_producer", "--secs", str(secs)] + ([] if cpu is None else ["--cpu", str(cpu)])
        producer = subprocess.Popen([sys.executable, __file__, *args])
        try:
            n = 0
            first = last = 0.0
            for ev in sub:  # the idiomatic loop (a wait ends at a record or at close)
                # The decoded record's field, as the queue's consumer reads `ev.seq`.
                if ev.payload.seq == END:
                    break
                last = time.perf_counter()
                if n == 0:
                    first = last
                n += 1
            if producer.wait(timeout=30.0) != 0:
                raise RuntimeError(f"the producer exited {producer.returncode}")
            lost = int(sub.lost)
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.wait()
    if n < 2:
        raise RuntimeError(f"only {n} events delivered")
    return {"rate": (n - 1) / (last - first), "delivered": float(n), "lost": float(lost)}


def mp_queue_producer(q: Any, secs: float) -> None:
    pin(PRODUCER)
    put = q.put
    seq = 0
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        for _ in range(256):
            put(Small(seq=seq, t=0.0, x=1.5, y=-2.5, tag="lm0"))
            seq += 1
    put(Small(seq=END, t=0.0, x=0.0, y=0.0, tag="end"))


def mp_queue_pair(secs: float) -> dict[str, float]:
    """multiprocessing.Queue (maxsize 1024, fork), pickled dataclasses, as the existing peer."""
    ctx = mp.get_context("fork")
    q = ctx.Queue(maxsize=1024)
    p = ctx.Process(target=mp_queue_producer, args=(q, secs), daemon=True)
    pin(CONSUMER)
    p.start()
    try:
        get = q.get
        n = 0
        first = last = 0.0
        while True:
            ev = get(timeout=secs + 30.0)
            if ev.seq == END:
                break
            last = time.perf_counter()
            if n == 0:
                first = last
            n += 1
        p.join(timeout=30.0)
    finally:
        if p.is_alive():
            p.kill()
            p.join()
    if n < 2:
        raise RuntimeError(f"only {n} events delivered")
    return {"rate": (n - 1) / (last - first), "delivered": float(n), "lost": 0.0}


def queue_handler_producer(q: Any, secs: float) -> None:
    pin(PRODUCER)
    logger = logging.getLogger("bench.py.qh")
    logger.propagate = False
    logger.setLevel(INFO)
    logger.addHandler(logging.handlers.QueueHandler(q))
    seq = 0
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        for _ in range(256):
            logger.info(
                "snapshot", extra={"event": Small(seq=seq, t=0.0, x=1.5, y=-2.5, tag="lm0")}
            )
            seq += 1
    logger.info("snapshot", extra={"event": Small(seq=END, t=0.0, x=0.0, y=0.0, tag="end")})


class _Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.first = self.last = 0.0
        self.done = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.event.seq == END:  # type: ignore[attr-defined]
            self.done.set()
            return
        self.last = time.perf_counter()
        if self.n == 0:
            self.first = self.last
        self.n += 1


def queue_handler_pair(secs: float) -> dict[str, float]:
    """The seed's prototype: logging QueueHandler -> multiprocessing.Queue -> QueueListener."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    handler = _Counting()
    listener = logging.handlers.QueueListener(q, handler)
    pin(CONSUMER)
    p = ctx.Process(target=queue_handler_producer, args=(q, secs), daemon=True)
    p.start()  # before the listener's thread: no fork with threads running
    listener.start()
    try:
        if not handler.done.wait(timeout=secs + 60.0):
            raise RuntimeError("the listener never saw the end record")
        p.join(timeout=30.0)
    finally:
        listener.stop()
        if p.is_alive():
            p.kill()
            p.join()
    if handler.n < 2:
        raise RuntimeError(f"only {handler.n} events delivered")
    return {
        "rate": (handler.n - 1) / (handler.last - handler.first),
        "delivered": float(handler.n),
        "lost": 0.0,
    }


def pair_rows(quick: bool, reps: int) -> list[dict[str, Any]]:
    secs = 0.3 if quick else 2.0
    runs: dict[str, Callable[[float], dict[str, float]]] = {
        "mp.Queue": mp_queue_pair,
        "QueueHandler": queue_handler_pair,
        "snapbus": snapbus_pair,
    }
    got: dict[str, list[dict[str, float]]] = {k: [] for k in runs}
    errors: dict[str, str] = {}
    for rep in range(reps):
        names = list(runs)
        names = names[rep % len(names) :] + names[: rep % len(names)]  # rotate, as compare does
        for name in names:
            if name in errors:
                continue
            try:
                got[name].append(runs[name](secs))
            except Exception as e:  # a failed run is a row with its error
                errors[name] = f"{type(e).__name__}: {e}"
    rates = {k: statistics.median(r["rate"] for r in v) for k, v in got.items() if v}
    rows: list[dict[str, Any]] = []
    labels = {
        "mp.Queue": "multiprocessing.Queue, pickled dataclasses (producer process → consumer)",
        "QueueHandler": "logging QueueHandler → mp.Queue → QueueListener (the seed's prototype)",
        "snapbus": "snapbus, Python producer → Python consumer (`ev.payload` decoded)",
    }
    for name in runs:
        if name in errors:
            rows.append(row(labels[name], None, "ev/s", "failed", "", None, errors[name]))
            continue
        lost = statistics.median(r["lost"] for r in got[name])
        extra = f", {lost:.0f} lost" if lost else ""
        rows.append(
            row(
                labels[name],
                rates[name],
                "ev/s",
                f"{rate_text(rates[name])} delivered{extra}",
                "",
                None,
            )
        )
    if "snapbus" in rates:
        for peer, label in [
            ("mp.Queue", "multiprocessing.Queue"),
            ("QueueHandler", "QueueHandler/QueueListener"),
        ]:
            if peer in rates:
                ratio = rates["snapbus"] / rates[peer]
                target = "≥ 12x" if peer == "mp.Queue" else ""
                ok = ratio >= 12 if peer == "mp.Queue" else None
                rows.append(
                    row(
                        f"snapbus Python → Python ÷ {label}",
                        ratio,
                        "x",
                        f"{ratio:.1f}x",
                        target,
                        ok,
                    )
                )
    return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["_arrays"]:
        a = argparse.ArgumentParser()
        a.add_argument("--lane-bytes", type=int, required=True)
        a.add_argument("--quick", action="store_true")
        ca = a.parse_args(argv[1:])
        snapbus.init(lane_bytes=ca.lane_bytes)
        if not snapbus.wait_for_bus(30):
            raise SystemExit("no bus")
        lane = f", {ca.lane_bytes >> 20} MiB lane (fits the cache)"
        print("rows " + json.dumps(array_rows(ca.quick, snapbus.get_telemetry("bench.py"), lane)))
        return 0
    if argv[:1] == ["_producer"]:
        a = argparse.ArgumentParser()
        a.add_argument("--secs", type=float, required=True)
        a.add_argument("--cpu", type=int, default=None)
        pa = a.parse_args(argv[1:])
        snapbus_producer(pa.secs, pa.cpu)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="few iterations: proves every row runs; not for comparing",
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=None,
        help="repetitions of the process-pair runs (default 3; 1 with --quick)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=["recording"],
        help="only these groups of rows (repeatable; default all): `recording` is "
        "recording_rows.py's to_pandas rows",
    )
    args = parser.parse_args(argv)
    reps = args.reps or (1 if args.quick else 3)
    rows: list[dict[str, Any]] = []
    if not args.only:
        rows += all_rows(args.quick, reps)
    try:
        from recording_rows import recording_rows

        rows += recording_rows(args.quick)
    except Exception as e:
        rows.append(
            row("to_pandas() rows", None, "", "failed", "", None, f"{type(e).__name__}: {e}")
        )
    for r in rows:
        print(f"{r['row']}: {r['error'] or r['text']}", file=sys.stderr)
    info = {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "snapbus": getattr(snapbus, "__version__", "?"),
        "quick": args.quick,
        "reps": reps,
    }
    print("result " + json.dumps({"info": info, "rows": rows}))
    return 1 if any(r["error"] for r in rows) else 0


def all_rows(quick: bool, reps: int) -> list[dict[str, Any]]:
    """Every row but the `--only` groups'."""
    rows: list[dict[str, Any]] = []
    # The process pairs first: they fork, and this process has no other threads yet.
    rows += pair_rows(quick, reps)
    try:
        rows += snapshot_rows(quick)
    except Exception as e:
        rows.append(
            row("snapshot() rows", None, "", "failed", "", None, f"{type(e).__name__}: {e}")
        )
    try:
        rows += handler_rows(quick)
    except Exception as e:
        rows.append(
            row("SnapbusHandler rows", None, "", "failed", "", None, f"{type(e).__name__}: {e}")
        )
    try:
        rows += cache_lane_rows(quick)
    except Exception as e:
        rows.append(
            row("cache-lane rows", None, "", "failed", "", None, f"{type(e).__name__}: {e}")
        )
    return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

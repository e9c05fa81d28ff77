"""Subscriptions: `snapbus.subscribe(...)` and the `Event`s it yields.

    with snapbus.subscribe("demo.*", start="oldest") as sub:
        for ev in sub:                     # blocks; Ctrl-C interrupts
            ev.schema.id, ev.producer.name, ev.level, ev.seq, ev.t_nanos
            ev.payload                     # decoded on first access, cached
        ev = sub.get(timeout=1.0)          # queue.Queue-style; raises queue.Empty
        batch = sub.get_batch(1024, timeout=0.1)
        sub.lost, sub.delivered            # exact counters

An `Event`'s `data` is the record's bytes, copied once out of shared memory; its `payload` is
decoded from them: structs as dataclass records (one class per schema, module
`snapbus.records`; a dict where a field name is not an identifier), enums as the variant's
name, options as None or the value, sequences as lists, maps as dicts, tensors as read-only
numpy views over `data` (memoryviews without numpy), bytes as bytes. `ev.as_(MyClass)`
decodes into your dataclass by field name.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any, Callable, Union

from ._errors import BusNotRunning
from ._snapbus import Event, Producer, Schema, Subscription

__all__ = ["BusNotRunning", "Event", "Producer", "Schema", "Subscription", "subscribe"]

_STARTS = ("latest", "oldest")

_log = logging.getLogger("snapbus")

Wait = Union[bool, float, None]


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _unix_nanos(when: datetime.datetime) -> int:
    """`when` in nanoseconds since the Unix epoch, exactly (a naive datetime is local time;
    `timestamp()` is a float, which rounds at today's dates by up to a quarter microsecond)."""
    aware = when if when.tzinfo is not None else when.astimezone()
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def subscribe(
    *globs: str,
    start: str | datetime.datetime = "latest",
    bus: str | None = None,
    kind: str = "python",
    cut: bool = False,
    until_end: bool = False,
    wait: Wait = False,
) -> Subscription:
    """Subscribes to the schemas whose ids match `globs` (none: every schema) on `bus`
    (default: $SNAPBUS_BUS, else 'default').

    `start`: "latest" (records emitted from now on), "oldest" (also the history the rings
    still hold), or a timezone-aware `datetime` (the first record at or after it still in the
    rings; a naive datetime is local time). `kind` is shown by `snapbus ls`. `cut=True` reads
    only what the rings hold now (a snapshot); with `until_end=True` the iteration ends once
    every producer has ended.
    Returns once every existing producer's lane is mapped: nothing emitted after it returns is
    missed. Raises `BusNotRunning` (a ConnectionError) when no bus runs, `ValueError` for an
    unknown `start` or a bad glob.
    `wait`: when no bus runs yet, wait for one to be started (`True`: for as long as it takes;
    a number: for at most that many seconds, then `BusNotRunning`), saying so once through the
    `snapbus` logger.
    """
    return _open(globs, start=start, bus=bus, kind=kind, cut=cut, until_end=until_end, wait=wait)


def _open(globs: tuple[str, ...], *, wait: Wait = False, **opts: Any) -> Subscription:
    """`subscribe` (`opts`: its options, and `snapbus.run`'s `flush_every`, `drain_on_stop`,
    `batch`), waiting for a bus as `wait` says."""
    limit = _wait_limit(wait)
    return _waiting(lambda: _connect(globs, **opts), limit)


def _wait_limit(wait: Wait) -> float:
    """`wait` as seconds to wait for a bus (`inf`: no limit; 0: none)."""
    if wait is None or wait is False:
        return 0.0
    if wait is True:
        return float("inf")
    if isinstance(wait, (int, float)) and wait >= 0:
        return float(wait)
    raise ValueError(f"wait is True, False or a number of seconds >= 0, not {wait!r}")


def _waiting(connect: Callable[[], Subscription], limit: float) -> Subscription:
    """`connect()`; while it raises `BusNotRunning`, again until `limit` seconds have passed
    (said once through the `snapbus` logger), then the last `BusNotRunning`."""
    t0 = time.monotonic()
    said = False
    while True:
        try:
            return connect()
        except BusNotRunning as e:
            if time.monotonic() - t0 >= limit:
                if said:
                    raise BusNotRunning(f"{e} (no bus appeared within wait={limit:g} s)") from None
                raise
            if not said:
                said = True
                how = "until it is" if limit == float("inf") else f"for up to {limit:g} s"
                _log.warning("snapbus: waiting for the bus (%s): %s", how, e)
        time.sleep(0.05)


def _connect(
    globs: tuple[str, ...],
    *,
    start: str | datetime.datetime,
    bus: str | None,
    kind: str,
    cut: bool,
    until_end: bool,
    **run: Any,
) -> Subscription:
    """One attempt of `_open`."""
    for g in globs:
        if not isinstance(g, str):
            raise TypeError(f"globs are strings, not {type(g).__name__}: {g!r}")
    if isinstance(start, datetime.datetime):
        nanos = _unix_nanos(start)
        if nanos < 0:
            raise ValueError(f"start {start!r} is before 1970")
        return Subscription(list(globs), "time", bus, kind, cut, until_end, nanos, **run)
    if start not in _STARTS:
        raise ValueError(
            f"unknown start {start!r}: use 'latest' (only records from now on), 'oldest' "
            "(the history the rings still hold) or a datetime"
        )
    return Subscription(list(globs), start, bus, kind, cut, until_end, **run)

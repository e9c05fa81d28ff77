"""Python consumers: the `Consumer` base class and `run`, mirroring the Rust runtime
(consumers/src/runtime.rs).

    class Plot(snapbus.Consumer):
        def on_event(self, ev):
            self.points.append(ev.payload.reward)
        def flush(self):
            redraw(self.points)

    snapbus.run(Plot(), "demo.step", start="oldest", flush_every=0.1)

Hooks run on the caller's thread. An exception in a hook flushes, stops the run and is
re-raised, never swallowed. `on_event` returning `snapbus.STOP` ends the run.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from ._snapbus import Event, Producer, Schema
from .subscription import subscribe

__all__ = ["STOP", "Consumer", "ProducerChange", "RunSummary", "run"]


class _Stop:
    """The value a hook returns to end the run."""

    _instance: _Stop | None = None

    def __new__(cls) -> _Stop:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "snapbus.STOP"


STOP = _Stop()


class ProducerChange:
    """A producer's lane joining, its producer dying, or its lane read to the end."""

    __slots__ = ("kind", "producer")

    def __init__(self, kind: str, producer: Producer) -> None:
        self.kind = kind
        """"joined", "died" or "ended"."""
        self.producer = producer

    def __repr__(self) -> str:
        return f"ProducerChange({self.kind!r}, {self.producer!r})"


class RunSummary:
    """What `run` saw, and why it returned ("consumer", "all_ended")."""

    __slots__ = ("delivered", "lost", "reason")

    def __init__(self, delivered: int, lost: int, reason: str) -> None:
        self.delivered = delivered
        self.lost = lost
        self.reason = reason

    def __repr__(self) -> str:
        return f"RunSummary(delivered={self.delivered}, lost={self.lost}, reason={self.reason!r})"


class Consumer:
    """A consumer: override the hooks you need (all optional). `kind` is shown by `snapbus ls`
    (default: the class's name)."""

    kind: str | None = None

    def on_event(self, event: Event) -> Any:
        """A record of a subscribed schema. Return `snapbus.STOP` to end the run."""

    def on_lag(self, producer: Producer, lost: int) -> Any:
        """`lost` records of `producer` were overwritten before they could be read."""

    def on_schema(self, schema: Schema) -> Any:
        """A schema (id, version, fingerprint) seen for the first time, before its first
        record."""

    def on_producer(self, change: ProducerChange) -> Any:
        """A producer joined, died or ended."""

    def flush(self) -> None:
        """Make what was received visible or durable: every `flush_every` seconds while
        running, and before `run` returns (also when a hook raised)."""


def run(
    consumer: Consumer,
    *globs: str,
    start: str | datetime.datetime = "latest",
    flush_every: float = 1.0,
    until_end: bool = False,
    cut: bool = False,
    bus: str | None = None,
) -> RunSummary:
    """Subscribes to `globs` and feeds `consumer` until a hook returns `snapbus.STOP`, every
    producer has ended (`until_end`), or Ctrl-C (KeyboardInterrupt, after a flush). `cut`:
    read only what the rings hold now (use with `until_end`). A hook's exception flushes and
    is re-raised. Returns what it delivered and lost."""
    kind = consumer.kind or type(consumer).__name__
    sub = subscribe(*globs, start=start, bus=bus, kind=kind, cut=cut)
    seen: set[int] = set()
    delivered = lost = 0
    reason = "all_ended"
    flushed = False
    poll = sub._poll
    next_flush = time.monotonic() + flush_every
    try:
        while True:
            item = poll(min(flush_every, 0.1))
            if item is not None:
                what = item[0]
                if what == "event":
                    ev = item[1]
                    fp = ev.schema.fingerprint
                    if fp not in seen:
                        seen.add(fp)
                        if consumer.on_schema(ev.schema) is STOP:
                            reason = "consumer"
                            break
                    delivered += 1
                    if consumer.on_event(ev) is STOP:
                        reason = "consumer"
                        break
                elif what == "lag":
                    lost += item[2]
                    if consumer.on_lag(item[1], item[2]) is STOP:
                        reason = "consumer"
                        break
                elif consumer.on_producer(ProducerChange(what, item[1])) is STOP:
                    reason = "consumer"
                    break
            if until_end and sub._all_ended():
                break
            if item is None or delivered % 64 == 0:
                now = time.monotonic()
                if now >= next_flush:
                    next_flush = now + flush_every
                    consumer.flush()
        flushed = True
        consumer.flush()
    finally:
        try:
            if not flushed:
                consumer.flush()
        finally:
            sub.close()
    return RunSummary(delivered, lost, reason)

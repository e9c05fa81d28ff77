"""Python consumers: the `Consumer` base class and `run`, which hands the Rust runtime's items
(`snapbus_consumers::Reader`: batch reads, drain-on-stop, the flush cadence) to its hooks.

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
import os
import signal
import sys
import threading
from typing import Any, Callable

from ._snapbus import Event, Producer, Schema, Subscription, _report_exit
from .subscription import _open

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
    """What `run` saw, and why it returned ("consumer", "all_ended", "stopped": Ctrl-C or
    SIGTERM; `unread_bytes`: what was emitted before the stop and not read by then)."""

    __slots__ = ("delivered", "lost", "reason", "unread_bytes")

    def __init__(self, delivered: int, lost: int, reason: str, unread_bytes: int = 0) -> None:
        self.delivered = delivered
        self.lost = lost
        self.reason = reason
        self.unread_bytes = unread_bytes

    def __repr__(self) -> str:
        return (
            f"RunSummary(delivered={self.delivered}, lost={self.lost}, reason={self.reason!r}, "
            f"unread_bytes={self.unread_bytes})"
        )


class Consumer:
    """A consumer: override the hooks you need (all optional). `kind` is shown by `snapbus ls`
    (default: the class's name)."""

    kind: str | None = None
    #: `snapbus.run`'s `wait` when it is not given: wait for a bus to be started (True: as
    #: long as it takes; seconds) instead of raising `BusNotRunning` at once.
    wait: bool | float = False
    _snapbus_subscription: Subscription | None = None

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

    def set_status(self, key: str, value: int | float | str | None) -> None:
        """Shows `key` and `value` for this consumer in `snapbus ls` while `run` runs it (an
        int: a count, a float: a measurement, a str: a state or message; None removes it).
        Does nothing outside `run`."""
        sub = getattr(self, "_snapbus_subscription", None)
        if sub is not None:
            sub._set_status(key, value)


def run(
    consumer: Consumer,
    *globs: str,
    start: str | datetime.datetime = "latest",
    flush_every: float = 1.0,
    until_end: bool = False,
    cut: bool = False,
    bus: str | None = None,
    batch: bool = False,
    drain_on_stop: float = 2.0,
    wait: bool | float | None = None,
) -> RunSummary:
    """Subscribes to `globs` and feeds `consumer` until a hook returns `snapbus.STOP`, every
    producer has ended (`until_end`), or Ctrl-C or SIGTERM (in the main thread): then what was
    emitted until then is read first, for at most `drain_on_stop` seconds (a second signal
    ends it), and after a flush the signal goes to the handler `run` had replaced (Ctrl-C:
    KeyboardInterrupt). `cut`: read only what the rings hold now (use with `until_end`).
    `batch`: read in batches, a few milliseconds behind the producers (for consumers that need
    no microseconds). A hook's exception flushes and is re-raised. Returns what it delivered and
    lost. `wait` (default: the consumer's `wait` attribute): wait for a bus to be started, as
    `snapbus.subscribe` does."""
    kind = consumer.kind or type(consumer).__name__
    sub = _open(
        globs,
        start=start,
        bus=bus,
        kind=kind,
        cut=cut,
        until_end=until_end,
        flush_every=flush_every,
        drain_on_stop=drain_on_stop,
        batch=batch,
        wait=consumer.wait if wait is None else wait,
    )
    signals = _Signals(sub)
    consumer._snapbus_subscription = sub
    try:
        summary = _loop(consumer, sub)
    finally:
        try:
            signals.restore()
            consumer.flush()
        finally:
            consumer._snapbus_subscription = None
            sub.close()
    signals.reraise()
    return summary


def _loop(consumer: Consumer, sub: Subscription) -> RunSummary:
    """Hands the subscription's items to the consumer's hooks until its end or a STOP."""
    poll = sub._poll
    while True:
        item = poll(0.1)
        if item is None:
            continue
        what = item[0]
        if what == "end":
            return RunSummary(item[2], item[3], item[1], item[4])
        if what == "flush":
            consumer.flush()
        elif _dispatch(consumer, what, item) is STOP:
            reason, delivered, lost, unread = sub._end()
            return RunSummary(delivered, lost, reason, unread)


class _Signals:
    """While `run` runs in the main thread: SIGINT and SIGTERM stop the subscription (what was
    emitted until then is read first), a second one ends the drain; once `run` has flushed,
    the first is handed to the handler it replaced (KeyboardInterrupt for Ctrl-C)."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, sub: Subscription) -> None:
        self.sub = sub
        self.first: tuple[int, Any] | None = None
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self._SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.first is None:
            self.first = (signum, frame)
            self.sub._stop()
            return
        # A second signal ends the drain as the replaced handler would.
        self.restore()
        self._call_previous(signum, frame)

    def _call_previous(self, signum: int, frame: Any) -> None:
        prev = self.previous.get(signum)
        if callable(prev):
            prev(signum, frame)
            return
        # The default action (SIGTERM: the process ends), now that it has flushed.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def restore(self) -> None:
        for sig, prev in self.previous.items():
            signal.signal(sig, prev)

    def reraise(self) -> None:
        if self.first is not None:
            signum, frame = self.first
            self._call_previous(signum, frame)


def _exit_reported(
    main: Callable[[], int], prog: str = "", errors: tuple[type[Exception], ...] = ()
) -> int:
    """Runs the `main` of a consumer's process (`python -m snapbus run`, the rerun bridge) and
    tells the broker its exit code (it supervises the consumers `snapbus attach` starts);
    returns the code. A `SystemExit`'s message is printed; `errors` are printed as `PROG:
    message`, exit code 1; Ctrl-C is 130."""
    code = 1
    try:
        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except errors as e:
        print(f"{prog}: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    finally:
        _report_exit(code)
    return code


def _dispatch(consumer: Consumer, what: str, item: tuple[Any, ...]) -> Any:
    """Hands one of `Subscription._poll`'s items to the consumer's hook."""
    if what == "event":
        return consumer.on_event(item[1])
    if what == "schema":
        if consumer.on_schema(item[1].schema) is STOP:
            return STOP
        return consumer.on_event(item[1])
    if what == "lag":
        return consumer.on_lag(item[1], item[2])
    return consumer.on_producer(ProducerChange(what, item[1]))

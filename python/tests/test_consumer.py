"""snapbus.Consumer and snapbus.run: hooks in order on the caller's thread, STOP, exceptions
in hooks flushed and re-raised, until_end/cut."""

from __future__ import annotations

import json
import textwrap
import threading
from typing import Any

import pytest
from conftest import LAP_EPISODES, Bus, demo_while_stopped, wait_until

import snapbus


class Recorder(snapbus.Consumer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.threads: set[int] = set()

    def _note(self, what: str, arg: Any) -> None:
        self.threads.add(threading.get_ident())
        self.calls.append((what, arg))

    def on_schema(self, schema: snapbus.Schema) -> None:
        self._note("schema", schema.id)

    def on_event(self, event: snapbus.Event) -> Any:
        self._note("event", (event.schema.id, event.payload.episode))

    def on_producer(self, change: Any) -> None:
        self._note(change.kind, change.producer.name)

    def on_lag(self, producer: snapbus.Producer, lost: int) -> None:
        self._note("lag", lost)

    def flush(self) -> None:
        self._note("flush", None)


def test_hooks_run_in_order_on_the_callers_thread(bus: Bus) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "2", "--steps", "1")
    c = Recorder()
    summary = snapbus.run(c, "demo.*", start="oldest", cut=True, until_end=True, bus=bus.name)
    assert summary.reason == "all_ended" and summary.delivered == 4 and summary.lost == 0
    assert c.threads == {threading.get_ident()}
    non_flush = [x for x in c.calls if x[0] != "flush"]
    assert non_flush == [
        ("joined", "demo"),
        ("schema", "demo.step"),
        ("event", ("demo.step", 0)),
        ("schema", "demo.episode_end"),
        ("event", ("demo.episode_end", 0)),
        ("event", ("demo.step", 1)),
        ("event", ("demo.episode_end", 1)),
        ("ended", "demo"),
    ], non_flush
    assert c.calls[-1] == ("flush", None)


def test_stop_from_on_event_ends_the_run(bus: Bus) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "3", "--steps", "2")

    class FirstTwo(snapbus.Consumer):
        def __init__(self) -> None:
            self.seen = 0
            self.flushed = 0

        def on_event(self, event: snapbus.Event) -> Any:
            self.seen += 1
            return snapbus.STOP if self.seen == 2 else None

        def flush(self) -> None:
            self.flushed += 1

    c = FirstTwo()
    summary = snapbus.run(c, "demo.step", start="oldest", bus=bus.name)
    assert (summary.reason, summary.delivered, c.seen) == ("consumer", 2, 2)
    assert c.flushed >= 1


def test_an_exception_in_a_hook_flushes_stops_and_propagates(bus: Bus) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "3", "--steps", "2")

    class Boom(snapbus.Consumer):
        kind = "boom"

        def __init__(self) -> None:
            self.seen = 0
            self.flushed = 0

        def on_event(self, event: snapbus.Event) -> None:
            self.seen += 1
            if self.seen == 3:
                raise KeyError("from on_event")

        def flush(self) -> None:
            self.flushed += 1

    c = Boom()
    with pytest.raises(KeyError, match="from on_event"):
        snapbus.run(c, "demo.*", start="oldest", bus=bus.name)
    assert c.seen == 3 and c.flushed == 1

    class BadSchema(snapbus.Consumer):
        def on_schema(self, schema: snapbus.Schema) -> None:
            raise RuntimeError("from on_schema")

    with pytest.raises(RuntimeError, match="from on_schema"):
        snapbus.run(BadSchema(), "demo.*", start="oldest", bus=bus.name)


def test_run_with_bad_input_raises(bus: Bus) -> None:
    with pytest.raises(ValueError, match="unknown start"):
        snapbus.run(snapbus.Consumer(), start="first", bus=bus.name)
    with pytest.raises(ConnectionError, match="snapbus up"):
        snapbus.run(snapbus.Consumer(), bus="no-such-bus")


def test_on_lag_reports_exactly_what_a_stopped_consumer_lost(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = bus.spawn_py(
        textwrap.dedent(f"""
        import snapbus

        class Count(snapbus.Consumer):
            events = lagged = 0
            def on_producer(self, change):
                if change.kind == "joined":
                    print("joined", flush=True)
            def on_event(self, ev):
                self.events += 1
                if ev.schema.id == "demo.episode_end" and ev.payload.episode == {LAP_EPISODES - 1}:
                    return snapbus.STOP
            def on_lag(self, producer, lost):
                assert producer.name == "demo"
                self.lagged += lost

        c = Count()
        print("ready", flush=True)
        s = snapbus.run(c, "demo.*")
        print(c.events, c.lagged, s.delivered, s.lost, flush=True)
    """)
    )
    assert child.popen.stdout is not None
    assert child.popen.stdout.readline().strip() == "ready"
    wait_until("the consumer in snapbus ls", lambda: "Count" in json.dumps(bus.ls()))
    emitted = demo_while_stopped(bus, child, monkeypatch)
    res = child.wait()
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split("\n")
    assert lines[0] == "joined"
    events, lagged, delivered, lost = map(int, lines[1].split())
    assert (events, lagged) == (delivered, lost)
    assert lost > 0 and delivered + lost == emitted

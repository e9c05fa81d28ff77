"""Consumers started before their bus wait for it (`wait=`): `subscribe` and `run` say once
through the `snapbus` logger that they wait, then read as usual; past the limit,
`BusNotRunning`."""

from __future__ import annotations

import logging
import os
import textwrap
import time
import uuid

import pytest
from conftest import Bus

import snapbus


def _bus_not_up() -> Bus:
    """A bus of this test's own, not started."""
    return Bus(f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def test_subscribe_started_before_the_bus_waits_then_reads_every_event() -> None:
    bus = _bus_not_up()
    try:
        child = bus.spawn_py(
            textwrap.dedent(
                """
                import logging, sys
                import snapbus
                logging.basicConfig(stream=sys.stderr, format="%(name)s: %(message)s")
                with snapbus.subscribe("demo.*", wait=True) as sub:
                    print("subscribed", flush=True)
                    events = [sub.get(timeout=30) for _ in range(8)]
                for ev in events:
                    print(ev.schema.id, ev.payload.episode, flush=True)
                """
            )
        )
        assert child.popen.stderr is not None and child.popen.stdout is not None
        said = child.popen.stderr.readline()
        assert "waiting for the bus" in said and bus.name in said, said
        bus.up()
        assert child.popen.stdout.readline().strip() == "subscribed"
        bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "2", "--steps", "3")
        out = child.wait()
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        want = ["demo.step", "0"] * 3 + ["demo.episode_end", "0"]
        want += ["demo.step", "1"] * 3 + ["demo.episode_end", "1"]
        assert lines == want, out.stdout
        assert "waiting for the bus" not in out.stderr, "said once"
    finally:
        bus.close()


def test_past_the_wait_limit_bus_not_running_said_once(caplog: pytest.LogCaptureFixture) -> None:
    bus = _bus_not_up()
    caplog.set_level(logging.WARNING, logger="snapbus")
    t0 = time.monotonic()
    said = rf"no bus '{bus.name}' is running.*0\.3 s"
    with pytest.raises(snapbus.subscription.BusNotRunning, match=said):
        snapbus.subscribe(bus=bus.name, wait=0.3)
    assert time.monotonic() - t0 >= 0.3
    waits = [r for r in caplog.records if "waiting for the bus" in r.getMessage()]
    assert len(waits) == 1, caplog.text

    class Waits(snapbus.Consumer):
        wait = 0.2

    caplog.clear()
    with pytest.raises(snapbus.subscription.BusNotRunning):
        snapbus.run(Waits(), bus=bus.name)
    assert "waiting for the bus" in caplog.text
    # Without wait, at once, as before.
    caplog.clear()
    with pytest.raises(snapbus.subscription.BusNotRunning):
        snapbus.subscribe(bus=bus.name)
    assert "waiting" not in caplog.text
    with pytest.raises(ValueError, match="wait"):
        snapbus.subscribe(bus=bus.name, wait=-1)

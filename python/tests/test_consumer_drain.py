"""snapbus.run stopped by Ctrl-C or SIGTERM: like a Rust consumer, it first reads what was
emitted before the signal (`drain_on_stop`), then flushes and hands the signal on."""

from __future__ import annotations

import signal
import textwrap

import pytest
from conftest import Bus, wait_until

STEPS = 2000


def _slow_consumer(drain_on_stop: float, catch: str) -> str:
    """A child that reads demo.step records at 1 ms each and says how many it got."""
    return textwrap.dedent(f"""
        import sys, time
        import snapbus

        class Slow(snapbus.Consumer):
            n = flushes = 0
            def on_event(self, ev):
                if self.n == 0:
                    print("first", flush=True)
                self.n += 1
                time.sleep(0.001)
            def flush(self):
                self.flushes += 1

        c = Slow()
        try:
            snapbus.run(c, "demo.step", start="oldest", drain_on_stop={drain_on_stop})
        except {catch}:
            print("stopped", c.n, c.flushes > 0, flush=True)
            sys.exit(0)
        print("returned", c.n, flush=True)
    """)


@pytest.mark.parametrize(
    ("sig", "catch"), [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "SystemExit")]
)
def test_a_signalled_python_consumer_reads_what_was_emitted_before_the_signal(
    bus: Bus, sig: int, catch: str
) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "1", "--steps", str(STEPS))
    code = _slow_consumer(60.0, catch)
    if sig == signal.SIGTERM:
        # A handler that ends the process the way a supervised consumer's does.
        code = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(1))\n" + code
    child = bus.spawn_py(code)
    assert child.popen.stdout is not None
    assert child.popen.stdout.readline().strip() == "first"
    child.signal(sig)
    res = child.wait()
    assert res.returncode == 0, res.stderr
    # Everything emitted before the signal, then the signal handed on after a flush.
    assert res.stdout.split() == ["stopped", str(STEPS), "True"], res.stdout


def test_without_a_drain_a_signalled_python_consumer_stops_at_once(bus: Bus) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "1", "--steps", str(STEPS))
    child = bus.spawn_py(_slow_consumer(0.0, "KeyboardInterrupt"))
    assert child.popen.stdout is not None
    assert child.popen.stdout.readline().strip() == "first"
    child.signal(signal.SIGINT)
    res = child.wait()
    assert res.returncode == 0, res.stderr
    what, n, flushed = res.stdout.split()
    assert (what, flushed) == ("stopped", "True") and int(n) < STEPS, res.stdout


def test_a_python_consumers_status_shows_in_snapbus_ls(bus: Bus) -> None:
    child = bus.spawn_py(
        textwrap.dedent("""
        import snapbus

        class Status(snapbus.Consumer):
            def on_producer(self, change):
                self.set_status("state", "busy")
                self.set_status("seen", 3)
                self.set_status("rate", 1.5)
                print("set", flush=True)

        snapbus.run(Status(), "demo.*")
    """)
    )
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "1", "--steps", "1")
    assert child.popen.stdout is not None
    assert child.popen.stdout.readline().strip() == "set"

    want = {"state": "busy", "seen": 3, "rate": 1.5}

    def shown() -> bool:
        consumers = bus.ls()["consumers"]
        return any(c.get("board") == want for c in consumers)  # type: ignore[union-attr]

    wait_until("the board in snapbus ls", shown)
    child.signal(signal.SIGTERM)
    child.wait()

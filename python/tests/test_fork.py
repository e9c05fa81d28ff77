"""multiprocessing children (fork and spawn) get their own lane and appear as their own
producers; every producer's records arrive."""

from __future__ import annotations

import os
import signal
import textwrap
from collections import Counter
from pathlib import Path

from conftest import TESTS_ON_PATH, Bus, echo_oldest, wait_until

import snapbus

CODE = textwrap.dedent(
    """
    import logging, multiprocessing as mp, os
    from rt_schema import event

    Hello = event("test.hello", who=str, pid=snapbus.u32)

    def child(who):
        t = snapbus.get_telemetry("lab.child")
        assert snapbus.wait_for_bus(30)
        for _ in range(3):
            t.snapshot(logging.INFO, Hello(who, os.getpid()))
        snapbus.shutdown()

    if __name__ == "__main__":
        t = snapbus.get_telemetry("lab.parent")
        t.snapshot(logging.INFO, Hello("parent-before", os.getpid()))
        for method in ("fork", "spawn"):
            p = mp.get_context(method).Process(target=child, args=(method,))
            p.start()
            p.join(60)
            assert p.exitcode == 0, (method, p.exitcode)
        t.snapshot(logging.INFO, Hello("parent-after", os.getpid()))
        s = snapbus.stats()
        assert s["written"] == 2 and s["not_written"] == 0, s
        snapbus.shutdown()
    """
)


def test_fork_and_spawn_children_are_producers_of_their_own(bus, tmp_path) -> None:
    script = tmp_path / "forking_experiment.py"
    script.write_text(TESTS_ON_PATH + "import snapbus\nassert snapbus.wait_for_bus(30)\n" + CODE)
    p = bus.spawn_py([str(script)])
    out = p.wait()
    assert out.returncode == 0, out.stderr
    events = echo_oldest(bus, 8, "test.hello")
    by_who = Counter(e["payload"]["who"] for e in events)
    assert by_who == {"parent-before": 1, "parent-after": 1, "fork": 3, "spawn": 3}, by_who
    # Each record comes from the lane of the process that emitted it.
    for e in events:
        assert e["producer"]["pid"] == e["payload"]["pid"], e
    pids = {e["producer"]["pid"] for e in events}
    assert len(pids) == 3
    producers = bus.ls()["producers"]
    mine = [q for q in producers if q["info"]["pid"] in pids]  # type: ignore[index,union-attr]
    assert len(mine) == 3, producers
    # The default name: the script, in the children too (never `python3`).
    assert {q["info"]["name"] for q in mine} == {"forking_experiment.py"}, mine


def test_a_fork_child_that_never_emitted_before_the_fork(bus) -> None:
    # The parent has no lane when it forks (no bus wait): the child finds the bus itself.
    code = textwrap.dedent(
        """
        import logging, os, multiprocessing as mp
        from rt_schema import event
        Hi = event("test.hi", pid=snapbus.u32)
        def child():
            assert snapbus.wait_for_bus(30)
            snapbus.get_telemetry("c").snapshot(logging.INFO, Hi(os.getpid()))
            snapbus.shutdown()
        p = mp.get_context("fork").Process(target=child)
        p.start(); p.join(60)
        assert p.exitcode == 0
        """
    )
    out = bus.spawn_py(TESTS_ON_PATH + "import snapbus\n" + code).wait()
    assert out.returncode == 0, out.stderr
    ev = echo_oldest(bus, 1, "test.hi")[0]
    assert ev["producer"]["pid"] == ev["payload"]["pid"]


def test_producers_that_just_end_show_as_closed_not_dead(bus, tmp_path) -> None:
    # No shutdown() anywhere: the script ends, a fork child ends (os._exit, past atexit), a
    # spawn child ends; each closes its lane by itself. A kill -9 is what shows as dead.
    code = textwrap.dedent(
        """
        import logging, multiprocessing as mp, os
        from rt_schema import event
        Bye = event("test.bye", pid=snapbus.u32)
        def child():
            assert snapbus.wait_for_bus(30)
            snapbus.get_telemetry("c").snapshot(logging.INFO, Bye(os.getpid()))
        if __name__ == "__main__":
            snapbus.get_telemetry("p").snapshot(logging.INFO, Bye(os.getpid()))
            for method in ("fork", "spawn"):
                p = mp.get_context(method).Process(target=child)
                p.start(); p.join(60)
                assert p.exitcode == 0, (method, p.exitcode)
        """
    )
    script = tmp_path / "ends_quietly.py"
    script.write_text(TESTS_ON_PATH + "import snapbus\nassert snapbus.wait_for_bus(30)\n" + code)
    out = bus.spawn_py([str(script)]).wait()
    assert out.returncode == 0, out.stderr
    pids = {e["producer"]["pid"] for e in echo_oldest(bus, 3, "test.bye")}
    assert len(pids) == 3

    def statuses() -> object:
        mine = [q for q in bus.ls()["producers"] if q["info"]["pid"] in pids]
        got = {q["info"]["pid"]: str(q["status"]) for q in mine}
        return got if len(got) == 3 and all(s != "live" for s in got.values()) else None

    got = wait_until("the three producers have left", statuses)
    assert all(s == "closed" for s in got.values()), got  # type: ignore[union-attr]


OUTAGE = textwrap.dedent(
    """
    import logging, multiprocessing as mp, os, pathlib, sys, time
    from rt_schema import event

    Hello = event("test.hello", who=str, i=snapbus.u32)
    flags = pathlib.Path(sys.argv[1])

    def await_flag(name):
        t0 = time.monotonic()
        while not (flags / name).exists():
            assert time.monotonic() - t0 < 60, name
            time.sleep(0.01)

    def child():
        t = snapbus.get_telemetry("lab.child")
        for i in range(1000):
            t.snapshot(logging.INFO, Hello("child", i))
        s = snapbus.stats()
        assert s["written"] == 1000, s
        # The multiprocessing finalizer closes the lane and hands it to the parent.

    if __name__ == "__main__":
        t = snapbus.get_telemetry("lab.parent")
        for i in range(1000):
            t.snapshot(logging.INFO, Hello("parent", i))
        (flags / "parent-wrote").touch()
        await_flag("broker-killed")
        p = mp.get_context("fork").Process(target=child)
        p.start()
        p.join(60)
        assert p.exitcode == 0, p.exitcode
        (flags / "child-ended").touch()
        await_flag("done")
    """
)


def test_a_forked_child_that_lives_inside_a_broker_outage_loses_nothing(
    bus: Bus, tmp_path: Path
) -> None:
    """Parent emits 1,000; the broker is killed; a fork child emits 1,000 and exits; `snapbus
    up`. The child's lane outlives it (its parent keeps it) and the new broker adopts it: the
    recording holds all 2,000 records (issue #44, item 1)."""
    rec = tmp_path / "rec.mcap"
    flags = tmp_path / "flags"
    flags.mkdir()
    rec_proc = bus.spawn_cli("record", "-o", str(rec), "--schema", "test.*")
    wait_until("the recorder subscribes", lambda: "record" in str(bus.ls().get("consumers", "")))
    script = tmp_path / "outage_experiment.py"
    script.write_text(TESTS_ON_PATH + "import snapbus\nassert snapbus.wait_for_bus(30)\n" + OUTAGE)
    exp = bus.spawn_py([str(script), str(flags)])
    wait_until("the parent wrote", lambda: (flags / "parent-wrote").exists())
    os.kill(int(bus.ls()["broker_pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    wait_until("the broker is gone", lambda: bus.cli("ls", check=False).returncode != 0)
    (flags / "broker-killed").touch()
    wait_until("the child ended", lambda: (flags / "child-ended").exists() or exp.popen.poll())
    assert exp.popen.poll() is None, exp.wait().stderr
    bus.up()

    def recorded() -> int:
        consumers = bus.ls().get("consumers", [])
        assert isinstance(consumers, list)
        delivered = [c["delivered"] for c in consumers if c["info"]["kind"] == "recorder"]
        return max(delivered, default=0)

    wait_until("the recorder has both lanes", lambda: recorded() >= 2000)
    (flags / "done").touch()
    out = exp.wait()
    assert out.returncode == 0, out.stderr
    rec_proc.signal(signal.SIGINT)
    assert rec_proc.wait().returncode == 0
    by_who = Counter(e.payload.who for e in snapbus.open_recording(rec))
    assert by_who == {"parent": 1000, "child": 1000}, by_who
    inspect = bus.cli("inspect", str(rec)).stdout
    assert "none: every record the producers wrote is in the file" in inspect, inspect

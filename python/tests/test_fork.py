"""multiprocessing children (fork and spawn) get their own lane and appear as their own
producers; every producer's records arrive."""

from __future__ import annotations

import textwrap
from collections import Counter

from conftest import TESTS_ON_PATH, echo_oldest, wait_until

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

"""Python `logging` levels control `get_telemetry(name)`: the one rule (the bus filter, then the
nearest `telemetry.*` logger with a level, then SNAPBUS_FILTER), changes at the next call, live
against the real CLI, and `__main__` as the module's real name."""

from __future__ import annotations

import logging
import logging.config
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator, List

import pytest
from conftest import CHILD_CWD, TESTS_ON_PATH, WATCHDOG_S, Bus, Proc, echo_oldest
from rt_schema import event

import snapbus

TRACE = 25  # tbp.monty's TRACE: between INFO and WARNING
Probe = event("test.levels", i=int)


@pytest.fixture()
def loggers() -> Iterator[List[logging.Logger]]:
    """The `telemetry.test.lv*` loggers a test sets levels on, given back as they were."""
    made: List[logging.Logger] = []
    yield made
    logging.disable(logging.NOTSET)
    for log in made:
        log.setLevel(logging.NOTSET)


def levels_on(t: snapbus.Telemetry) -> List[int]:
    return [
        lv for lv in (logging.DEBUG, logging.INFO, TRACE, logging.WARNING) if t.isEnabledFor(lv)
    ]


def test_the_nearest_telemetry_logger_with_a_level_decides(session_bus: Bus, loggers) -> None:
    assert snapbus.wait_for_bus(30)
    t = snapbus.get_telemetry("test.lv.a.b")
    parent = logging.getLogger("telemetry.test.lv")
    own = logging.getLogger("telemetry.test.lv.a.b")
    loggers += [parent, own, logging.root]
    info_up = [logging.INFO, TRACE, logging.WARNING]
    # Rule 3: no telemetry logger has a level, SNAPBUS_FILTER (unset: info) decides.
    assert levels_on(t) == info_up
    # Rule 2, at the next call: the parent's level, then the handle's own logger's.
    parent.setLevel(logging.DEBUG)
    assert levels_on(t) == [logging.DEBUG, *info_up]
    own.setLevel(TRACE)
    assert levels_on(t) == [TRACE, logging.WARNING]
    own.setLevel(logging.NOTSET)
    parent.setLevel("WARNING")
    assert levels_on(t) == [logging.WARNING]
    # The root logger's level does not count (everything would follow it otherwise).
    parent.setLevel(logging.NOTSET)
    logging.root.setLevel(logging.ERROR)
    assert levels_on(t) == info_up
    # logging.disable mutes as in `logging`; NOTSET lifts it.
    logging.disable(logging.INFO)
    assert levels_on(t) == [TRACE, logging.WARNING]
    logging.disable(logging.NOTSET)
    assert levels_on(t) == info_up
    # A dictConfig that sets the level (incremental, as tbp.monty's second one: a full one
    # would close the suite's own handlers; test_monty runs a full one in a child).
    logging.config.dictConfig(
        {"version": 1, "incremental": True, "loggers": {"telemetry.test.lv.a": {"level": "DEBUG"}}}
    )
    loggers.append(logging.getLogger("telemetry.test.lv.a"))
    assert levels_on(t) == [logging.DEBUG, *info_up]


def test_snapshots_follow_the_level_and_no_logger_is_made(session_bus: Bus, loggers) -> None:
    assert snapbus.wait_for_bus(30)
    t = snapbus.get_telemetry("telemetry.test.lv2")  # getTelemeter's names work too
    assert t.name == "test.lv2"
    assert "telemetry.test.lv2" not in logging.Logger.manager.loggerDict
    with snapbus.subscribe("test.levels", "snapbus.duration", start="latest") as sub:
        t.snapshot(logging.DEBUG, Probe(i=0))  # SNAPBUS_FILTER: info
        log = logging.getLogger("telemetry.test")
        loggers.append(log)
        log.setLevel(logging.DEBUG)
        t.snapshot(logging.DEBUG, Probe(i=1))
        with t.span(logging.DEBUG, "timed"):  # spans follow the same rule
            pass
        log.setLevel(logging.ERROR)
        t.snapshot(logging.WARNING, Probe(i=2))
        t.snapshot(logging.ERROR, Probe(i=3))
        got = [sub.get(timeout=WATCHDOG_S) for _ in range(3)]
    assert [getattr(ev.payload, "i", "span") for ev in got] == [1, "span", 3]
    assert [ev.level for ev in got] == [logging.DEBUG, logging.DEBUG, logging.ERROR]


def test_dunder_main_is_the_modules_real_name(tmp_path: Path) -> None:
    pkg = tmp_path / "lvpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "run.py").write_text(
        "import snapbus\n"
        "print(snapbus.get_telemetry(__name__).name)\n"
        "print(snapbus.get_telemetry('telemetry.__main__').name)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    def names(*args: str) -> List[str]:
        out = subprocess.run(
            [sys.executable, *args],
            env=env,
            cwd=CHILD_CWD,
            capture_output=True,
            text=True,
            timeout=WATCHDOG_S,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert names("-m", "lvpkg.run") == ["lvpkg.run", "lvpkg.run"]
    # Run as a script, Python knows no other name.
    assert names(str(pkg / "run.py")) == ["__main__", "__main__"]


class Driven:
    """A producer child that runs one command per line of its stdin and says "done"."""

    CODE = textwrap.dedent(
        """
        import logging, sys, time
        import snapbus
        from rt_schema import event
        Probe = event("test.levels", i=int)
        t = snapbus.get_telemetry("lab.live")
        assert snapbus.wait_for_bus(30)
        for line in sys.stdin:
            cmd, *args = line.split()
            if cmd == "level":       # setLevel on a logger
                logging.getLogger(args[0]).setLevel(args[1])
            elif cmd == "emit":      # one probe per level, i = 10 * n + level // 10
                n = int(args[0])
                for lv in (logging.DEBUG, logging.INFO, logging.WARNING):
                    t.snapshot(lv, Probe(i=10 * n + lv // 10))
            elif cmd == "until":     # polls its own handle until DEBUG is on / off
                want = args[0] == "on"
                while t.isEnabledFor(logging.DEBUG) != want:
                    time.sleep(0.002)
            print("done", flush=True)
        snapbus.shutdown()
        """
    )

    def __init__(self, bus: Bus) -> None:
        self.proc = Proc(
            [sys.executable, "-c", TESTS_ON_PATH + self.CODE],
            bus.env,
            cwd=CHILD_CWD,
            stdin=subprocess.PIPE,
        )
        bus.procs.append(self.proc)

    def run(self, line: str) -> None:
        stdin, stdout = self.proc.popen.stdin, self.proc.popen.stdout
        assert stdin is not None and stdout is not None
        stdin.write(line + "\n")
        stdin.flush()
        ready, _, _ = select.select([stdout], [], [], WATCHDOG_S)
        answer = stdout.readline().strip() if ready else "(nothing)"
        if answer != "done":
            self.proc.kill()
            raise AssertionError(f"{line!r}: {answer}; stderr:\n{self.proc.popen.stderr.read()}")  # type: ignore[union-attr]

    def close(self) -> None:
        out = self.proc.wait()  # closes its stdin: the child ends
        assert out.returncode == 0, out.stderr


def test_setlevel_switches_a_live_producer_and_snapbus_filter_overrides(bus: Bus) -> None:
    p = Driven(bus)
    p.run("emit 1")  # rule 3: SNAPBUS_FILTER (info)
    p.run("level telemetry.lab.live DEBUG")
    p.run("emit 2")  # rule 2: its logger says DEBUG
    p.run("level telemetry.lab WARNING")
    p.run("level telemetry.lab.live NOTSET")
    p.run("emit 3")  # rule 2: the parent's WARNING
    bus.cli("filter", "info,lab.live=debug")
    p.run("until on")
    p.run("emit 4")  # rule 1: the bus filter overrides the logger's WARNING
    bus.cli("filter", "--reset")
    p.run("until off")
    p.run("emit 5")  # the logger is in control again
    p.close()
    got = [(e["payload"]["i"], e["level"]) for e in echo_oldest(bus, 10, "test.levels")]
    assert got == [
        (12, "info"),
        (13, "warn"),
        (21, "debug"),
        (22, "info"),
        (23, "warn"),
        (33, "warn"),
        (41, "debug"),
        (42, "info"),
        (43, "warn"),
        (53, "warn"),
    ]

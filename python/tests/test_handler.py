"""SnapbusHandler: log records as `log.record`, events (as the message or `extra`) as their own
schema under the logger's name, and the `logging.Handler` contract (errors to handleError,
never raised)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap

import pytest
from conftest import CHILD_CWD, TESTS_ON_PATH, Proc, echo_oldest, run_producer
from rt_schema import event

import snapbus


def test_records_and_events_reach_the_bus(bus) -> None:
    code = TESTS_ON_PATH + textwrap.dedent(
        """
        import logging
        from rt_schema import event
        Step = event("test.step", episode=int)
        log = logging.getLogger("lab.models")
        log.setLevel(logging.INFO)
        log.addHandler(snapbus.SnapbusHandler())
        log.propagate = False
        log.warning("step %d of %s", 7, "ep")              # -> log.record
        log.info(Step(episode=3))                          # the message is an event
        log.info("done", extra={"snapbus": Step(episode=4)})
        log.debug("below the logger's level: never reaches the handler")
        try:
            1 / 0
        except ZeroDivisionError:
            log.exception("failed")
        snapbus.shutdown()
        """
    )
    run_producer(bus, code)
    events = echo_oldest(bus, 4)
    assert [(e["schema"], e["target"], e["level"]) for e in events] == [
        ("log.record", "lab.models", "warn"),
        ("test.step", "lab.models", "info"),
        ("test.step", "lab.models", "info"),
        ("log.record", "lab.models", "error"),
    ]
    rec = events[0]["payload"]
    assert rec["message"] == "step 7 of ep" and rec["levelno"] == logging.WARNING
    assert rec["name"] == "lab.models" and rec["funcName"] == "<module>"
    # The producer's line of that call (run_producer puts two lines before the code).
    line = 2 + 1 + next(i for i, t in enumerate(code.splitlines()) if "log.warning(" in t)
    assert rec["lineno"] == line and rec["exc_text"] is None
    assert rec["pathname"] == "<string>" and rec["process"] == events[0]["producer"]["pid"]
    assert isinstance(rec["created"], float) and rec["thread"] > 0
    assert [e["payload"] for e in events[1:3]] == [{"episode": 3}, {"episode": 4}]
    assert "ZeroDivisionError" in events[3]["payload"]["exc_text"]


Broken = event("test.broken", x=snapbus.u8)


class Recording(snapbus.SnapbusHandler):
    def __init__(self) -> None:
        super().__init__()
        self.errors: list[logging.LogRecord] = []

    def handleError(self, record: logging.LogRecord) -> None:
        self.errors.append(record)
        super().handleError(record)


def test_errors_go_to_handle_error_and_are_never_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = logging.getLogger("test.handler.contract")
    log.propagate = False
    handler = Recording()
    log.addHandler(handler)
    try:
        # Strict mode (the suite's): the overflow raises inside emit -> handleError.
        monkeypatch.setattr(logging, "raiseExceptions", True)
        stderr = io.StringIO()
        monkeypatch.setattr("sys.stderr", stderr)
        log.error(Broken(x=300))
        assert len(handler.errors) == 1 and isinstance(handler.errors[0].msg, Broken)
        assert "out of range for u8" in stderr.getvalue()
        # raiseExceptions off: silent, still never raised.
        monkeypatch.setattr(logging, "raiseExceptions", False)
        log.error(Broken(x=999))
        assert len(handler.errors) == 2
        # A message that fails to format: the stdlib contract too.
        log.error("%d", "not a number")
        assert len(handler.errors) == 3
        # An ordinary record goes through (counted as no_bus here: this process has no bus).
        log.error("fine")
        assert len(handler.errors) == 3
    finally:
        log.removeHandler(handler)


def test_is_a_logging_handler_with_levels() -> None:
    h = snapbus.SnapbusHandler(level=logging.WARNING)
    assert isinstance(h, logging.Handler) and h.level == logging.WARNING


def test_emits_what_logging_let_through_unless_the_bus_filter_refuses(bus) -> None:
    # SNAPBUS_FILTER=error in the child: logging's levels decide, not the process's filter.
    code = TESTS_ON_PATH + textwrap.dedent(
        """
        import logging, logging.config, threading
        from rt_schema import event
        Step = event("test.step", episode=int)
        logging.config.dictConfig({
            "version": 1,
            "handlers": {"bus": {
                "class": "snapbus.SnapbusHandler",
                "level": "DEBUG",
                "attrs": ["telemetry_event"],
                "schema_prefix": "",
            }},
            "loggers": {"telemetry.lab": {
                "level": "DEBUG", "handlers": ["bus"], "propagate": False,
            }},
        })
        (h,) = logging.getLogger("telemetry.lab").handlers
        assert isinstance(h, snapbus.SnapbusHandler) and h.attrs == ("telemetry_event",)
        log = logging.getLogger("telemetry.lab.models")
        log.debug(Step(episode=1))                                   # the message
        log.debug("kind", extra={"telemetry_event": Step(episode=2)})
        log.debug("plain", extra={"snapbus": Step(episode=3)})     # not in its attrs
        h.acquire()  # the handler's lock held elsewhere: emit never waits for it
        try:
            t = threading.Thread(target=log.info, args=(Step(episode=4),))
            t.start(); t.join(30)
            assert not t.is_alive(), "the handler waited for its lock"
        finally:
            h.release()
        print("own", flush=True)
        sys.stdin.readline()  # the bus filter is set now
        while snapbus.get_telemetry("lab.models").isEnabledFor(logging.INFO):
            pass
        log.info(Step(episode=5))                                   # refused by the bus filter
        log.warning(Step(episode=6))
        snapbus.shutdown()
        """
    )
    p = Proc(
        [sys.executable, "-c", "import snapbus, sys\nassert snapbus.wait_for_bus(30)\n" + code],
        {**bus.env, "SNAPBUS_FILTER": "error"},
        cwd=CHILD_CWD,
        stdin=subprocess.PIPE,
    )
    bus.procs.append(p)
    assert p.popen.stdout is not None and p.popen.stdin is not None
    assert p.popen.stdout.readline().strip() == "own", p.popen.stderr.read()  # type: ignore[union-attr]
    bus.cli("filter", "warn")
    p.popen.stdin.write("go\n")
    p.popen.stdin.flush()
    out = p.wait()
    assert out.returncode == 0, out.stderr
    events = echo_oldest(bus, 5)
    assert [(e["schema"], e["target"], e["level"]) for e in events] == [
        ("test.step", "lab.models", "debug"),
        ("test.step", "lab.models", "debug"),
        ("log.record", "lab.models", "debug"),
        ("test.step", "lab.models", "info"),
        ("test.step", "lab.models", "warn"),
    ]
    payloads = [e["payload"] for e in events]
    assert [p.get("episode") for p in payloads] == [1, 2, None, 4, 6]
    assert payloads[2]["message"] == "plain"


def test_options_are_checked() -> None:
    assert snapbus.SnapbusHandler().attrs == ("snapbus", "telemetry_event", "telemetry_schema")
    assert snapbus.SnapbusHandler(attrs="ev").attrs == ("ev",)
    assert snapbus.SnapbusHandler(level="INFO").level == logging.INFO
    with pytest.raises(TypeError, match="attribute names"):
        snapbus.SnapbusHandler(attrs=[1])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="schema_prefix"):
        snapbus.SnapbusHandler(schema_prefix=3)  # type: ignore[arg-type]

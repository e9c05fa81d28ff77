"""The embedded default: with no broker running, ``snapbus.init()`` (or the first
``get_telemetry``) starts one from the ``snapbus`` binary, and a consumer started after the
script sees every event, the first included; opted out (argument or environment), no broker
starts and the logger ``snapbus`` warns exactly once.

Real processes: the script, the broker it starts, and a consumer, each under the watchdog; every
bus is taken down at the end (``Bus.close``)."""

from __future__ import annotations

import json
import os
import stat
import textwrap
import uuid
from pathlib import Path
from typing import Dict, Iterator

import pytest
from conftest import TESTS_ON_PATH, Bus, snapbus_bin

N = 200
WARNING = "no broker is running for bus"


@pytest.fixture()
def no_bus() -> Iterator[Bus]:
    """A bus name no broker runs for; whatever broker a test starts on it goes at the end."""
    bus = Bus(f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield bus
    finally:
        bus.close()


def _env(**extra: str) -> Dict[str, str]:
    env = {"SNAPBUS_START_BUS": "1", "SNAPBUS_BIN": str(snapbus_bin())}
    env.update(extra)
    return env


# The script: emits N events at once after joining (no wait for the bus), then its counters.
# `{join}` is how it joins: `snapbus.init()`, or nothing (the first get_telemetry joins).
SCRIPT = """
import json, logging, snapbus
{join}
from rt_schema import event
E = event("embed.step", i=int)
t = snapbus.get_telemetry("lab")
enabled_at_once = t.isEnabledFor(logging.INFO)
for i in range({n}):
    t.snapshot(logging.INFO, E(i))
print(json.dumps(dict(snapbus.stats(), enabled_at_once=enabled_at_once)))
"""

CONSUMER = """
import json, snapbus
seen = []
with snapbus.subscribe("embed.*", start="oldest") as sub:
    for event in sub:
        seen.append(event.payload.i)
        if len(seen) == {n}:
            break
print(json.dumps(seen))
"""


@pytest.mark.parametrize("join", ["snapbus.init()", ""], ids=["init", "first-get_telemetry"])
def test_a_script_starts_its_bus_and_a_later_consumer_sees_its_first_event(
    no_bus: Bus, join: str
) -> None:
    assert no_bus.cli("ls", check=False).returncode != 0, "no broker before"
    script = TESTS_ON_PATH + SCRIPT.format(join=join, n=N)
    out = no_bus.spawn_py(script, env=_env()).wait()
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert stats["enabled_at_once"] is True, stats
    assert (stats["written"], stats["no_bus"], stats["not_written"]) == (N, 0, 0), stats
    assert WARNING not in out.stderr, out.stderr
    # The broker outlived the script that started it; a consumer started now reads it all.
    state = no_bus.ls()
    assert state["broker_pid"] != no_bus.procs[0].pid, state
    got = no_bus.spawn_py(CONSUMER.format(n=N)).wait()
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == list(range(N))


# The first lines of a script that keeps what the logger `snapbus` says, in `records`.
KEEP_WARNINGS = """
import logging
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("snapbus").addHandler(Keep())
"""

# Opted out: 1000 snapshots, one warning, through `logging`.
OPTED_OUT = """
import json, snapbus
{join}
from rt_schema import event
E = event("embed.step", i=int)
t = snapbus.get_telemetry("lab")
for i in range(1000):
    t.snapshot(logging.INFO, E(i))
print(json.dumps(dict(snapbus.stats(), records=records)))
"""


@pytest.mark.parametrize(
    "join, env",
    [("snapbus.init(start_bus=False)", {}), ("", {"SNAPBUS_START_BUS": "0"})],
    ids=["argument", "environment"],
)
def test_opting_out_starts_no_bus_and_warns_once(
    no_bus: Bus, join: str, env: Dict[str, str]
) -> None:
    script = TESTS_ON_PATH + KEEP_WARNINGS + OPTED_OUT.format(join=join)
    out = no_bus.spawn_py(script, env=_env(**env)).wait()
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert (stats["no_bus"], stats["written"]) == (1000, 0), stats
    warnings = [r for r in stats["records"] if WARNING in r]
    assert len(warnings) == 1 and len(stats["records"]) == 1, stats["records"]
    assert "snapbus up" in warnings[0] and "SNAPBUS_START_BUS" in warnings[0], warnings
    assert no_bus.cli("ls", check=False).returncode != 0, "no broker was started"


# A stand-in for the binary: writes its arguments to a file and fails, as `up` would.
FAKE_BIN = """#!/bin/sh
printf '%s\\n' "$@" > "$ARGS_FILE"
echo "fake up: refusing" >&2
exit 3
"""


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_record_is_passed_on_to_up_and_a_failed_start_warns_once(
    no_bus: Bus, tmp_path: Path, how: str
) -> None:
    fake = tmp_path / "snapbus"
    fake.write_text(FAKE_BIN)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    args_file = tmp_path / "args"
    runs = tmp_path / "runs"
    join = "snapbus.init(record='runs')" if how == "argument" else "snapbus.init()"
    env = _env(SNAPBUS_BIN=str(fake), ARGS_FILE=str(args_file))
    if how == "environment":
        env["SNAPBUS_RECORD"] = str(runs)
    # The script runs in `tmp_path`: a relative `record` is made absolute there.
    script = KEEP_WARNINGS + textwrap.dedent(
        f"""
        import os, time, snapbus
        os.chdir({str(tmp_path)!r})
        {join}
        deadline = time.monotonic() + 30
        while not records and time.monotonic() < deadline:
            time.sleep(0.01)
        print(records)
        """
    )
    out = no_bus.spawn_py(script, env=env).wait()
    assert out.returncode == 0, out.stderr
    assert args_file.read_text().splitlines() == [
        "up",
        f"--bus={no_bus.name}",
        "--idle-exit-secs=60",
        f"--record={runs}",
    ]
    assert "fake up: refusing" in out.stdout and "failed" in out.stdout, out.stdout
    assert out.stdout.count("start one with `snapbus up`") == 1, out.stdout

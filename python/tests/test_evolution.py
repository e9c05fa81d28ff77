"""Schema evolution across processes (issue #44, item 7): a dataclass changed without a new
`schema_version`, or a version that does not evolve from the one on the bus, is refused at its
first emit (`TypeError` naming the schema, both layouts and the rule; counted and warned once
with `bad_values="count"`); a pydantic event's shapes (its extras) are no conflict, in the
producer or in `ls`; a consumer reading a record into a class it does not fit gets an error
naming the schema, the version and the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Dict

import pytest
from conftest import TESTS_ON_PATH, Bus, echo_oldest, run_producer

import snapbus


def step_class(version: int, *fields: str) -> str:
    """The source of the dataclass `Step` of schema `test.evo`, version `version`."""
    body = "".join(f"    {f}\n" for f in fields)
    return (
        "\n@dataclass\nclass Step:\n"
        '    schema_id: ClassVar[str] = "test.evo"\n'
        f"    schema_version: ClassVar[int] = {version}\n{body}"
    )


IMPORTS = "from dataclasses import dataclass\nfrom typing import ClassVar\nimport logging\n"
V1 = IMPORTS + step_class(1, "episode: int")
# Changed without a new version, and a new version that does not append to version 1.
CHANGED_SAME_VERSION = step_class(1, "episode: int", "reward: float")
BREAKING_NEW_VERSION = step_class(2, "reward: float")

EMIT = """
t = snapbus.get_telemetry("lab")
"""


def _emit_v1(bus: Bus) -> None:
    run_producer(bus, V1 + EMIT + "t.snapshot(logging.INFO, Step(1))\nsnapbus.shutdown()\n")


def _stderr_of(bus: Bus, code: str, env: Dict[str, str] | None = None) -> str:
    prelude = "import snapbus, sys\nassert snapbus.wait_for_bus(30), 'no bus'\n"
    out = bus.spawn_py(prelude + code, env=env).wait()
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def _refusal(bus: Bus, layout: str, args: str) -> str:
    """Version 1 emitted by one process; then `Step(args)` of `layout` by another, which must
    be refused at its first emit and write nothing: the refusal's text."""
    _emit_v1(bus)
    tail = f"""
try:
    t.snapshot(logging.INFO, Step({args}))
except TypeError as e:
    print("REFUSED:", e)
print("WRITTEN", snapbus.stats()["written"])
"""
    out = _stderr_of(bus, V1 + layout + EMIT + tail)
    assert "REFUSED:" in out and "WRITTEN 0" in out, out
    return out.split("REFUSED:", 1)[1]


def test_a_dataclass_changed_without_a_new_version_is_refused_at_its_first_emit(
    bus: Bus,
) -> None:
    refusal = _refusal(bus, CHANGED_SAME_VERSION, "1, 0.5")
    assert '"test.evo" version 1' in refusal, refusal
    assert "episode" in refusal and "reward" in refusal, refusal  # both layouts
    assert "schema_version" in refusal, refusal  # the rule


def test_with_bad_values_count_a_conflict_is_warned_once_and_counted(bus: Bus) -> None:
    _emit_v1(bus)
    out = _stderr_of(
        bus,
        V1
        + CHANGED_SAME_VERSION
        + EMIT
        + """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for i in range(5):
        t.snapshot(logging.INFO, Step(i, 0.5))
print("WARNINGS", len(caught), caught[0].message if caught else None)
s = snapbus.stats()
print("COUNTED", s["data_errors"], "WRITTEN", s["written"])
""",
        env={"SNAPBUS_BAD_VALUES": "count"},
    )
    assert "WARNINGS 1 " in out and "test.evo" in out, out
    assert "COUNTED 5 WRITTEN 0" in out, out


def test_a_breaking_new_version_is_refused_at_its_first_emit(bus: Bus) -> None:
    refusal = _refusal(bus, BREAKING_NEW_VERSION, "0.5")
    assert "does not evolve from version 1" in refusal, refusal
    assert "since" in refusal, refusal


DICT = """
import logging
t = snapbus.get_telemetry("lab")
t.snapshot(logging.INFO, {"kind": "test.shapes", "episode": 1, **{EXTRAS}})
snapbus.shutdown()
"""


PYDANTIC = (
    TESTS_ON_PATH
    + """
import logging
from pyd_events import Step
t = snapbus.get_telemetry("lab")
t.snapshot(logging.INFO, Step(episode=1, **{EXTRAS}))
snapbus.shutdown()
"""
)


@pytest.mark.parametrize("kind", ["dict", "pydantic"])
def test_shapes_of_one_event_are_no_conflict(bus: Bus, kind: str) -> None:
    """A dict event or a pydantic model has a descriptor per set of extras: two producers
    emitting two shapes of one event are not a CONFLICT, in the producer or in `ls`."""
    if kind == "pydantic":
        pytest.importorskip("pydantic")
    code, schema_id = (DICT, "test.shapes") if kind == "dict" else (PYDANTIC, "Step")
    run_producer(bus, code.replace("{EXTRAS}", "{'loss': 0.5}"))
    run_producer(bus, code.replace("{EXTRAS}", "{'accuracy': 0.9, 'n': 3}"))
    schemas = [s for s in bus.ls()["schemas"] if s["id"] == schema_id]  # type: ignore[index,union-attr]
    assert len(schemas) == 2, schemas
    assert not any(s["conflict"] for s in schemas), schemas
    assert "CONFLICT" not in bus.cli("ls").stdout


@dataclass
class StepV2:
    schema_id: ClassVar[str] = "test.evo"
    schema_version: ClassVar[int] = 2
    episode: int
    reward: float


def test_a_record_that_does_not_fit_the_class_is_named_not_a_crash(bus: Bus) -> None:
    _emit_v1(bus)
    (ev,) = echo_oldest(bus, 1, "test.evo")
    assert ev["payload"] == {"episode": 1}
    with snapbus.subscribe("test.evo", bus=bus.name, start="oldest") as sub:
        got = sub.get(timeout=30)
        with pytest.raises(TypeError) as e:
            got.as_(StepV2)
    msg = str(e.value)
    assert '"test.evo" version 1' in msg and "'reward'" in msg and "StepV2" in msg, msg

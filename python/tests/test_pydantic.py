"""Pydantic v2 models as events: declared fields from their annotations, extras as dynamic
fields after them, the schema id / version / prefix rules, several shapes of one id all
delivered, and bad extra values raising with their path. pydantic is required under CI."""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest
from conftest import TESTS_ON_PATH, Bus, run_producer
from dyn_values import fields

import snapbus

try:
    import pydantic  # noqa: F401
except ImportError:  # pragma: no cover
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("pydantic is not installed", allow_module_level=True)

from pyd_events import Fixed, Plain, Step

PRODUCE = TESTS_ON_PATH + textwrap.dedent(
    """
    import numpy as np
    from dyn_values import Counter, Mode
    from pyd_events import Fixed, Inner, Plain, Step
    t = snapbus.get_telemetry("lab.pydantic")
    for i in range(2):
        t.snapshot(snapbus.INFO, Step(kind="GlobalMatchingStep", episode=i, matching_steps=3 + i,
                                      model=dict(is_done=True, steps=[1, 2]), ratio=0.5,
                                      count=Counter(step=77, mode=Mode.EVAL), done=False,
                                      name="ep", obs=np.arange(4, dtype=np.float32),
                                      inner=Inner(a=2, b="x")))
        t.snapshot(snapbus.INFO, Step(kind="GlobalMatchingStep", episode=i, other=1.5))
    t.snapshot(snapbus.INFO, Step(episode=9, matching_steps=1))
    image = np.ones((2, 2), np.uint8)
    t.snapshot(snapbus.INFO, Fixed(stats={"a": [1, None]}, tags=["t"], image=image, extra=1))
    t.snapshot(snapbus.INFO, Plain())
    t.snapshot(snapbus.INFO, Step(kind="GlobalMatchingStep", x=1), schema_prefix="monty.")
    assert snapbus.stats()["written"] == 8, snapbus.stats()
    """
)


def test_pydantic_events_reach_a_subscriber_with_declared_and_extra_fields(bus: Bus) -> None:
    with snapbus.subscribe("*", start="oldest", bus=bus.name) as sub:
        run_producer(bus, PRODUCE)
        events = [sub.get(timeout=30) for _ in range(8)]
        assert sub.lost == 0
    ids = [(ev.schema.id, ev.schema.version) for ev in events]
    assert ids == [
        ("GlobalMatchingStep", 3),
        ("GlobalMatchingStep", 3),
        ("GlobalMatchingStep", 3),
        ("GlobalMatchingStep", 3),
        ("Step", 3),  # `kind` defaults to the class name
        ("lab.fixed", 2),  # schema_id / schema_version ClassVars first
        ("Plain", 1),  # no kind, no version: the class name, 1
        ("monty.GlobalMatchingStep", 3),  # the prefix goes before the id
    ]
    first = fields(events[0].payload)
    assert list(first) == [
        "kind",
        "episode",
        "matching_steps",
        "model",
        "ratio",
        "count",
        "done",
        "name",
        "obs",
        "inner",
    ]  # declared, then extras in order
    assert first["kind"] == "GlobalMatchingStep" and first["episode"] == 0
    assert first["matching_steps"] == 3 and first["ratio"] == 0.5 and first["done"] is False
    assert first["model"] == {"is_done": True, "steps": [1, 2]} and first["name"] == "ep"
    assert first["count"] == {"step": 77, "mode": "eval"}  # a dataclass with an Enum
    assert first["inner"] == {"a": 2, "b": "x"}  # a model: declared fields and extras
    assert first["obs"].dtype == np.float32 and list(first["obs"]) == [0, 1, 2, 3]
    third = fields(events[2].payload)
    assert (third["episode"], third["matching_steps"]) == (1, 4)
    assert fields(events[1].payload) == {"kind": "GlobalMatchingStep", "episode": 0, "other": 1.5}
    # Two shapes of one id: both delivered, each with its own descriptor and fingerprint.
    assert events[0].schema.fingerprint == events[2].schema.fingerprint
    assert events[0].schema.fingerprint != events[1].schema.fingerprint
    fixed = fields(events[5].payload)
    assert fixed["kind"] == "ignored" and fixed["stats"] == {"a": [1, None]}
    assert fixed["tags"] == ["t"] and fixed["maybe"] is None and fixed["extra"] == 1
    assert fixed["image"].dtype == np.uint8 and fixed["image"].shape == (2, 2)
    assert fields(events[6].payload) == {"x": 1}


def test_declared_fields_map_by_annotation() -> None:
    root = snapbus.schema.plan_of(Fixed, "lab.fixed", ["extra"])["schema"]["root"]
    types = {f["name"]: f["type"] for f in root["fields"]}  # type: ignore[typeddict-item]
    assert types == {
        "kind": {"type": "string"},
        "ratio": {"type": "f32"},
        "stats": {"type": "dynamic"},
        "tags": {"type": "seq", "elem": {"type": "string"}},
        "maybe": {"type": "option", "some": {"type": "i64"}},
        "image": {"type": "option", "some": {"type": "tensor", "dtype": "u8"}},
        "extra": {"type": "dynamic"},
    }
    assert snapbus.schema.is_event(Plain()) and snapbus.schema.is_event(Step(a=1))


def test_bad_extra_values_raise_with_their_path() -> None:
    t = snapbus.get_telemetry("test.pydantic.bad")
    bad = Step(model={"count": [1, 2, object()]})
    for _ in range(2):
        with pytest.raises(TypeError, match=r"Step\.model\.count\[2\]: a value of type object"):
            t.snapshot(snapbus.INFO, bad)
    with pytest.raises(TypeError, match=r"Fixed\.stats\.k: a value of type complex"):
        t.snapshot(snapbus.INFO, Fixed(stats={"k": 1j}))
    with pytest.raises(ValueError, match=r"Fixed\.image: .*format"):
        t.snapshot(snapbus.INFO, Fixed(image=np.zeros(2, np.complex64)))


def test_snapbus_never_imports_pydantic(bus: Bus) -> None:
    code = textwrap.dedent(
        """
        t = snapbus.get_telemetry("lab.nopydantic")
        t.snapshot(snapbus.INFO, {"kind": "dyn.nopyd", "a": {"b": 1}})
        assert "pydantic" not in sys.modules
        """
    )
    run_producer(bus, code)

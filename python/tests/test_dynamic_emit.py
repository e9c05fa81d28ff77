"""Dynamic values from a Python producer: every kind of value a `dict`/`Any` field, a `dict`
event's entry (and a pydantic extra: test_pydantic) takes, read back by a Python subscriber
and by `snapbus echo`; the numpy casts a typed field accepts; bad values raising with their
field path by default, and counted under `bad_values="count"`."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import Any, ClassVar, Dict, List

import numpy as np
import pytest
from conftest import TESTS_ON_PATH, Bus, echo_oldest, run_producer
from dyn_values import Counter, Mode, WithDynamic, expected, fields, values
from numpy.typing import NDArray

import snapbus


def same(got: Any, want: Any, path: str) -> None:
    """Deep equality: arrays by dtype, shape and values; other values by type and value."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{path}: {got!r}"
        assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{path}: {got!r}"
        assert np.array_equal(got, want), f"{path}: {got!r}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{path}: {got!r}"
        for k in want:
            same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{path}[{i}]")
    else:
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"


PRODUCE = TESTS_ON_PATH + textwrap.dedent(
    """
    from dyn_values import WithDynamic, values
    t = snapbus.get_telemetry("lab.dynamic")
    event = {"kind": "dyn.all"}
    event.update((name, sent) for name, sent, _ in values())
    t.snapshot(snapbus.INFO, event)
    for name, sent, _ in values():
        t.snapshot(snapbus.INFO, WithDynamic(1, {name: sent}, {"k": [sent]}, sent))
    s = snapbus.stats()
    assert s["written"] == 1 + len(values()), s
    """
)


def test_every_dynamic_kind_round_trips_to_a_subscriber(bus: Bus) -> None:
    n = 1 + len(values())
    with snapbus.subscribe("dyn.*", start="oldest", bus=bus.name) as sub:
        run_producer(bus, PRODUCE)
        events = [sub.get(timeout=30) for _ in range(n)]
    assert events[0].schema.id == "dyn.all" and events[0].schema.version == 1
    got = fields(events[0].payload)
    assert list(got) == [name for name, _, _ in values()]  # "kind" is the id, not a field
    for name, sent, received in values():
        same(got[name], expected(name, sent, received), name)
    for ev, (name, sent, received) in zip(events[1:], values()):
        assert ev.schema.id == "dyn.fields"
        want = expected(name, sent, received)
        row = fields(ev.payload)
        assert row["step"] == 1
        same(row["stats"], {name: want}, f"stats.{name}")
        same(row["info"], {"k": [want]}, f"info.{name}")
        same(row["anything"], want, f"anything.{name}")
    # One descriptor for the dataclass, whatever its dynamic fields held.
    assert len({ev.schema.fingerprint for ev in events[1:]}) == 1


def test_echo_shows_dynamic_values_as_json(bus: Bus) -> None:
    code = TESTS_ON_PATH + textwrap.dedent(
        """
        import numpy as np
        from dyn_values import Counter, Mode
        t = snapbus.get_telemetry("lab.echo")
        t.snapshot(snapbus.INFO, {"kind": "dyn.echo", "count": Counter(3, Mode.EVAL),
                                  "xs": np.arange(3, dtype=np.int32), "m": {"a": None}})
        """
    )
    run_producer(bus, code)
    ev = echo_oldest(bus, 1, "dyn.echo")[0]
    assert ev["payload"] == {
        "count": {"step": 3, "mode": "eval"},
        "xs": {"dtype": "i32", "shape": [3], "data": [0, 1, 2]},
        "m": {"a": None},
    }


def test_dict_events_of_one_kind_with_different_keys_are_both_delivered(bus: Bus) -> None:
    code = textwrap.dedent(
        """
        t = snapbus.get_telemetry("lab.shapes")
        for i in range(3):
            t.snapshot(snapbus.INFO, {"kind": "dyn.shape", "a": i})
            t.snapshot(snapbus.INFO, {"kind": "dyn.shape", "a": i, "b": "x"})
            t.snapshot(snapbus.INFO, {"b": "y", "kind": "dyn.shape", "a": i})
        t.snapshot(snapbus.INFO, {"kind": "dyn.shape", "a": 9}, schema_prefix="monty.")
        assert snapbus.stats()["written"] == 10
        """
    )
    with snapbus.subscribe("*dyn.shape", start="oldest", bus=bus.name) as sub:
        run_producer(bus, code)
        events = [sub.get(timeout=30) for _ in range(10)]
        assert sub.lost == 0
    got = [(ev.schema.id, fields(ev.payload)) for ev in events]
    want = []
    for i in range(3):
        want += [{"a": i}, {"a": i, "b": "x"}, {"b": "y", "a": i}]
    assert got == [("dyn.shape", w) for w in want] + [("monty.dyn.shape", {"a": 9})]
    prints = {ev.schema.fingerprint for ev in events[:9]}
    assert len(prints) == 3  # three shapes: three descriptors of one id


@dataclasses.dataclass
class Typed:
    schema_id: ClassVar[str] = "dyn.typed"
    schema_version: ClassVar[int] = 1
    image: NDArray[np.float32]
    ids: List[snapbus.i64]
    wide: NDArray[np.int64]
    ratio: snapbus.f32
    mean: float


def test_numpy_same_kind_casts_are_cast(bus: Bus) -> None:
    code = TESTS_ON_PATH + textwrap.dedent(
        """
        import numpy as np
        from test_dynamic_emit import Typed
        t = snapbus.get_telemetry("lab.casts")
        t.snapshot(snapbus.INFO, Typed(
            image=np.arange(6, dtype=np.float64).reshape(2, 3) / 4,   # float64 for f32
            ids=np.arange(3, dtype=np.int32),                          # int32 for i64
            wide=np.arange(4, dtype=np.uint8)[::2],                    # strided uint8 for i64
            ratio=0.1,                                                 # a Python float: f32
            mean=3,                                                    # an int for a float
        ))
        assert snapbus.stats()["written"] == 1, snapbus.stats()
        """
    )
    with snapbus.subscribe("dyn.typed", start="oldest", bus=bus.name) as sub:
        run_producer(bus, code)
        ev = sub.get(timeout=30)
    got = ev.as_(Typed)
    same(got.image, (np.arange(6, dtype=np.float64).reshape(2, 3) / 4).astype(np.float32), "i")
    assert got.ids == [0, 1, 2] and got.mean == 3.0 and got.ratio == np.float32(0.1)
    same(got.wide, np.array([0, 2], dtype=np.int64), "wide")


def bad_cases() -> List[Any]:
    return [
        ({"kind": "x", "a": {"b": [1, 2, object()]}}, TypeError, "a.b[2]: a value of type object"),
        ({"kind": "x", "a": {1: 2}}, TypeError, "a: a dict key 1 is not a str"),
        ({"kind": "x", "big": 2**64}, TypeError, "big: 18446744073709551616 does not fit 64"),
        ({"kind": "x", "c": [{"z": 1j}]}, TypeError, "c[0].z: a value of type complex"),
        ({"kind": "x", "h": np.zeros(2, np.float16)}, ValueError, 'h: an array of format "e"'),
    ]


@pytest.mark.parametrize(("event", "exc", "text"), bad_cases())
def test_bad_dynamic_values_raise_naming_the_field_path(event: Any, exc: type, text: str) -> None:
    t = snapbus.get_telemetry("test.dynamic.bad")
    for _ in range(2):  # on every call, not only the first
        with pytest.raises(exc) as info:
            t.snapshot(snapbus.INFO, event)
        assert f"dict.{text}" in str(info.value), str(info.value)


def test_events_that_cannot_be_events_are_refused() -> None:
    t = snapbus.get_telemetry("test.dynamic.refused")
    with pytest.raises(TypeError, match=r'needs a "kind" key'):
        t.snapshot(snapbus.INFO, {"a": 1})
    with pytest.raises(TypeError, match=r'"kind" is its schema id, a str, not 3'):
        t.snapshot(snapbus.INFO, {"kind": 3})
    with pytest.raises(TypeError, match=r"keys are field names \(str\), not 1"):
        t.snapshot(snapbus.INFO, {"kind": "k", 1: 2})
    assert snapbus.schema.is_event({"kind": "k"}) and not snapbus.schema.is_event({"k": 1})
    assert snapbus.schema.is_event(WithDynamic(1, {}, {}, None))
    assert not snapbus.schema.is_event(Counter(1, Mode.EVAL))


COUNTED = textwrap.dedent(
    """
    import json, warnings
    warnings.simplefilter("always")
    t = snapbus.get_telemetry("lab.counted")
    with warnings.catch_warnings(record=True) as caught:
        for i in range(3):
            t.snapshot(snapbus.INFO, {"kind": "dyn.counted", "a": [i, object()]})
        t.snapshot(snapbus.INFO, {"kind": "dyn.counted", "a": [1, 2]})
    print(json.dumps({"warnings": [str(w.message) for w in caught], "stats": snapbus.stats()}))
    """
)


@pytest.mark.parametrize(
    ("init", "env"),
    [
        ("", {"SNAPBUS_BAD_VALUES": "count"}),
        ("snapbus.init(bad_values='count')", {}),
        ("", {"SNAPBUS_STRICT": "0"}),
    ],
)
def test_the_count_switch_counts_bad_values_and_warns_once(
    bus: Bus, init: str, env: Dict[str, str]
) -> None:
    prelude = f"import snapbus\n{init}\nassert snapbus.wait_for_bus(30)\n"
    out = bus.spawn_py(prelude + COUNTED, env=env).wait()
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert len(got["warnings"]) == 1, got["warnings"]
    assert "field `a[1]`: a value of type object" in got["warnings"][0]
    assert (got["stats"]["data_errors"], got["stats"]["written"]) == (3, 1), got["stats"]


def test_bad_values_raise_in_a_producer_by_default(bus: Bus) -> None:
    code = textwrap.dedent(
        """
        t = snapbus.get_telemetry("lab.raises")
        try:
            t.snapshot(snapbus.INFO, {"kind": "dyn.raises", "a": [object()]})
        except TypeError as e:
            print(e)
        """
    )
    out = run_producer(bus, code, env={"SNAPBUS_STRICT": ""})
    assert "dict.a[0]: a value of type object" in out.stdout

"""Events: header fields, the payload's record classes, read-only tensor views that outlive the
subscription, `as_` into the user's dataclass (defaults, Enum and Literal fields)."""

from __future__ import annotations

import dataclasses
import enum
import gc
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from typing import Any, List, Literal, Optional

import numpy as np
import pytest
from conftest import DEMO_STEP_FIELDS, Bus, demo_step_expected

import snapbus


def _demo_events(bus: Bus, schema: str = "demo.*") -> list[snapbus.Event]:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "4", "--steps", "2")
    with snapbus.subscribe(schema, start="oldest", cut=True, until_end=True, bus=bus.name) as s:
        return list(s)


class Mode(enum.Enum):
    Train = 0
    Eval = 1


@dataclass
class Step:
    episode: int
    step: int
    mode: Mode
    reward: float
    position: List[float]
    observation: Any
    note: str = "absent in the record"
    tags: List[str] = field(default_factory=list)


@dataclass
class StepLiteral:
    episode: int
    mode: Literal["Train", "Eval"]
    extra: Optional[int] = None


def test_payload_is_a_record_per_schema_with_lazy_cached_decode(bus: Bus) -> None:
    evs = _demo_events(bus)
    steps = [e for e in evs if e.schema.id == "demo.step"]
    p0, p1 = steps[0].payload, steps[1].payload
    assert type(p0) is type(p1) and dataclasses.is_dataclass(p0)
    assert type(p0).__name__ == "demo_step"
    assert steps[0].payload is p0  # cached
    assert [f.name for f in dataclasses.fields(p0)] == steps[0].schema.fields
    assert steps[0].schema.fields == DEMO_STEP_FIELDS
    assert isinstance(steps[0].data, bytes) and len(steps[0].data) > 48
    assert steps[0].schema.fingerprint == steps[1].schema.fingerprint
    assert steps[0].schema is steps[1].schema
    assert "demo.step" in repr(steps[0]) and "demo_step(" in repr(p0)


def test_threads_reading_one_payload_at_once_get_one_object(bus: Bus) -> None:
    # Decoding runs Python code (the record class), so threads interleave inside it; whichever
    # stores its record first, every access returns that one.
    evs = [e for e in _demo_events(bus) if e.schema.id == "demo.step"]
    start = threading.Barrier(4)
    seen: list[list[object]] = [[] for _ in range(4)]

    def read(k: int) -> None:
        start.wait()
        seen[k] = [e.payload for e in evs]

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads inside the decoding, not between events
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
            assert not t.is_alive()
    finally:
        sys.setswitchinterval(interval)
    assert evs and len(seen[0]) == len(evs)
    for k in range(1, 4):
        assert all(a is b for a, b in zip(seen[0], seen[k])) and len(seen[k]) == len(evs)
    assert all(e.payload is p for e, p in zip(evs, seen[0]))


def test_tensors_are_read_only_views_that_outlive_the_subscription(bus: Bus) -> None:
    evs = _demo_events(bus, "demo.step")
    obs = evs[3].payload.observation
    data = evs[3].data
    del evs
    gc.collect()
    assert isinstance(obs, np.ndarray) and not obs.flags.writeable
    with pytest.raises(ValueError):
        obs[0, 0] = 1
    assert obs.tolist() == demo_step_expected(1, 1)["observation"]
    base = obs
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert base is data  # a view over the event's own bytes, kept alive by it


def test_as_decodes_into_the_users_dataclass(bus: Bus) -> None:
    evs = [e for e in _demo_events(bus) if e.schema.id == "demo.step"]
    s = evs[-1].as_(Step)
    assert isinstance(s, Step)
    assert (s.episode, s.step, s.mode) == (3, 1, Mode.Eval)
    assert s.reward == pytest.approx(demo_step_expected(3, 1)["reward"])  # type: ignore[arg-type]
    assert s.position == demo_step_expected(3, 1)["position"]
    assert s.note == "absent in the record" and s.tags == []
    lit = evs[0].as_(StepLiteral)
    assert (lit.episode, lit.mode, lit.extra) == (0, "Train", None)
    with pytest.raises(TypeError, match="dataclass"):
        evs[0].as_(dict)  # type: ignore[arg-type]


@dataclass
class Reordered:
    step: int
    episode: int


@dataclass
class One:
    episode: int


@dataclass
class WithInitVar:
    episode: int
    scale: dataclasses.InitVar[int] = 10
    scaled: int = field(init=False, default=0)

    def __post_init__(self, scale: int) -> None:
        self.scaled = self.episode * scale


@dataclass(init=False)
class OwnInit:
    episode: int
    step: int

    def __init__(self, step: int, episode: int) -> None:  # not the fields' order
        self.episode, self.step = episode, step


if sys.version_info >= (3, 10):

    @dataclass(kw_only=True)
    class KwOnly:
        step: int
        episode: int


def test_as_passes_fields_by_name_whatever_the_classs_shape(bus: Bus) -> None:
    # `as_` passes fields by position where the class's __init__ takes exactly its fields in
    # order, and by name otherwise: every shape gets each value under its own name.
    ev = [e for e in _demo_events(bus) if e.schema.id == "demo.step"][-1]
    for _ in range(2):  # the first call picks the form, the second uses it
        assert ev.as_(Reordered) == Reordered(step=1, episode=3)
        assert ev.as_(One) == One(episode=3)
        w = ev.as_(WithInitVar)
        assert (w.episode, w.scaled) == (3, 30)
        o = ev.as_(OwnInit)
        assert (o.episode, o.step) == (3, 1)
        if sys.version_info >= (3, 10):
            assert ev.as_(KwOnly) == KwOnly(step=1, episode=3)


def test_events_are_frozen(bus: Bus) -> None:
    ev = _demo_events(bus)[0]
    with pytest.raises(AttributeError):
        ev.seq = 3  # type: ignore[misc]


def test_without_numpy_tensors_are_read_only_memoryviews(bus: Bus) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "2", "--steps", "2")
    child = bus.spawn_py(
        textwrap.dedent("""
        import sys
        sys.modules["numpy"] = None  # import numpy raises ImportError
        import snapbus
        with snapbus.subscribe("demo.step", start="oldest", cut=True, until_end=True) as sub:
            ev = list(sub)[3]
        obs = ev.payload.observation
        assert isinstance(obs, memoryview) and obs.readonly, obs
        print(obs.shape, obs.tolist() if hasattr(obs, "tolist") else None)
        print("numpy" in sys.modules and sys.modules["numpy"] is not None)
    """)
    )
    res = child.wait()
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"(6, 8) {demo_step_expected(1, 1)['observation']}"
    assert lines[1] == "False"

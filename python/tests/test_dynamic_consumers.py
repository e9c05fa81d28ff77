"""Dynamic values (a field typed `Dict[str, Any]`, filled with every kind a dynamic value
holds) emitted by a Python producer in its own process, seen as the values they were by every
reader: `snapbus echo` (JSON), a Python subscription, a snapshot file read back, and its
Parquet export (a JSON text column)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pyarrow.parquet as pq
from conftest import Bus, echo_oldest, run_producer

import snapbus

N = 3

PRODUCE = f"""
import dataclasses, enum
from typing import Any, ClassVar, Dict
import numpy as np

class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"

@dataclasses.dataclass
class Count:
    step: int
    mode: Mode

@dataclasses.dataclass
class Event:
    schema_id: ClassVar[str] = "dyn.event"
    schema_version: ClassVar[int] = 1
    i: int
    extra: Dict[str, Any]
    anything: Any

t = snapbus.get_telemetry("lab.dynamic")
for i in range({N}):
    extra = dict(
        none=None, yes=True, int=-7 - i, big=2**63 + i, x=0.25 * i, text="cup", raw=b"\\x00\\xff",
        mode=Mode.EVAL, count=Count(step=77 + i, mode=Mode.TRAIN),
        model=dict(is_done=i % 2 == 0, stats=dict(steps=[1, 2, i])),
        mixed=[1, "two", None], pair=(1, 2.5),
        image=np.arange(6, dtype=np.uint8).reshape(2, 3) + i,
        f32=np.float32(1.5), i64=np.int64(3), flag=np.bool_(True),
    )
    # The same field holds another shape in every record.
    anything = [i, "x"] if i % 2 else dict(k=float(i))
    t.snapshot(snapbus.INFO, Event(i=i, extra=extra, anything=anything))
s = snapbus.stats()
assert s["written"] == {N}, s
"""


def expected_json(i: int) -> Dict[str, Any]:
    """What the JSON readers show of record `i` (arrays as dtype, shape and data)."""
    return {
        "i": i,
        "extra": {
            "none": None,
            "yes": True,
            "int": -7 - i,
            "big": 2**63 + i,
            "x": 0.25 * i,
            "text": "cup",
            "raw": [0, 255],
            "mode": "eval",
            "count": {"step": 77 + i, "mode": "train"},
            "model": {"is_done": i % 2 == 0, "stats": {"steps": [1, 2, i]}},
            "mixed": [1, "two", None],
            "pair": [1, 2.5],
            "image": {"dtype": "u8", "shape": [2, 3], "data": [k + i for k in range(6)]},
            "f32": 1.5,
            "i64": 3,
            "flag": True,
        },
        "anything": [i, "x"] if i % 2 else {"k": float(i)},
    }


DTYPES = {"u8": np.uint8, "f32": np.float32, "f64": np.float64}


def assert_python(got: Any, want: Any, path: str) -> None:
    """A decoded value against its JSON form: arrays are read-only numpy arrays, bytes are
    bytes, the rest plain Python values."""
    if isinstance(want, dict) and set(want) == {"dtype", "shape", "data"}:
        assert isinstance(got, np.ndarray), f"{path}: {got!r}"
        assert got.dtype == DTYPES[want["dtype"]], f"{path}: {got.dtype}"
        assert list(got.shape) == want["shape"] and got.ravel().tolist() == want["data"], path
    elif path.endswith(".raw"):
        assert got == bytes(want), f"{path}: {got!r}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{path}: {got!r}"
        for k in want:
            assert_python(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r}"
        for k, (g, w) in enumerate(zip(got, want)):
            assert_python(g, w, f"{path}[{k}]")
    else:
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"


def test_every_dynamic_kind_reads_back_as_the_value_it_was(bus: Bus, tmp_path: Path) -> None:
    run_producer(bus, PRODUCE)
    want = [expected_json(i) for i in range(N)]

    # `snapbus echo`: the payload as JSON.
    echoed = echo_oldest(bus, N, "dyn.*")
    assert [e["payload"] for e in echoed] == want

    # A Python subscription: dicts, lists, scalars and read-only arrays.
    with snapbus.subscribe("dyn.*", start="oldest", bus=bus.name, until_end=True) as sub:
        events = list(sub)
    assert len(events) == N
    for i, ev in enumerate(events):
        p = ev.payload
        assert p.i == i
        assert_python(p.extra, want[i]["extra"], "extra")
        assert_python(p.anything, want[i]["anything"], "anything")
        assert not p.extra["image"].flags.writeable

    # A snapshot file, read back, and its Parquet export.
    snap = tmp_path / "dyn.mcap"
    bus.cli("snapshot", "-o", str(snap))
    with snapbus.open_recording(snap) as rec:
        recorded: List[Any] = [ev.payload for ev in rec if ev.schema.id == "dyn.event"]
    assert len(recorded) == N
    for i, p in enumerate(recorded):
        assert_python(p.extra, want[i]["extra"], "extra")
    out = tmp_path / "parquet"
    bus.cli("export", str(snap), "--format", "parquet", "-o", str(out))
    rows = pq.read_table(out / "dyn.event.parquet").to_pylist()
    assert [row["i"] for row in rows] == list(range(N))
    assert [json.loads(row["extra"]) for row in rows] == [w["extra"] for w in want]
    assert [json.loads(row["anything"]) for row in rows] == [w["anything"] for w in want]

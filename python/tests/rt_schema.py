"""The tests' shared schemas: the dataclasses of the round-trip tests (every row of the mapping
table), imported by the producer children and by the tests themselves, and `event`, the
one-off event classes of the tests and their children."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Literal, Optional, Tuple

import numpy as np
from numpy.typing import NDArray

import snapbus


def event(schema_id: str, name: str = "E", /, **fields: Any) -> Any:
    """A one-off event class, version 1: `event("test.crash", i=int)` is the dataclass `E` (or
    `name`) with `schema_id = "test.crash"`, `schema_version = 1` and the field `i: int`
    (fields in the order given)."""
    return dataclasses.make_dataclass(
        name,
        list(fields.items()),
        namespace={"schema_id": schema_id, "schema_version": 1},
    )


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


@dataclass
class Pose:
    x: float
    y: float


@dataclass
class Row:
    schema_id: ClassVar[str] = "rt.row"
    schema_version: ClassVar[int] = 1

    flag: bool
    count: int
    small: snapbus.u8
    signed: snapbus.i16
    wide: snapbus.u64
    ratio: float
    ratio32: snapbus.f32
    name: str
    blob: bytes
    mode: Mode
    heading: Literal["min", "max", "no", "jump"]
    maybe: Optional[int]
    maybe_not: Optional[str]
    values: List[int]
    pair: Tuple[int, str]
    table: Dict[str, float]
    pose: Pose
    poses: List[Pose]
    patch: NDArray[np.float32]
    image: NDArray[np.uint8]
    grids: Dict[str, NDArray[np.float64]] = field(default_factory=dict)


def row(i: int) -> Row:
    """The i-th row: every field a function of i."""
    return Row(
        flag=i % 2 == 0,
        count=-(10**12) + i,
        small=i % 256,
        signed=-i,
        wide=2**64 - 1 - i,
        ratio=i / 3,
        ratio32=0.5 + i,
        name=f"row-{i}-é",
        blob=bytes([i % 256, 0, 255]),
        mode=Mode.EVAL if i % 2 else Mode.TRAIN,
        heading=("min", "max", "no", "jump")[i % 4],
        maybe=i if i % 3 else None,
        maybe_not=None,
        values=list(range(i % 5)),
        pair=(i, str(i)),
        table={"a": float(i), "b": -1.5},
        pose=Pose(x=float(i), y=-float(i)),
        poses=[Pose(x=1.0, y=2.0)] * (i % 3),
        patch=np.arange(12, dtype=np.float32).reshape(3, 4) + i,
        image=np.full((2, 2, 3), i % 256, dtype=np.uint8),
        grids={"g": np.eye(2) * i},
    )


@dataclass
class Large:
    """Payloads large enough to be streamed into the lane (python/src/producer/plan/write.rs)."""

    schema_id: ClassVar[str] = "rt.large"
    schema_version: ClassVar[int] = 1

    label: str
    image: NDArray[np.float32]
    raw: NDArray[np.uint8]
    blob: bytes
    strided: NDArray[np.float64]
    small: NDArray[np.int16]


def large(i: int) -> Large:
    """Record `i`: an odd-length label (the arrays after it start misaligned), a 256x256 float
    image, 100 003 bytes as u8, 70 001 bytes, every other column of a 40x4000 float64 array."""
    rng = np.random.default_rng(i)
    wide = rng.random((40, 4000))
    return Large(
        label="x" * (2 * i + 1),
        image=rng.random((256, 256), dtype=np.float32),
        raw=rng.integers(0, 256, 100_003, dtype=np.uint8),
        blob=rng.bytes(70_001),
        strided=wide[:, ::2],
        small=np.arange(i, i + 5, dtype=np.int16),
    )


@dataclass
class Sizes:
    """Strings, bytes and sequences on both sides of the binding's staging limits
    (python/src/producer/plan/mod.rs: `str`/`bytes` up to 128 bytes are staged, longer ones
    copied from their objects; 256 staged bytes fit on the stack, more go to the heap)."""

    schema_id: ClassVar[str] = "rt.sizes"
    schema_version: ClassVar[int] = 1

    values: List[float]
    names: List[str]
    blobs: List[bytes]
    buffer: bytes
    counts: Dict[str, int]
    note: Optional[str]
    tail: NDArray[np.int32]


def sizes(i: int) -> Sizes:
    """Record `i`. Record 0 stages under 256 bytes, with three pieces (a 129-byte `bytes`, the
    buffer, the array); record 1 has 40 floats first (the staged bytes move to the heap as the
    list starts); from 2 on, strings of 0 to 400 UTF-8 bytes (127, 128 and 129 among them),
    bytes of 0 to 300, 10 * i dict entries and a long note on even records."""
    if i == 0:
        names = ["", "short"]
        blobs = [b"", bytes(129)]
    else:
        names = ["", "a" * 127, "b" * 128, "c" * 129, "é" * 64, "é" * (100 + i)]
        blobs = [b"", bytes(range(128)), bytes(range(129)), bytes(300 - i)]
    return Sizes(
        values=[k / 7 for k in range(40 * i)],
        names=names,
        blobs=blobs,
        buffer=bytes(bytearray(range(129 + i))),
        counts={f"k{k}": k * i for k in range(10 * i)},
        note=None if i % 2 else "n" * (200 * i + 1),
        tail=np.arange(i, i + 3, dtype=np.int32),
    )

"""Values of every dynamic kind, for a producer (a child process) and the test that reads them
back: what each Python value is sent as, and what a Python subscriber gets for it."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Tuple

import numpy as np


class Mode(enum.Enum):
    EVAL = "eval"
    TRAIN = 2


@dataclass
class Counter:
    step: int
    mode: Mode


class ArrayLike:
    """Not an array, but has `__array__` (as a torch tensor on the CPU)."""

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        return np.arange(4, dtype=np.uint16).reshape(2, 2)


def values() -> List[Tuple[str, Any, Any]]:
    """(name, sent, received): every kind of value a dynamic field takes."""
    strided = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]
    return [
        ("none", None, None),
        ("flag", True, True),
        ("small", -7, -7),
        ("big", 2**63 + 5, 2**63 + 5),
        ("ratio", 0.25, 0.25),
        ("text", "grüße", "grüße"),
        ("long_text", "x" * 300, "x" * 300),
        ("raw", b"\x00\x01", b"\x00\x01"),
        ("buffer", bytearray(b"ab"), b"ab"),
        ("view", memoryview(b"cd"), b"cd"),
        ("mode", Mode.EVAL, "eval"),
        ("int_mode", Mode.TRAIN, 2),
        ("counter", Counter(77, Mode.EVAL), {"step": 77, "mode": "eval"}),
        ("model", {"is_done": True, "n": [1, 2.5, None]}, {"is_done": True, "n": [1, 2.5, None]}),
        ("items", [1, "a", [True]], [1, "a", [True]]),
        ("pair", (1, "b"), [1, "b"]),
        ("array", np.arange(6, dtype=np.float32).reshape(2, 3), None),
        ("strided", strided, np.ascontiguousarray(strided)),
        ("scalar_array", np.array(3.5), np.array(3.5)),
        ("bools", np.array([True, False]), np.array([1, 0], dtype=np.uint8)),
        ("like", ArrayLike(), np.arange(4, dtype=np.uint16).reshape(2, 2)),
        ("np_int", np.int16(-3), -3),
        ("np_uint", np.uint64(2**64 - 1), 2**64 - 1),
        ("np_float", np.float32(0.5), 0.5),
        ("np_bool", np.bool_(True), True),
        ("nested", {"a": {"b": [np.arange(3, dtype=np.int8)]}}, None),
    ]


def fields(payload: Any) -> Dict[str, Any]:
    """A decoded payload's fields by name (a record class, or a dict where its names are not
    identifiers)."""
    if isinstance(payload, dict):
        return payload
    return {f.name: getattr(payload, f.name) for f in dataclasses.fields(payload)}


def expected(name: str, sent: Any, received: Any) -> Any:
    """What a subscriber gets for `sent` (`received`, or `sent` itself where it is None)."""
    return sent if received is None and sent is not None else received


@dataclass
class WithDynamic:
    """A dataclass whose fields are typed only at run time."""

    schema_id: ClassVar[str] = "dyn.fields"
    schema_version: ClassVar[int] = 1
    step: int
    stats: dict  # type: ignore[type-arg]
    info: Dict[str, Any]
    anything: Any

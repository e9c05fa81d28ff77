"""The rerun bridge's mapping: a decoded record's leaves (named as `snapbus.fields` names
fields, with `/` for `.`), how each is shown, and the columns they are buffered in."""

from __future__ import annotations

import dataclasses
from operator import attrgetter, itemgetter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..fields import FieldPlan

SERIES_MAX = FieldPlan.MAX_ELEMENTWISE
"""1-D arrays up to this length are a series per index; longer ones a bar chart."""

_INT_DTYPES = {
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
}
_COLOR_MODELS = {1: "L", 3: "RGB", 4: "RGBA"}


# ---------------------------------------------------------------------------------------------
# Mapping: a plan per (schema, producer), compiled from its first record; rows buffered in
# columns between flushes.
# ---------------------------------------------------------------------------------------------

Path = Tuple[str, ...]
Getter = Callable[[Any], Any]


Guard = Tuple[Getter, Callable[[Any], bool]]


def _leaves(
    value: Any,
    path: Path,
    get: Getter,
    out: List[Tuple[Path, Getter, Any]],
    guards: Optional[List[Guard]] = None,
) -> None:
    """Every leaf of a decoded payload: its field path, how to get it from a payload of the
    same shape, and its value here. `guards`: what a payload must keep for those getters to
    find the same leaves (a map's keys, a list of structs' length)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            sub = _then(get, attrgetter(f.name))
            _leaves(getattr(value, f.name), (*path, f.name), sub, out, guards)
    elif isinstance(value, dict):
        if guards is not None:
            keys = set(value)
            guards.append((get, lambda v: type(v) is dict and v.keys() == keys))
        for k, v in value.items():
            _leaves(v, (*path, str(k)), _then(get, itemgetter(k)), out, guards)
    elif isinstance(value, tuple) or (
        isinstance(value, list) and value and not _is_numeric_list(value)
    ):
        # A tuple's elements by index, as every sink names them (`pair.0`); a list of structs
        # (or strings) too, per record; a list of numbers is one leaf (a series, bars).
        if guards is not None:
            n = len(value)
            guards.append((get, lambda v: len(v) == n))
        for i, v in enumerate(value):
            _leaves(v, (*path, str(i)), _then(get, itemgetter(i)), out, guards)
    else:
        out.append((path, get, value))


def _identity(value: Any) -> Any:
    return value


def _then(first: Getter, second: Getter) -> Getter:
    if first is _identity:
        return second
    return lambda value: second(first(value))


def _is_numeric_list(value: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


class _Column:
    """One entity's buffered rows: the rows of its batch they belong to (None: every row) and
    their values."""

    __slots__ = ("kind", "path", "rows", "shape", "values")

    def __init__(self, path: Path, kind: str, shape: Tuple[int, ...] = ()) -> None:
        self.path = path
        self.kind = kind
        self.shape = shape
        self.rows: Optional[List[int]] = []
        self.values: List[Any] = []


class _Batch:
    """The records of one entity prefix (producer, schema) since the last flush, in columns."""

    __slots__ = ("columns", "prefix", "seqs", "slots", "times")

    def __init__(self, prefix: Path) -> None:
        self.prefix = prefix
        self.times: List[int] = []
        self.seqs: Dict[str, List[int]] = {}
        self.columns: Dict[Tuple[Path, str, Tuple[int, ...]], _Column] = {}
        self.slots: List[Optional[_Column]] = []
        """A planned batch's columns in the order of its plan's getters (None: no column)."""


def _kind(value: Any, np: Any) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """How a leaf is shown: (kind, shape), or None (not shown)."""
    if isinstance(value, (bool, int, float)):
        return ("scalar", ())
    if isinstance(value, str):
        return ("text", ())
    if isinstance(value, (list, tuple)):
        if value and _is_numeric_list(value):
            return ("series" if len(value) <= SERIES_MAX else "bars", ())
        return None
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" or value.size == 0:
            return None
        shape = tuple(int(d) for d in value.shape)
        nd = len(shape)
        if nd == 0:
            return ("scalar", ())
        if nd == 1:
            return ("series" if shape[0] <= SERIES_MAX else "bars", ())
        dtype = "uint8" if value.dtype.kind == "b" else value.dtype.name
        if dtype not in _INT_DTYPES:
            return ("tensor", ())
        if nd == 2:
            return ("depth" if value.dtype.kind == "f" else "image", shape)
        if nd == 3 and shape[2] in _COLOR_MODELS:
            return ("image", shape)
        return ("tensor", ())
    return None


def _unshown_checker(value: Any) -> Callable[[Any], bool]:
    """A fast test that a later value of a leaf that is not shown (None, an empty list, bytes)
    still is not."""
    if value is None:
        return lambda v: v is None
    t = type(value)
    if isinstance(value, (list, tuple)) and not value:
        return lambda v: type(v) is t and not v
    return lambda v: type(v) is t


def _checker(value: Any, kind: str, np: Any) -> Callable[[Any], bool]:
    """A fast test that a later value of the same leaf is shown the same way."""
    if kind == "scalar" and not isinstance(value, np.ndarray):
        scalar_types = (int, float, bool)
        return lambda v: type(v) in scalar_types
    if kind == "text":
        return lambda v: type(v) is str
    if isinstance(value, np.ndarray):
        shape, dtype, ndarray = value.shape, value.dtype, np.ndarray
        return lambda v: type(v) is ndarray and v.shape == shape and v.dtype == dtype
    t, n = type(value), len(value)
    return lambda v: type(v) is t and len(v) == n


EPISODE = "episode"
"""A timeline leaf of this name makes the record's other sequence timelines continue across
episodes ([`Continued`])."""


class Continued:
    """A sequence timeline that may restart each episode (`step` = 0, 1, … in every episode),
    continued across episodes so that they follow one another instead of overlaying: when the
    episode changes and the value would not move past what the timeline already holds, it is
    offset to just past it. A timeline that already counts on across episodes is unchanged.
    Within an episode the values are as recorded (offset by a constant)."""

    __slots__ = ("episode", "offset", "top")

    def __init__(self) -> None:
        self.episode: Any = None
        self.offset = 0
        self.top = -1

    def value(self, episode: Any, v: int) -> int:
        if episode != self.episode:
            self.episode = episode
            if v + self.offset <= self.top:
                self.offset = self.top + 1 - v
        g = v + self.offset
        if g > self.top:
            self.top = g
        return g


class _Plan:
    """Where each leaf of the records of one (schema, producer) goes: a dense batch, each
    record a row of every column. A record that does not fit takes the general path."""

    __slots__ = ("batch", "checks", "columns", "episode", "getters", "prefix", "timelines")

    def __init__(self, prefix: Path) -> None:
        self.prefix = prefix
        self.getters: List[Getter] = []
        self.checks: List[Callable[[Any], bool]] = []
        self.columns: List[Optional[Tuple[Path, str, Tuple[int, ...]]]] = []
        """Per getter: its column, or None (a leaf not shown, a guard)."""
        self.timelines: List[Tuple[str, Getter, Optional[Continued]]] = []
        """Per sequence timeline: its name, its getter and, in records with an episode, how
        it continues across episodes (None for the episode itself)."""
        self.episode: Optional[Getter] = None
        """The getter of the record's `episode` timeline, if it has one."""
        self.batch: Optional[_Batch] = None

    def new_batch(self) -> _Batch:
        batch = _Batch(self.prefix)
        for name, _, _ in self.timelines:
            batch.seqs[name] = []
        for key in self.columns:
            if key is None:
                batch.slots.append(None)
                continue
            col = _Column(*key)
            col.rows = None
            batch.columns[key] = col
            batch.slots.append(col)
        self.batch = batch
        return batch

"""Helpers of the native decoder (python/src/consumer/decode.rs) and of `Event.as_`.

Record classes: one dataclass per struct of a schema, made once with
`dataclasses.make_dataclass` (module `snapbus.records`); a struct whose field names are not
Python identifiers decodes to a dict. Tensors: read-only numpy views over the record's
`bytes` (numpy imported on first use); without numpy, read-only `memoryview`s.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import keyword
import operator
import sys
import typing
from typing import Any, Callable, List, Sequence

_numpy: Any = None
_MEMORYVIEW_FORMATS = {
    "|u1": "B",
    "<u2": "H",
    "<u4": "I",
    "<u8": "Q",
    "|i1": "b",
    "<i2": "h",
    "<i4": "i",
    "<i8": "q",
    "<f4": "f",
    "<f8": "d",
}


def record_class(name: str, fields: Sequence[str]) -> type | None:
    """The record class of a struct, or None (decode to a dict) if a name cannot be a field."""
    names = list(fields)
    if not all(n.isidentifier() and not keyword.iskeyword(n) for n in names):
        return None
    if len(set(names)) != len(names):
        return None
    if not name.isidentifier() or keyword.iskeyword(name):
        name = "record_" + name
    try:
        cls = dataclasses.make_dataclass(name, names, namespace={"__module__": "snapbus.records"})
    except (TypeError, ValueError):
        return None
    return cls


def _load_numpy() -> Any:
    global _numpy
    if _numpy is None:
        try:
            import numpy
        except ImportError:
            _numpy = False
        else:
            _numpy = numpy
    return _numpy


def tensor(data: bytes, dtype: str, count: int, offset: int, shape: tuple[int, ...]) -> Any:
    """A read-only view of `count` elements of `dtype` at `offset` in `data`, of `shape`."""
    np = _load_numpy()
    if np:
        return np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
    size = int(dtype[2:]) if dtype[0] != "|" else 1
    view: Any = memoryview(data)[offset : offset + count * size]
    fmt = _MEMORYVIEW_FORMATS[dtype]
    if 0 in shape or len(shape) == 0:
        return view.cast(fmt)
    return view.cast(fmt, list(shape))


# ---------------------------------------------------------------------------------------------
# Event.as_(cls): a decoded payload converted into the user's dataclass, by field name.
# ---------------------------------------------------------------------------------------------

_Convert = Callable[[Any], Any]
_plans: dict[Any, _Convert] = {}


def _identity(v: Any) -> Any:
    return v


def _type_hints(cls: type, localns: dict[str, Any] | None = None) -> dict[str, Any]:
    if sys.version_info >= (3, 9):
        return typing.get_type_hints(cls, localns=localns, include_extras=False)
    return typing.get_type_hints(cls, localns=localns)  # pragma: no cover (3.8)


def _hints(cls: type) -> dict[str, Any]:
    """The types of the fields of `cls`, resolved (a name that does not resolve raises)."""
    try:
        return _type_hints(cls)
    except TypeError:
        # CPython 3.8's typing refuses an `InitVar` annotation: resolve the fields alone.
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        shadow = type(cls.__name__, (), {"__module__": cls.__module__, "__annotations__": fields})
        return _type_hints(shadow, localns=dict(vars(cls)))


def _converter(tp: Any) -> _Convert:
    """How to turn a generic decoded value into a value of annotation `tp`."""
    if tp in _plans:
        return _plans[tp]
    conv = _make_converter(tp)
    try:
        _plans[tp] = conv
    except TypeError:  # an unhashable annotation
        pass
    return conv


def _make_converter(tp: Any) -> _Convert:
    origin = typing.get_origin(tp) if sys.version_info >= (3, 8) else None
    args = typing.get_args(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_converter(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        enum_cls = tp

        def to_enum(v: Any) -> Any:
            if isinstance(v, str):
                return enum_cls[v]
            return v

        return to_enum
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            conv = _converter(inner[0])

            def to_optional(v: Any) -> Any:
                return None if v is None else conv(v)

            return to_optional
        return _identity
    if origin in (list, List, Sequence) or origin is getattr(typing, "Sequence", None):
        if args:
            conv = _converter(args[0])
            if conv is _identity:
                return _identity
            return lambda v: [conv(x) for x in v] if isinstance(v, list) else v
        return _identity
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            conv = _converter(args[0])
            return lambda v: tuple(conv(x) for x in v)
        convs = [_converter(a) for a in args]
        return lambda v: tuple(c(x) for c, x in zip(convs, v))
    if origin is dict:
        if len(args) == 2:
            kc, vc = _converter(args[0]), _converter(args[1])
            return lambda v: {kc(k): vc(x) for k, x in v.items()}
        return _identity
    origin_name = getattr(origin, "__name__", None) or getattr(origin, "_name", None)
    if origin_name == "Annotated" and args:
        return _converter(args[0])
    return _identity


def _dataclass_converter(cls: type) -> _Convert:
    hints = _hints(cls)
    fields: list[tuple[str, _Convert]] = [
        (f.name, _converter(hints.get(f.name, Any))) for f in dataclasses.fields(cls) if f.init
    ]
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]

    def by_name(v: Any) -> Any:
        if isinstance(v, dict):
            kwargs = {name: conv(v[name]) for name, conv in fields if name in v}
        else:
            kwargs = {name: conv(getattr(v, name)) for name, conv in fields if hasattr(v, name)}
        missing = [name for name in required if name not in kwargs]
        if missing:
            raise MissingFields(cls, missing)
        return cls(**kwargs)

    # Per record class: the positional form where it applies, else by name.
    by_record: dict[type, _Convert] = {}

    def convert(v: Any) -> Any:
        conv = by_record.get(type(v))
        if conv is None:
            conv = by_record[type(v)] = _positional(cls, type(v), fields) or by_name
        return conv(v)

    return convert


def _positional(cls: type, record: type, fields: list[tuple[str, _Convert]]) -> _Convert | None:
    """A converter from instances of `record` that reads the fields in one C call
    (`operator.attrgetter`) and passes them to `cls` by position; None unless the record has
    every init field of `cls` and `cls(...)` takes exactly those, in that order, positionally
    (no keyword-only fields, no `InitVar`, no custom `__init__` of another shape)."""
    if not (isinstance(record, type) and dataclasses.is_dataclass(record)) or not fields:
        return None
    have = {f.name for f in dataclasses.fields(record)}
    names = [name for name, _ in fields]
    if not all(n in have for n in names):
        return None
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return None
    if [p.name for p in params] != names or any(
        p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params
    ):
        return None
    convs = [conv for _, conv in fields]
    if len(names) == 1:
        get_one = operator.attrgetter(names[0])
        only = convs[0]
        return lambda v: cls(only(get_one(v)))
    get = operator.attrgetter(*names)
    if all(c is _identity for c in convs):
        return lambda v: cls(*get(v))
    return lambda v: cls(*[c(x) for c, x in zip(convs, get(v))])


class MissingFields(TypeError):
    """A record lacks fields a dataclass requires (no default): raised by `as_`, which names
    the schema and version of the record."""

    def __init__(self, cls: type, missing: list[str]) -> None:
        self.cls = cls
        self.missing = missing
        super().__init__(self.text(None))

    def text(self, schema: str | None) -> str:
        names = ", ".join(repr(n) for n in self.missing)
        return (
            f"{schema or 'this record'} has no field {names}, which "
            f"{self.cls.__qualname__} requires (it has no default): the record was written "
            "with another layout of the schema; give the field a default, or read this "
            "version into another class"
        )


# The converters `as_` was asked for, by class (dataclasses only: checked once).
_as_plans: dict[type, _Convert] = {}


def as_(cls: type, payload: Any, schema: str | None = None) -> Any:
    """`payload` (a generic decoded record) as an instance of the dataclass `cls`;
    `schema` (e.g. `'lab.step' version 2`) names the record in errors."""
    conv = _as_plans.get(cls)
    if conv is None:
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise TypeError(f"as_() takes a dataclass, not {cls!r}")
        conv = _as_plans[cls] = _converter(cls)
    try:
        return conv(payload)
    except MissingFields as e:
        raise TypeError(e.text(schema)) from None

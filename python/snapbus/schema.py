"""Events are schemas: the walk from an event class's annotations to a snapbus descriptor.

Three kinds of object are events (``is_event``): a dataclass with ``schema_id: ClassVar[str]``
and ``schema_version: ClassVar[int]``; a pydantic v2 model (id: a ``schema_id`` ClassVar, else
the instance's ``kind``, else the class name; version: ``schema_version``, else ``VERSION``,
else 1), whose declared fields are walked like a dataclass's and whose extras are each one
dynamic field after them; and a ``dict`` whose ``"kind"`` is its id, every other key a dynamic
field. The walk runs once per class (a model or dict: once per shape, i.e. per prefix, id and
set of extra names) at its first emit or ``schema_of``, and produces the descriptor in the JSON
form of the Rust ``TypeDesc`` (typed in ``snapbus.core_schema``), which the native module
compiles, once, into a validated ``SchemaDescriptor`` and an encode plan.

==========================================  ===========================================
annotation                                  descriptor
==========================================  ===========================================
``bool``                                    ``bool``
``int`` / ``Annotated[int, snapbus.u32]``   ``i64`` / the sized integer (``snapbus.u8..i64``)
``float`` / ``snapbus.f32``                 ``f64`` / ``f32``
``str`` / ``bytes``                         ``string`` / ``bytes``
``enum.Enum`` subclass, ``Literal["a"..]``  ``enum`` of unit variants (member names / literals)
``Optional[T]``                             ``option``
``list[T]``, ``Sequence[T]``, ``tuple[T, ...]``  ``seq``
``tuple[A, B]``                             ``tuple``
``dict[K, V]``                              ``map``
a nested dataclass                          ``struct`` (inline; recursion is refused)
``NDArray[np.float32]``, ``Tensor[np.uint8]``  ``tensor`` of that dtype
``dict``, ``Dict[str, Any]``, ``Any``,      ``dynamic``: the value encoded by what it is (None,
``object``, a pydantic model                bool, int, float, str, bytes, Enum value, dataclass
                                            or model as a map, dict, list, numpy array/scalar)
==========================================  ===========================================

A bare ``np.ndarray``, other unions and unsupported dtypes are refused with a ``TypeError``
naming the field path. Evolution follows the Rust rules: fields are only appended, with a
default and ``field(metadata={"since": N})``. See ``docs/emitting.md`` ("Events from Python").
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import typing
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Dict,
    Generic,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

from .core_schema import (
    DTypeName,
    DynamicDesc,
    Field,
    ScalarDesc,
    StructDesc,
    TypeDesc,
    Walked,
)

if sys.version_info >= (3, 9):
    from typing import Annotated, Literal, get_args, get_origin, get_type_hints
else:  # pragma: no cover - 3.8
    from typing_extensions import Annotated, Literal, get_args, get_origin, get_type_hints

# typing_extensions redefines Literal on 3.8: a field may be annotated with either.
_LITERALS = (Literal, typing.Literal)

__all__ = [
    "TelemetryEvent",
    "Tensor",
    "event_kind",
    "f32",
    "f64",
    "i8",
    "i16",
    "i32",
    "i64",
    "is_event",
    "schema_of",
    "u8",
    "u16",
    "u32",
    "u64",
]


class _Scalar:
    """The marker inside a sized alias: ``snapbus.u32 == Annotated[int, _Scalar("u32")]``."""

    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind  # "int" or "float"
        self.name = name

    def __repr__(self) -> str:
        return f"snapbus.{self.name}"


u8 = Annotated[int, _Scalar("int", "u8")]
u16 = Annotated[int, _Scalar("int", "u16")]
u32 = Annotated[int, _Scalar("int", "u32")]
u64 = Annotated[int, _Scalar("int", "u64")]
i8 = Annotated[int, _Scalar("int", "i8")]
i16 = Annotated[int, _Scalar("int", "i16")]
i32 = Annotated[int, _Scalar("int", "i32")]
i64 = Annotated[int, _Scalar("int", "i64")]
f32 = Annotated[float, _Scalar("float", "f32")]
f64 = Annotated[float, _Scalar("float", "f64")]

_D = TypeVar("_D")

if TYPE_CHECKING:
    from numpy.typing import NDArray as Tensor
else:

    class Tensor(Generic[_D]):
        """``snapbus.Tensor[np.float32]``: a numpy array field of that dtype (any shape);
        the same as ``numpy.typing.NDArray[np.float32]``."""


class TelemetryEvent:
    """An optional base for events: snapbus duck-types on the ``schema_id`` and
    ``schema_version`` ClassVars, so any dataclass that declares them is an event."""

    schema_id: ClassVar[str]
    schema_version: ClassVar[int]


# numpy dtype.str -> descriptor dtype (native little-endian only).
_DTYPES: Dict[str, DTypeName] = {
    "|u1": "u8",
    "<u2": "u16",
    "<u4": "u32",
    "<u8": "u64",
    "|i1": "i8",
    "<i2": "i16",
    "<i4": "i32",
    "<i8": "i64",
    "<f4": "f32",
    "<f8": "f64",
}

_NONE = type(None)
_SEQ_ORIGINS = {list, List, typing.Sequence, typing.MutableSequence}
try:
    import collections.abc as _abc

    _SEQ_ORIGINS |= {_abc.Sequence, _abc.MutableSequence}
    _MAP_ORIGINS = {dict, Dict, typing.Mapping, _abc.Mapping, _abc.MutableMapping}
except ImportError:  # pragma: no cover
    _MAP_ORIGINS = {dict, Dict}


def _dtype_of(scalar: Any, path: str) -> DTypeName:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy-less environments cannot have dtypes
        raise TypeError(f"field `{path}`: array annotations need numpy") from None
    try:
        dt = np.dtype(scalar)
    except TypeError:
        raise TypeError(
            f"field `{path}`: {scalar!r} is not a numpy dtype (expected e.g. np.float32)"
        ) from None
    name = _DTYPES.get(dt.newbyteorder("<").str if dt.byteorder == "=" else dt.str)
    if name is None:
        raise TypeError(
            f"field `{path}`: dtype {dt} is not supported (supported: uint8..uint64, "
            "int8..int64, float32, float64)"
        )
    return name


def _is_ndarray(tp: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and tp is np.ndarray


def _scalar(name: str) -> ScalarDesc:
    return {"type": name}


_DYNAMIC: DynamicDesc = {"type": "dynamic"}


def _model_base() -> type | None:
    """pydantic's ``BaseModel`` if pydantic was imported (never imported here)."""
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None) if pydantic is not None else None
    return base if isinstance(base, type) else None


def _is_model_class(tp: Any) -> bool:
    base = _model_base()
    return base is not None and isinstance(tp, type) and issubclass(tp, base)


class _Walker:
    """One class's walk: its descriptor, and the enum nodes' Python values in walk order
    (depth-first: what ``python/src/producer/plan/compile.rs`` expects)."""

    def __init__(self) -> None:
        self.stack: list[type] = []
        self.enums: List[Dict[Any, int]] = []

    def enum(self, names: List[str], values: Dict[Any, int]) -> TypeDesc:
        self.enums.append(values)
        return {"type": "enum", "variants": [{"name": n, "kind": "unit"} for n in names]}

    def struct(self, cls: type, path: str) -> StructDesc:
        if cls in self.stack:
            raise TypeError(
                f"field `{path}`: {cls.__qualname__} contains itself (recursive dataclasses "
                "cannot be schemas: descriptors are trees)"
            )
        self.stack.append(cls)
        try:
            hints = get_type_hints(cls, include_extras=True)
        except Exception as e:  # NameError for an unresolvable forward reference, ...
            raise TypeError(f"{cls.__qualname__}: cannot resolve its annotations ({e})") from e
        fields: List[Field] = []
        for f in dataclasses.fields(cls):
            sub = f"{path}.{f.name}" if path else f.name
            since = f.metadata.get("since", 1) if f.metadata else 1
            if not isinstance(since, int) or isinstance(since, bool) or since < 1:
                raise TypeError(f"field `{sub}`: `since` must be an int >= 1, not {since!r}")
            fields.append({"name": f.name, "type": self.node(hints[f.name], sub), "since": since})
        self.stack.pop()
        return {"type": "struct", "fields": fields}

    def model(self, cls: type) -> StructDesc:
        """A pydantic model's declared fields (``model_fields``, with the ``Annotated``
        metadata pydantic keeps apart put back, so ``snapbus.f32`` still sizes a field)."""
        fields: List[Field] = []
        for name, info in cls.model_fields.items():  # type: ignore[attr-defined]
            tp = info.annotation
            if info.metadata:
                params = (tp, *info.metadata)
                tp = Annotated[params]
            fields.append({"name": name, "type": self.node(tp, name), "since": 1})
        return {"type": "struct", "fields": fields}

    def node(self, tp: Any, path: str) -> TypeDesc:
        if isinstance(tp, (str, typing.ForwardRef)):
            raise TypeError(f"field `{path}`: cannot resolve the annotation {tp!r}")
        origin, args = _origin_args(tp)
        alias = _expand_type_alias(tp, origin, args)
        if alias is not None:  # `type X = ...` (3.12+), e.g. numpy 2's NDArray
            return self.node(alias, path)
        if origin is Annotated:
            base, meta = args[0], args[1:]
            for m in meta:
                scalar = _scalar_marker(m)
                if scalar is not None:
                    want = int if scalar.kind == "int" else float
                    if _strip(base) is not want:
                        raise TypeError(
                            f"field `{path}`: {scalar!r} annotates {want.__name__}, not {base!r}"
                        )
                    return _scalar(scalar.name)
            return self.node(base, path)
        if tp is bool:
            return _scalar("bool")
        if tp is int:
            return _scalar("i64")
        if tp is float:
            return _scalar("f64")
        if tp is str:
            return _scalar("string")
        if tp is bytes:
            return _scalar("bytes")
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            members = list(tp)
            if not members:
                raise TypeError(f"field `{path}`: enum {tp.__qualname__} has no members")
            return self.enum([m.name for m in members], {m: i for i, m in enumerate(members)})
        if origin in _LITERALS:
            if not args or not all(isinstance(a, str) for a in args):
                raise TypeError(
                    f"field `{path}`: only Literal of strings maps to an enum, not {tp!r}"
                )
            names = list(dict.fromkeys(args))
            return self.enum(names, {n: i for i, n in enumerate(names)})
        if origin is typing.Union or _is_union_type(tp):
            rest = [a for a in args if a is not _NONE]
            if len(rest) == 1 and len(args) == 2:
                return {"type": "option", "some": self.node(rest[0], path)}
            raise TypeError(
                f"field `{path}`: union {tp!r} is not supported (only Optional[T]; use an "
                "Enum or separate fields)"
            )
        if tp is Any or tp is object or tp is dict or _is_model_class(tp):
            return _DYNAMIC
        if _is_ndarray(tp) or tp is Tensor:
            raise TypeError(
                f"field `{path}`: a bare numpy array has no dtype; annotate "
                "NDArray[np.float32] (numpy.typing) or snapbus.Tensor[np.float32]"
            )
        if origin is Tensor:
            return {"type": "tensor", "dtype": _dtype_of(args[0], path)}
        if origin is not None and _is_ndarray(origin):
            dtype_arg = args[-1] if args else None
            inner = _origin_args(dtype_arg)[1] if dtype_arg is not None else ()
            if not inner or inner[0] is Any or isinstance(inner[0], TypeVar):
                raise TypeError(
                    f"field `{path}`: a numpy array annotation needs a dtype, e.g. "
                    "NDArray[np.float32]"
                )
            return {"type": "tensor", "dtype": _dtype_of(inner[0], path)}
        if origin in _SEQ_ORIGINS:
            if not args:
                raise TypeError(f"field `{path}`: {tp!r} needs an element type, e.g. list[int]")
            return {"type": "seq", "elem": self.node(args[0], f"{path}[]")}
        if origin is tuple or origin is Tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "seq", "elem": self.node(args[0], f"{path}[]")}
            if not args or args == ((),):
                raise TypeError(f"field `{path}`: {tp!r} needs element types")
            return {
                "type": "tuple",
                "elems": [self.node(a, f"{path}.{i}") for i, a in enumerate(args)],
            }
        if origin in _MAP_ORIGINS:
            if not args or (len(args) == 2 and args[0] is str and args[1] in (Any, object)):
                return _DYNAMIC
            if len(args) != 2:
                raise TypeError(f"field `{path}`: {tp!r} needs key and value types")
            key = self.node(args[0], f"{path}{{key}}")
            return {"type": "map", "key": key, "value": self.node(args[1], f"{path}{{}}")}
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return self.struct(tp, path)
        if tp in (list, tuple):
            raise TypeError(f"field `{path}`: bare {tp.__name__} needs element types")
        raise TypeError(f"field `{path}`: annotation {tp!r} has no snapbus mapping")


def _origin_args(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """`get_origin`/`get_args`, also for numpy's own generic alias (numpy < 1.25 on 3.8,
    where `NDArray[np.float32]` is not a `typing` alias)."""
    origin = get_origin(tp)
    if origin is None and not isinstance(tp, type):
        alias_origin = getattr(tp, "__origin__", None)
        alias_args = getattr(tp, "__args__", None)
        if alias_origin is not None and isinstance(alias_args, tuple):
            return alias_origin, alias_args
    return origin, get_args(tp)


def _expand_type_alias(tp: Any, origin: Any, args: tuple[Any, ...]) -> Any:
    """The value of a PEP 695 alias (`type X = ...`, 3.12+), its parameters substituted
    (`NDArray[np.float32]` under numpy >= 2.2 is `ndarray[tuple[Any, ...], dtype[float32]]`);
    `None` for anything else."""
    alias_type = getattr(typing, "TypeAliasType", None)
    if alias_type is None:
        return None
    if isinstance(tp, alias_type):
        return tp.__value__
    if isinstance(origin, alias_type):
        params = origin.__type_params__
        if len(params) != len(args):
            return None
        value = origin.__value__
        try:
            return value[args if len(args) > 1 else args[0]]
        except TypeError:
            return None
    return None


def _strip(tp: Any) -> Any:
    return get_args(tp)[0] if get_origin(tp) is Annotated else tp


def _scalar_marker(m: Any) -> _Scalar | None:
    if isinstance(m, _Scalar):
        return m
    if get_origin(m) is Annotated:  # Annotated[int, snapbus.u32]: the alias as metadata
        for inner in get_args(m)[1:]:
            if isinstance(inner, _Scalar):
                return inner
    return None


def _is_union_type(tp: Any) -> bool:
    ut = getattr(__import__("types"), "UnionType", None)
    return ut is not None and isinstance(tp, ut)


def event_kind(cls: type) -> Tuple[str, Optional[str]]:
    """How instances of ``cls`` are events: ``("dataclass" | "model" | "dict", schema_id
    ClassVar or None)``; ``TypeError`` for a class whose instances are not events.

    Called by the native module once per class."""
    if dataclasses.is_dataclass(cls):
        return "dataclass", _class_id(cls)
    if _is_model_class(cls):
        return "model", _class_id(cls)
    if isinstance(cls, type) and issubclass(cls, dict):
        return "dict", None
    raise TypeError(
        f"{getattr(cls, '__qualname__', cls)!r} is not an event: snapshot events are "
        "dataclasses with schema_id and schema_version ClassVars, pydantic models, or dicts "
        'with a "kind" key'
    )


def _class_id(cls: type) -> Optional[str]:
    sid = getattr(cls, "schema_id", None)
    return sid if isinstance(sid, str) else None


def _version(cls: type) -> int:
    for name in ("schema_version", "VERSION"):
        ver = getattr(cls, name, None)
        if isinstance(ver, int) and not isinstance(ver, bool):
            return ver
    return 1


def is_event(obj: object) -> bool:
    """Whether ``obj`` is an event ``Telemetry.snapshot`` accepts: a dataclass instance with
    ``schema_id``/``schema_version`` ClassVars, a pydantic model, or a ``dict`` with a
    ``str`` ``"kind"``."""
    cls = type(obj)
    if isinstance(obj, dict):
        return isinstance(obj.get("kind"), str)
    if dataclasses.is_dataclass(cls):
        ver = getattr(cls, "schema_version", None)
        return _class_id(cls) is not None and isinstance(ver, int) and not isinstance(ver, bool)
    return _is_model_class(cls)


def plan_of(cls: type, schema_id: Optional[str] = None, extras: Sequence[str] = ()) -> Walked:
    """The descriptor of an event class, with its enums' Python values (see
    ``snapbus.core_schema``); ``TypeError`` naming the field if it is not one.

    A dataclass is walked as it is (``schema_id`` overrides its ClassVar: the prefixed id); a
    pydantic model's declared fields come from its ``model_fields``, then each name in
    ``extras`` is a dynamic field; a ``dict`` event has only the ``extras``. Called by the
    native module once per class (a model or dict: once per shape; its result is compiled and
    cached there)."""
    how, _ = event_kind(cls)
    walker = _Walker()
    if how == "dataclass":
        sid = _class_id(cls)
        ver = getattr(cls, "schema_version", None)
        if sid is None:
            raise TypeError(
                f'{cls.__qualname__} has no `schema_id: ClassVar[str]` (e.g. "lab.step")'
            )
        if not isinstance(ver, int) or isinstance(ver, bool):
            raise TypeError(f"{cls.__qualname__} has no `schema_version: ClassVar[int]` (e.g. 1)")
        root = walker.struct(cls, "")
    else:
        sid = cls.__name__
        ver = _version(cls) if how == "model" else 1
        root = walker.model(cls) if how == "model" else {"type": "struct", "fields": []}
        root["fields"].extend({"name": n, "type": _DYNAMIC, "since": 1} for n in extras)
    if schema_id is not None:
        sid = schema_id
    return {"schema": {"id": sid, "version": ver, "root": root}, "enums": walker.enums}


def _record_fields(cls: type) -> Optional[List[str]]:
    """The declared field names of a dataclass or pydantic model (a dynamic value encodes
    its instances as maps of them), ``None`` for other classes."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    if _is_model_class(cls):
        return list(cls.model_fields)  # type: ignore[attr-defined]
    return None


def _as_c_array(obj: Any) -> Tuple[Any, bool]:
    """``obj`` as a C-contiguous, aligned numpy array of native byte order (bool as uint8),
    and whether it is 0-dimensional (then given as one element, its buffer having no shape):
    the copy a dynamic array value is taken from when its own memory is not one."""
    import numpy as np

    arr = np.asarray(obj)
    if arr.dtype == np.bool_:
        arr = arr.view(np.uint8)
    elif arr.dtype.byteorder not in ("=", "|", "<" if sys.byteorder == "little" else ">"):
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return np.require(arr, requirements=["C", "A"]).reshape(arr.shape or (1,)), arr.ndim == 0


def _cast_array(obj: Any, dtype: str) -> Any:
    """``obj`` cast to ``dtype`` (a numpy name) if numpy casts it under ``same_kind``, C-
    contiguous and aligned; ``None`` if numpy was not imported (or the cast is refused:
    ``TypeError``)."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    arr = np.asarray(obj).astype(dtype, casting="same_kind", copy=False)
    return np.require(arr, requirements=["C", "A"])


def schema_of(cls: type) -> dict[str, Any]:
    """The descriptor of an event class as snapbus publishes it: ``{"id", "version", "root",
    "fingerprint"}`` (``root`` in the JSON form of ``snapbus schemas --json``). Raises
    ``TypeError`` naming the field for a class that cannot be a schema."""
    import json

    from . import _snapbus

    text, fingerprint = _snapbus._schema_json(cls)
    out: dict[str, Any] = json.loads(text)
    out["fingerprint"] = f"{fingerprint:016x}"
    return out

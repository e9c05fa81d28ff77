"""The typed contract between `snapbus.schema` (Python) and the native encoder (Rust).

An event class's annotations (a dataclass's, a pydantic model's) are walked, once per class
(a model or ``dict`` event once per shape: its extras are dynamic fields), into a
:data:`TypeDesc`: plain dicts in exactly the JSON form of the Rust
``snapbus_schemas::TypeDesc`` (serde, internally tagged by ``"type"``), the same form
``snapbus.schema_of(cls)["root"]`` and ``snapbus schemas --json`` show. The native module
deserialises it into a ``TypeDesc`` and builds its encode plan from that, so there is one
definition of the layout, on the Rust side; these TypedDicts only give it names in Python (as
pydantic-core's ``core_schema.py`` does for its validators).

One thing a descriptor cannot hold is which Python values encode as which enum variant (an
``enum.Enum``'s members, a ``Literal``'s strings): :class:`Walked` carries those beside the
descriptor, one dict per enum node, in depth-first order of the descriptor (struct fields,
tuple elements, then a map's key before its value).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Union

if sys.version_info >= (3, 9):
    from typing import Literal, TypedDict
else:  # pragma: no cover - 3.8
    from typing_extensions import Literal, TypedDict

__all__ = [
    "DynamicDesc",
    "EnumDesc",
    "Field",
    "MapDesc",
    "OptionDesc",
    "ScalarDesc",
    "SchemaDesc",
    "SeqDesc",
    "StructDesc",
    "TensorDesc",
    "TupleDesc",
    "TypeDesc",
    "Variant",
    "Walked",
]

DTypeName = Literal["u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f32", "f64"]
"""A numeric element type (``DType`` in Rust), by its lower-case Rust name."""


class ScalarDesc(TypedDict):
    """``bool``, a number (by its :data:`DTypeName`), ``string`` or ``bytes``."""

    type: str


class OptionDesc(TypedDict):
    type: Literal["option"]
    some: TypeDesc


class SeqDesc(TypedDict):
    type: Literal["seq"]
    elem: TypeDesc


class TupleDesc(TypedDict):
    type: Literal["tuple"]
    elems: List[TypeDesc]


class MapDesc(TypedDict):
    type: Literal["map"]
    key: TypeDesc
    value: TypeDesc


class Field(TypedDict):
    """A struct field: ``since`` is the schema version that introduced it (1 at first)."""

    name: str
    type: TypeDesc
    since: int


class StructDesc(TypedDict):
    type: Literal["struct"]
    fields: List[Field]


class Variant(TypedDict):
    """An enum variant; Python schemas only make unit variants."""

    name: str
    kind: Literal["unit"]


class EnumDesc(TypedDict):
    type: Literal["enum"]
    variants: List[Variant]


class TensorDesc(TypedDict):
    type: Literal["tensor"]
    dtype: DTypeName


class DynamicDesc(TypedDict):
    """A value whose type is known only at run time (a ``dict``/``Any`` field, a pydantic
    extra, a ``dict`` event's entry), encoded self-describing by what it is."""

    type: Literal["dynamic"]


TypeDesc = Union[
    ScalarDesc,
    OptionDesc,
    SeqDesc,
    TupleDesc,
    MapDesc,
    StructDesc,
    EnumDesc,
    TensorDesc,
    DynamicDesc,
]
"""One node of a descriptor."""


class SchemaDesc(TypedDict):
    """A schema descriptor: ``SchemaDescriptor``'s JSON less its fingerprint."""

    id: str
    version: int
    root: TypeDesc


class Walked(TypedDict):
    """What ``snapbus.schema.plan_of`` hands the native module: the descriptor, and per enum
    node (depth-first) the Python values that encode as each variant index."""

    schema: SchemaDesc
    enums: List[Dict[Any, int]]

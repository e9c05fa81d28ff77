"""Field names: the one rule every sink names a payload's fields by (``FieldPlan``, from the
Rust ``snapbus_consumers::fields``).

A field's name is its dotted path from the root: struct fields by name (``pose.x``), tuple
elements by index (``pair.0``), an option's value at the option's own path, an enum's variant
name at the enum's path and its payload under the variant (``mode.Jump.height``). The leaves
of that tree (numbers, bools, strings, bytes, enums, sequences, arrays, maps, tensors) are
pandas' columns (``Recording.to_pandas``) and the columns of ``snapbus export`` (Parquet,
CSV). Sinks that split a leaf name its parts below it:

- the metrics sinks (Prometheus, OTLP, the aggregator, the plotter) name a fixed array of up
  to ``FieldPlan.MAX_ELEMENTWISE`` numbers element by element (``position.0``) and reduce
  longer ones, sequences and tensors (``observation.mean``, ``.min``, ``.max``), as
  ``FieldPlan(schema).numeric()`` lists;
- CSV splits the same short arrays (``position.0``) and puts a tensor's shape beside it
  (``observation.shape``, as Parquet);
- the rerun bridge puts the path under ``/<producer>/<schema id>/`` with ``/`` for ``.``, shows
  a list of up to ``MAX_ELEMENTWISE`` numbers as one entity with a series per index (the
  series ``i`` of ``position`` is the metrics' ``position.i``), and also goes into the values
  a descriptor cannot name in advance: a map's entries by key (``table/a``) and a list of
  structs' elements by index (``poses/0/x``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._snapbus import FieldPlan

__all__ = ["FieldPlan", "Leaf", "cell", "columns", "plan_of_schema"]

Leaf = Tuple[str, str, Optional[Tuple[int, ...]]]
"""(dotted path, dtype, shape): see ``FieldPlan.leaves``."""

_plans: Dict[int, Tuple[List[Leaf], List[List[str]]]] = {}


def plan_of_schema(schema: Any) -> Tuple[List[Leaf], List[List[str]]]:
    """The leaves of an event's ``Schema`` and their paths' parts, cached by fingerprint."""
    hit = _plans.get(schema.fingerprint)
    if hit is None:
        plan = FieldPlan(schema)
        hit = _plans[schema.fingerprint] = (plan.leaves(), plan.parts())
    return hit


def cell(value: Any, parts: Sequence[str], dtype: str) -> Any:
    """The leaf at `parts` of a decoded payload (None where an option is none or another enum
    variant is set); an enum leaf (`dtype` ``"enum"``) as its variant's name."""
    for p in parts:
        if value is None or isinstance(value, str):
            return None  # a none option; a unit variant has no payload
        if isinstance(value, dict):
            value = value.get(p)  # a struct decoded to a dict, or an enum's {variant: payload}
        elif isinstance(value, (list, tuple)):
            value = value[int(p)]
        else:
            value = getattr(value, p, None)
    if dtype == "enum" and isinstance(value, dict):
        return next(iter(value), None)
    return value


def columns(payload: Any, schema: Any) -> Dict[str, Any]:
    """A decoded payload as ``{dotted path: leaf}`` (a root that is not a struct: ``payload``)."""
    leaves, parts = plan_of_schema(schema)
    out: Dict[str, Any] = {}
    for (path, dtype, _), at in zip(leaves, parts):
        out[path or "payload"] = cell(payload, at, dtype)
    return out

"""The Python side of one wire-format walk: the typed schema contract (`snapbus.core_schema`:
Python hands Rust a `TypeDesc` in its serde JSON, not tuples) and the one field-naming rule
(`FieldPlan`, from `snapbus_consumers::fields`) that pandas columns and the rerun bridge use."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import pytest
from rt_schema import Mode, Row, event, row

import snapbus
import snapbus.schema as schema_mod
from snapbus._snapbus import FieldPlan
from snapbus.fields import cell, columns


def test_the_walk_hands_rust_the_descriptor_it_publishes() -> None:
    walked = schema_mod.plan_of(Row)
    published = snapbus.schema_of(Row)
    assert walked["schema"]["id"] == published["id"] == "rt.row"
    assert walked["schema"]["version"] == published["version"] == 1
    # The very JSON the native module renders back: one definition of the layout.
    assert walked["schema"]["root"] == published["root"]
    fields = {f["name"]: f["type"] for f in walked["schema"]["root"]["fields"]}
    assert fields["small"] == {"type": "u8"} and fields["count"] == {"type": "i64"}
    assert fields["pair"] == {"type": "tuple", "elems": [{"type": "i64"}, {"type": "string"}]}
    assert fields["patch"] == {"type": "tensor", "dtype": "f32"}
    assert fields["table"] == {"type": "map", "key": {"type": "string"}, "value": {"type": "f64"}}
    # The enums' Python values, in walk order: the Enum's members, then the Literal's strings.
    assert walked["enums"] == [
        {Mode.TRAIN: 0, Mode.EVAL: 1},
        {"min": 0, "max": 1, "no": 2, "jump": 3},
    ]


def test_a_bad_descriptor_from_the_walk_is_a_type_error_naming_the_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = event("test.fields.broken", "Broken", x=int)
    original = schema_mod.plan_of

    def bad(cls: type) -> Any:
        walked = original(cls)
        walked["schema"]["root"]["fields"][0]["type"] = {"type": "i65"}
        return walked

    monkeypatch.setattr(schema_mod, "plan_of", bad)
    with pytest.raises(TypeError, match=r"Broken: snapbus\.schema made a bad descriptor"):
        snapbus.schema_of(broken)


ROW_LEAVES = [
    ("flag", "bool", ()),
    ("count", "i64", ()),
    ("small", "u8", ()),
    ("signed", "i16", ()),
    ("wide", "u64", ()),
    ("ratio", "f64", ()),
    ("ratio32", "f32", ()),
    ("name", "string", ()),
    ("blob", "bytes", ()),
    ("mode", "enum", ()),
    ("heading", "enum", ()),
    ("maybe", "i64", ()),
    ("maybe_not", "string", ()),
    ("values", "i64", None),
    ("pair.0", "i64", ()),
    ("pair.1", "string", ()),
    ("table", "map", None),
    ("pose.x", "f64", ()),
    ("pose.y", "f64", ()),
    ("poses", "seq", None),
    ("patch", "f32", None),
    ("image", "u8", None),
    ("grids", "map", None),
]


def test_field_plan_names_every_leaf_of_a_dataclass_schema() -> None:
    plan = FieldPlan(Row)
    assert plan.leaves() == ROW_LEAVES
    assert plan.parts()[ROW_LEAVES.index(("pose.x", "f64", ()))] == ["pose", "x"]
    # The same plan from the descriptor's JSON, and the metrics sinks' names.
    assert FieldPlan(json.dumps(snapbus.schema_of(Row))).leaves() == ROW_LEAVES
    numeric = plan.numeric()
    assert numeric[:8] == ["flag", "count", "small", "signed", "wide", "ratio", "ratio32", "maybe"]
    assert {"values.mean", "pair.0", "pose.y", "patch.max", "image.min"} <= set(numeric)
    assert not {"mode", "name", "table", "pair.1"} & set(numeric)
    assert FieldPlan.MAX_ELEMENTWISE == 16


# A Rust-made descriptor (Python schemas make neither arrays nor enum payloads): a short array,
# an enum with newtype, tuple and struct variants, a struct field whose name has a dot.
RUST_MADE = {
    "id": "test.rust",
    "version": 1,
    "root": {
        "type": "struct",
        "fields": [
            {
                "name": "position",
                "type": {"type": "array", "len": 3, "elem": {"type": "f32"}},
                "since": 1,
            },
            {
                "name": "mode",
                "since": 1,
                "type": {
                    "type": "enum",
                    "variants": [
                        {"name": "Idle", "kind": "unit"},
                        {"name": "Hop", "kind": "tuple", "elems": [{"type": "u8"}]},
                        {
                            "name": "Pair",
                            "kind": "tuple",
                            "elems": [{"type": "u8"}, {"type": "bool"}],
                        },
                        {
                            "name": "Jump",
                            "kind": "struct",
                            "fields": [{"name": "height", "type": {"type": "f64"}, "since": 1}],
                        },
                    ],
                },
            },
            {"name": "a.b", "type": {"type": "u16"}, "since": 1},
        ],
    },
}


def test_field_plan_of_arrays_enum_payloads_and_dotted_names() -> None:
    plan = FieldPlan(json.dumps(RUST_MADE))
    assert plan.leaves() == [
        ("position", "f32", (3,)),
        ("mode", "enum", ()),
        ("mode.Hop", "u8", ()),
        ("mode.Pair.0", "u8", ()),
        ("mode.Pair.1", "bool", ()),
        ("mode.Jump.height", "f64", ()),
        ("a.b", "u16", ()),
    ]
    assert plan.parts() == [
        ["position"],
        ["mode"],
        ["mode", "Hop"],
        ["mode", "Pair", "0"],
        ["mode", "Pair", "1"],
        ["mode", "Jump", "height"],
        ["a.b"],
    ]
    assert plan.numeric() == ["position.0", "position.1", "position.2", "a.b"]


def test_cells_follow_the_paths_through_decoded_values() -> None:
    jump: Dict[str, Any] = {"Jump": {"height": 2.5}}
    assert cell(jump, ["mode", "Jump", "height"], "f64") is None  # not under `mode`
    payload = {"mode": jump, "position": [1.0, 2.0, 3.0], "a.b": 7}
    assert cell(payload, ["mode"], "enum") == "Jump"
    assert cell(payload, ["mode", "Jump", "height"], "f64") == 2.5
    assert cell(payload, ["mode", "Hop"], "u8") is None  # another variant
    assert cell({"mode": "Idle"}, ["mode"], "enum") == "Idle"
    assert cell({"mode": "Idle"}, ["mode", "Jump", "height"], "f64") is None
    assert cell(payload, ["a.b"], "u16") == 7
    assert cell({"mode": {"Pair": (4, True)}}, ["mode", "Pair", "1"], "bool") is True


class _Schema:
    """What `columns` reads of an event's schema: its fingerprint (the plan is cached by it)."""

    def __init__(self, cls: type) -> None:
        self.fingerprint = int(snapbus.schema_of(cls)["fingerprint"], 16)
        self.cls = cls


def test_columns_of_a_row_are_the_field_plans_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    import snapbus.fields as fields

    monkeypatch.setattr(fields, "FieldPlan", lambda schema: FieldPlan(schema.cls))
    r = row(4)
    got = columns(r, _Schema(Row))
    assert list(got) == [path for path, _, _ in ROW_LEAVES]
    assert got["pose.x"] == r.pose.x and got["pair.0"] == r.pair[0] and got["pair.1"] == r.pair[1]
    assert got["table"] == r.table and got["maybe"] == r.maybe


def test_rerun_entity_paths_follow_the_field_plan() -> None:
    from snapbus.rerun._mapping import _identity, _leaves

    found: List[Tuple[Tuple[str, ...], Any, Any]] = []
    _leaves(row(4), (), _identity, found)
    paths = [".".join(p) for p, _, _ in found]
    kinds = {path: dtype for path, dtype, _ in ROW_LEAVES}
    # Every leaf of the plan is an entity, except maps and lists of structs, which the bridge
    # also goes into, by key and by index, below the plan's path.
    for path, dtype in kinds.items():
        if dtype in ("map", "seq"):
            assert path not in paths and any(p.startswith(path + ".") for p in paths), path
        else:
            assert path in paths, path
    below = [p for p in paths if p not in kinds]
    assert below == ["table.a", "table.b", "poses.0.x", "poses.0.y", "grids.g"], below

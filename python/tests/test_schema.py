"""Dataclasses as schemas: the mapping, parity with Rust derives (golden fingerprints from
`snapbus schemas --json`), refusals naming the field, evolution, re-definitions."""

# The dataclasses here are read by get_type_hints at run time, also on 3.8: typing.Dict etc.

from __future__ import annotations

import enum
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Union

import numpy as np
import pytest
from conftest import snapbus_bin
from numpy.typing import NDArray
from rt_schema import event

import snapbus

if sys.version_info >= (3, 9):
    from typing import Annotated, Literal
else:
    from typing_extensions import Annotated, Literal


def rust_schemas() -> Dict[str, Dict[str, Any]]:
    out = subprocess.run(
        [str(snapbus_bin()), "schemas", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {d["id"]: d for d in map(json.loads, out.stdout.splitlines())}


class Mode(enum.Enum):
    Train = 1
    Eval = 2


@dataclass
class EpisodeEnd:
    """The equivalent of cli/src/demo.rs's `#[derive(Snapshot)] struct EpisodeEnd`."""

    schema_id: ClassVar[str] = "demo.episode_end"
    schema_version: ClassVar[int] = 1
    episode: snapbus.u32
    steps: Annotated[int, snapbus.u32]
    mode: Mode
    total_reward: float
    mean_reward: snapbus.f64


@dataclass
class Resource(snapbus.TelemetryEvent):
    """The equivalent of the built-in `ResourceSample` (schemas/src/builtin.rs)."""

    schema_id: ClassVar[str] = "snapbus.resource"
    schema_version: ClassVar[int] = 1
    rss_bytes: snapbus.u64
    cpu_user_nanos: snapbus.u64
    cpu_sys_nanos: snapbus.u64
    minor_faults: snapbus.u64
    major_faults: snapbus.u64
    threads: snapbus.u32


def test_a_dataclass_and_its_rust_derive_have_the_same_descriptor() -> None:
    rust = rust_schemas()
    for cls in (EpisodeEnd, Resource):
        py = snapbus.schema_of(cls)
        r = rust[cls.schema_id]
        assert py["root"] == r["root"], cls
        assert py["version"] == r["version"]
        assert int(py["fingerprint"], 16) == r["fingerprint"], cls
    # The golden value itself (cli `snapbus schemas`): a change in either side shows here.
    assert snapbus.schema_of(EpisodeEnd)["fingerprint"] == "a54081ddb2a915f7"


@dataclass
class Inner:
    a: bool


@dataclass
class Rows:
    schema_id: ClassVar[str] = "test.table"
    schema_version: ClassVar[int] = 1
    not_a_field: ClassVar[int] = 3
    b: bool
    i: int
    sized: Tuple[
        snapbus.u8,
        snapbus.u16,
        snapbus.u32,
        snapbus.u64,
        snapbus.i8,
        snapbus.i16,
        snapbus.i32,
        snapbus.i64,
    ]
    f: float
    f4: snapbus.f32
    s: str
    raw: bytes
    mode: Mode
    lit: Literal["a", "b"]
    opt: Optional[int]
    seq: List[str]
    var: Tuple[float, ...]
    m: Dict[str, List[int]]
    inner: Inner
    t1: NDArray[np.float32]
    t2: snapbus.Tensor[np.int64]


def test_the_mapping_table() -> None:
    root = snapbus.schema_of(Rows)["root"]
    types_ = {f["name"]: f["type"] for f in root["fields"]}
    assert "not_a_field" not in types_ and "schema_id" not in types_
    assert types_["b"] == {"type": "bool"}
    assert types_["i"] == {"type": "i64"}
    assert [e["type"] for e in types_["sized"]["elems"]] == [
        "u8",
        "u16",
        "u32",
        "u64",
        "i8",
        "i16",
        "i32",
        "i64",
    ]
    assert types_["f"] == {"type": "f64"} and types_["f4"] == {"type": "f32"}
    assert types_["s"] == {"type": "string"} and types_["raw"] == {"type": "bytes"}
    assert types_["mode"]["variants"] == [
        {"name": "Train", "kind": "unit"},
        {"name": "Eval", "kind": "unit"},
    ]
    assert [v["name"] for v in types_["lit"]["variants"]] == ["a", "b"]
    assert types_["opt"] == {"type": "option", "some": {"type": "i64"}}
    assert types_["seq"] == {"type": "seq", "elem": {"type": "string"}}
    assert types_["var"] == {"type": "seq", "elem": {"type": "f64"}}
    assert types_["m"] == {
        "type": "map",
        "key": {"type": "string"},
        "value": {"type": "seq", "elem": {"type": "i64"}},
    }
    assert types_["inner"] == {
        "type": "struct",
        "fields": [{"name": "a", "type": {"type": "bool"}, "since": 1}],
    }
    assert types_["t1"] == {"type": "tensor", "dtype": "f32"}
    assert types_["t2"] == {"type": "tensor", "dtype": "i64"}
    if sys.version_info >= (3, 9):  # np.ndarray[...] is subscriptable from 3.9

        @dataclass
        class Spelled:
            schema_id: ClassVar[str] = "test.spelled"
            schema_version: ClassVar[int] = 1
            t: np.ndarray[Any, np.dtype[np.uint16]]  # type: ignore[type-arg]

        t = snapbus.schema_of(Spelled)["root"]["fields"][0]["type"]
        assert t == {"type": "tensor", "dtype": "u16"}


def refused(annotation: Any, schema_id: str = "test.refused") -> str:
    with pytest.raises(TypeError) as info:
        snapbus.schema_of(event(schema_id, "Refused", ok=int, bad=annotation))
    return str(info.value)


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (np.ndarray, "field `bad`: a bare numpy array has no dtype"),
        (NDArray[Any], "field `bad`: a numpy array annotation needs a dtype"),
        (Union[int, str], "field `bad`: union"),
        (Optional[Union[int, str]], "field `bad`: union"),
        (NDArray[np.complex64], "field `bad`: dtype complex64 is not supported"),
        (NDArray[np.bool_], "field `bad`: dtype bool is not supported"),
        (NDArray[np.float16], "field `bad`: dtype float16 is not supported"),
        (Dict[str, Tuple[int, np.ndarray]], "field `bad{}.1`: a bare numpy array"),
        (list, "field `bad`: bare list needs element types"),
        (Literal[1, 2], "field `bad`: only Literal of strings"),
        (Annotated[str, snapbus.u8], "field `bad`: snapbus.u8 annotates int"),
        (complex, "field `bad`: annotation <class 'complex'> has no snapbus mapping"),
    ],
)
def test_unsupported_annotations_are_refused_naming_the_field(
    annotation: Any, message: str
) -> None:
    assert message in refused(annotation)


@pytest.mark.parametrize("annotation", [Any, object, dict, Dict, Dict[str, Any]])
def test_annotations_known_only_at_run_time_are_dynamic(annotation: Any) -> None:
    cls = event("test.dyn", "Dyn", ok=int, d=annotation, many=List[annotation])
    fields = snapbus.schema_of(cls)["root"]["fields"]
    assert fields[1]["type"] == {"type": "dynamic"}
    assert fields[2]["type"] == {"type": "seq", "elem": {"type": "dynamic"}}


@dataclass
class Leaf:
    value: complex


Outer = event("test.nested", "Outer", leaves=List[Leaf])


@dataclass
class TreeNode:
    schema_id: ClassVar[str] = "test.tree"
    schema_version: ClassVar[int] = 1
    children: List[TreeNode]


def test_nested_paths_and_recursion_are_named() -> None:
    with pytest.raises(TypeError, match=r"`leaves\[\]\.value`: annotation <class 'complex'> has"):
        snapbus.schema_of(Outer)
    with pytest.raises(TypeError, match=r"field `children\[\]`: TreeNode contains itself"):
        snapbus.schema_of(TreeNode)


def test_events_need_schema_id_and_version() -> None:
    @dataclass
    class NoId:
        schema_version: ClassVar[int] = 1
        x: int

    @dataclass
    class NoVersion:
        schema_id: ClassVar[str] = "test.x"
        x: int

    class NotADataclass:
        schema_id = "test.x"
        schema_version = 1

    with pytest.raises(TypeError, match="has no `schema_id: ClassVar"):
        snapbus.schema_of(NoId)
    with pytest.raises(TypeError, match="has no `schema_version: ClassVar"):
        snapbus.schema_of(NoVersion)
    with pytest.raises(TypeError, match="is not an event"):
        snapbus.schema_of(NotADataclass)
    t = snapbus.get_telemetry("test.schema")
    with pytest.raises(TypeError, match="has no `schema_id"):
        t.snapshot(snapbus.INFO, NoId(1))
    with pytest.raises(TypeError, match='a dict event needs a "kind" key'):
        t.snapshot(snapbus.INFO, {"x": 1})
    with pytest.raises(TypeError, match="is not an event"):
        t.snapshot(snapbus.INFO, NotADataclass())
    bad_id = refused(int, "Not A Valid Id!")
    assert "not a valid schema" in bad_id


def test_evolution_follows_the_rust_rules() -> None:
    @dataclass
    class V2:
        schema_id: ClassVar[str] = "test.evolve"
        schema_version: ClassVar[int] = 2
        a: int
        b: float = field(default=0.0, metadata={"since": 2})

    fields = snapbus.schema_of(V2)["root"]["fields"]
    assert [(f["name"], f["since"]) for f in fields] == [("a", 1), ("b", 2)]

    class SinceTooNew(V2):  # V2's fields, at version 1
        schema_id: ClassVar[str] = "test.evolve.bad"
        schema_version: ClassVar[int] = 1

    with pytest.raises(TypeError, match="SinceTooNew: not a valid schema"):
        snapbus.schema_of(SinceTooNew)

    @dataclass
    class NotAppended:
        schema_id: ClassVar[str] = "test.evolve.order"
        schema_version: ClassVar[int] = 2
        b: float = field(default=0.0, metadata={"since": 2})
        a: int = 0

    with pytest.raises(TypeError, match="NotAppended: not a valid schema"):
        snapbus.schema_of(NotAppended)


def test_an_incompatible_redefinition_under_the_same_version_is_refused() -> None:
    def define(annotation: str) -> type:
        # A notebook cell run again: a new class object, in the same module.
        ns: Dict[str, Any] = {"__name__": __name__}
        code = (
            "from dataclasses import dataclass\nfrom typing import ClassVar\n"
            "@dataclass\nclass Cell:\n"
            "    schema_id: ClassVar[str] = 'test.notebook'\n"
            "    schema_version: ClassVar[int] = 1\n"
            f"    x: {annotation}\n"
        )
        exec(compile(code, "cell", "exec", dont_inherit=True), ns)
        return ns["Cell"]  # type: ignore[no-any-return]

    first, same, changed = define("int"), define("int"), define("str")
    fp = snapbus.schema_of(first)["fingerprint"]
    assert snapbus.schema_of(same)["fingerprint"] == fp  # a re-run cell: same layout, fine
    t = snapbus.get_telemetry("test.notebook")
    t.snapshot(snapbus.INFO, same(1))
    with pytest.raises(
        TypeError,
        match=r"schema \"test.notebook\" version 1 was already "
        r"registered in this process by .*Cell with a different layout",
    ):
        t.snapshot(snapbus.INFO, changed("x"))


def test_plans_are_compiled_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    import snapbus.schema as schema_mod

    original = schema_mod.plan_of

    def counting(cls: type) -> Any:
        calls.append(cls)
        return original(cls)

    once = event("test.once", x=int)
    monkeypatch.setattr(schema_mod, "plan_of", counting)
    t = snapbus.get_telemetry("test.once")
    for i in range(100):
        t.snapshot(snapbus.INFO, once(i))
    snapbus.schema_of(once)
    assert calls == [once]


def test_levels_are_logging_levels() -> None:
    import logging

    assert (snapbus.TRACE, snapbus.DEBUG, snapbus.INFO, snapbus.WARN, snapbus.ERROR) == (
        5,
        logging.DEBUG,
        logging.INFO,
        logging.WARNING,
        logging.ERROR,
    )
    assert snapbus.getTelemetry is snapbus.get_telemetry


def test_versions_of_one_schema_must_evolve_by_appending() -> None:
    v1 = event("test.evo2", "V1", a=int)

    @dataclass
    class V2:
        schema_id: ClassVar[str] = "test.evo2"
        schema_version: ClassVar[int] = 2
        a: int
        b: str = field(default="", metadata={"since": 2})

    @dataclass
    class V3Retyped(V2):  # V2 with `a` retyped
        schema_version: ClassVar[int] = 3
        a: float

    snapbus.schema_of(v1)
    snapbus.schema_of(V2)  # appended with `since`: fine
    with pytest.raises(
        TypeError,
        match=r"V3Retyped: schema \"test.evo2\" version 3 does not "
        r"evolve from version 1",
    ):
        snapbus.schema_of(V3Retyped)

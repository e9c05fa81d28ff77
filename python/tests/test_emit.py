"""The emit side against a real bus: every mapping row from a Python producer to `snapbus
echo` (JSON values equal), strict and non-strict data errors, bus conditions counted (never
raised), spans, filters on `__name__` targets, names, kill -9 of a producer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types

import pytest
from conftest import CHILD_CWD, TESTS_ON_PATH, echo_oldest, run_producer, wait_until

# Definitions shared by the producer child and the expected values.
DEFS = textwrap.dedent(
    """
    import array, enum, logging
    from dataclasses import dataclass, field
    from typing import ClassVar, Dict, List, Optional, Sequence, Tuple
    try:
        from typing import Annotated, Literal
    except ImportError:  # 3.8
        from typing_extensions import Annotated, Literal
    import numpy as np
    from numpy.typing import NDArray
    import snapbus

    class Mode(enum.Enum):
        Train = "t"
        Eval = "e"

    @dataclass
    class Inner:
        x: snapbus.i32
        label: str

    @dataclass
    class AllRows:
        schema_id: ClassVar[str] = "test.rows"
        schema_version: ClassVar[int] = 1
        b: bool
        i: int
        small: snapbus.u8
        annotated: Annotated[int, snapbus.i16]
        big: snapbus.u64
        f: float
        half: snapbus.f32
        s: str
        raw: bytes
        mode: Mode
        lit: Literal["left", "right"]
        some: Optional[int]
        none: Optional[str]
        ints: List[int]
        floats_np: List[float]
        floats_arr: Sequence[float]
        var_tuple: Tuple[int, ...]
        pair: Tuple[int, str, float]
        by_name: Dict[str, int]
        nested: Inner
        nested_list: List[Inner]
        image: NDArray[np.float32]
        mask: snapbus.Tensor[np.uint8]
        strided: NDArray[np.float64]
        patches: Dict[str, NDArray[np.int16]]

    def make(k):
        return AllRows(
            b=k % 2 == 0, i=-(10 ** 12) - k, small=200 + k, annotated=-300 - k,
            big=2 ** 64 - 1 - k,
            f=0.1 * k, half=0.5 + k, s="héllo %d" % k, raw=bytes([0, 255, k]), mode=Mode.Eval,
            lit="right", some=k, none=None, ints=[1, 2, k],
            floats_np=np.arange(3, dtype=np.float64) + k,
            floats_arr=array.array("d", [1.5, k]), var_tuple=(7, k), pair=(k, "p", 2.5),
            by_name={"a": 1, "b": k}, nested=Inner(x=-k, label="in"),
            nested_list=[Inner(1, "a"), Inner(2, "b")],
            image=np.arange(6, dtype=np.float32).reshape(2, 3) + k,
            mask=np.array([[1, 0], [0, k]], dtype=np.uint8),
            strided=(np.arange(6, dtype=np.float64).reshape(2, 3) * k).T,
            patches={"p": np.array([-1, k], dtype=np.int16)},
        )
    """
)


def defs_module() -> types.ModuleType:
    """DEFS as an importable module of this process."""
    mod = sys.modules.get("emit_defs")
    if mod is None:
        mod = types.ModuleType("emit_defs")
        sys.modules["emit_defs"] = mod
        exec(compile(DEFS, "emit_defs", "exec", dont_inherit=True), mod.__dict__)
    return mod


def expected(k: int) -> dict:
    import numpy as np

    strided = (np.arange(6, dtype=np.float64).reshape(2, 3) * k).T
    return {
        "b": k % 2 == 0,
        "i": -(10**12) - k,
        "small": 200 + k,
        "annotated": -300 - k,
        "big": 2**64 - 1 - k,
        "f": 0.1 * k,
        "half": 0.5 + k,
        "s": f"héllo {k}",
        "raw": [0, 255, k],
        "mode": "Eval",
        "lit": "right",
        "some": k,
        "none": None,
        "ints": [1, 2, k],
        "floats_np": [0.0 + k, 1.0 + k, 2.0 + k],
        "floats_arr": [1.5, float(k)],
        "var_tuple": [7, k],
        "pair": [k, "p", 2.5],
        "by_name": {"a": 1, "b": k},
        "nested": {"x": -k, "label": "in"},
        "nested_list": [{"x": 1, "label": "a"}, {"x": 2, "label": "b"}],
        "image": {"dtype": "f32", "shape": [2, 3], "data": [float(v + k) for v in range(6)]},
        "mask": {"dtype": "u8", "shape": [2, 2], "data": [1, 0, 0, k]},
        "strided": {"dtype": "f64", "shape": [3, 2], "data": strided.ravel().tolist()},
        "patches": {"p": {"dtype": "i16", "shape": [2], "data": [-1, k]}},
    }


def test_every_mapping_row_reaches_echo_with_equal_values(bus) -> None:
    code = DEFS + textwrap.dedent(
        """
        t = snapbus.get_telemetry("lab.rows")
        for k in range(3):
            t.snapshot(logging.INFO, make(k))
        s = snapbus.stats()
        assert s["written"] == 3 and s["not_written"] == 0, s
        snapbus.shutdown()
        """
    )
    run_producer(bus, code)
    events = echo_oldest(bus, 3, "test.rows")
    for k, ev in enumerate(events):
        assert ev["schema"] == "test.rows" and ev["version"] == 1
        assert ev["level"] == "info" and ev["target"] == "lab.rows"
        assert ev["payload"] == expected(k), k


def test_bad_values_raise_by_default_naming_the_field() -> None:
    import numpy as np

    import snapbus

    ns = defs_module().__dict__
    t = snapbus.get_telemetry("test.strict")
    good = ns["make"](1)
    cases = [
        ("small", 300, ValueError, "small: 300 is out of range for u8"),
        ("i", "7", TypeError, "i: expected int, got str"),
        ("image", np.zeros(3, dtype=np.complex64), ValueError, "image: array of format"),
        ("mask", [1, 2], TypeError, "mask: expected an array of u8"),
        ("mode", "Eval", ValueError, "mode: 'Eval' is not one of"),
        ("lit", "up", ValueError, "lit: 'up' is not one of"),
        ("pair", (1, "p"), ValueError, "pair: expected 3 elements"),
        ("floats_np", np.zeros((2, 2)), ValueError, "floats_np: a 2-dimensional array given"),
        ("floats_np", np.zeros(2, np.complex64), ValueError, "floats_np: array of format"),
        ("by_name", {"a": "x"}, TypeError, 'by_name["a"]: expected int'),
        # Views with a zero stride claim any length: four of 2**62 bytes overflow a usize.
        (
            "patches",
            {f"p{k}": np.broadcast_to(np.zeros(1, np.int16), (2**61,)) for k in range(4)},
            ValueError,
            f'patches["p3"]: {2**62} more bytes make the event too large',
        ),
    ]
    for name, value, exc, text in cases:
        bad = ns["make"](1)
        setattr(bad, name, value)
        with pytest.raises(exc) as info:
            t.snapshot(snapbus.INFO, bad)
        assert f"AllRows.{text}" in str(info.value), (name, str(info.value))
    nested = ns["make"](1)
    nested.nested_list[1].x = 2**40
    with pytest.raises(ValueError, match=r"AllRows\.nested_list\[1\]\.x: .* out of range for i32"):
        t.snapshot(snapbus.INFO, nested)
    t.snapshot(snapbus.INFO, good)  # the good one passes (not written: no bus here)


NON_STRICT = DEFS + textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("always")
    t = snapbus.get_telemetry("lab.loose")
    with warnings.catch_warnings(record=True) as caught:
        for k in range(3):
            bad = make(k); bad.small = 999
            t.snapshot(logging.INFO, bad)          # counted, warned once for (AllRows, small)
        bad = make(0); bad.image = np.zeros(2, np.complex64)  # another field: one more warning
        t.snapshot(logging.INFO, bad)
        t.snapshot(logging.INFO, make(5))          # good data still goes through
    print(json.dumps({"warnings": [str(w.message) for w in caught], "stats": snapbus.stats(),
                      "lines": [w.lineno for w in caught]}))
    snapbus.shutdown()
    """
)


def test_bad_values_count_switch_counts_and_warns_once_per_field(bus) -> None:
    code = "import json\n" + NON_STRICT
    out = run_producer(bus, code, env={"SNAPBUS_BAD_VALUES": "count"})
    got = json.loads(out.stdout)
    # The warnings point at the caller's line (run_producer puts two lines before the code).
    call = "snapshot(logging.INFO, bad)"
    calls = [2 + 1 + i for i, t in enumerate(code.splitlines()) if call in t]
    assert got["lines"] == [calls[0], calls[1]], (got["lines"], calls)
    warned = got["warnings"]
    assert len(warned) == 2, warned
    assert "AllRows not emitted: field `small`: 999 is out of range for u8" in warned[0]
    assert "field `image`" in warned[1]
    s = got["stats"]
    assert (s["data_errors"], s["written"], s["not_written"]) == (4, 1, 4), s
    assert echo_oldest(bus, 1, "test.rows")[0]["payload"]["small"] == 205


def test_bus_conditions_are_counted_never_raised(bus) -> None:
    code = textwrap.dedent(
        """
        import json, logging, snapbus
        from rt_schema import event
        E = event("test.nobus", x=int)
        t = snapbus.get_telemetry("lab")
        for i in range(5):
            t.snapshot(logging.INFO, E(i))            # no bus: counted
        t.snapshot(logging.DEBUG, E(0))               # filtered: not counted at all
        with t.span(logging.INFO, "s"):               # a span without a bus: counted too
            pass
        before = snapbus.stats()
        assert not snapbus.is_connected() and not t.isEnabledFor(logging.INFO)
        assert snapbus.wait_for_bus(0.05) is False
        print(json.dumps(before))
        """
    )
    p = bus.spawn_py(TESTS_ON_PATH + code, env={"SNAPBUS_BUS": "no-such-bus"})
    out = p.wait()
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert (s["no_bus"], s["written"], s["not_written"], s["has_lane"]) == (6, 0, 6, False), s


def test_span_is_a_context_manager_and_a_decorator(bus) -> None:
    code = textwrap.dedent(
        """
        import logging, time
        t = snapbus.get_telemetry("lab.spans")
        with t.span(logging.INFO, "block"):
            time.sleep(0.02)
        @t.span(logging.INFO, "call")
        def work(x):
            '''doc'''
            time.sleep(0.01)
            return x * 2
        assert work(21) == 42 and work.__name__ == "work" and work.__doc__ == "doc"
        with t.span(logging.DEBUG, "filtered"):
            pass
        snapbus.shutdown()
        """
    )
    run_producer(bus, code)
    events = echo_oldest(bus, 2, "snapbus.duration")
    assert [e["payload"]["label"] for e in events] == ["block", "call"]
    assert events[0]["payload"]["duration_nanos"] >= 20_000_000
    assert events[1]["payload"]["duration_nanos"] >= 10_000_000
    assert {e["target"] for e in events} == {"lab.spans"}


def test_filter_uses_dotted_module_names(bus) -> None:
    code = textwrap.dedent(
        """
        import logging
        from rt_schema import event
        E = event("test.filter", who=str)
        models = snapbus.get_telemetry("lab.models.policy")
        env = snapbus.get_telemetry("lab.env")
        assert models.isEnabledFor(logging.DEBUG) and not env.enabled(logging.INFO)
        env.snapshot(logging.INFO, E("env-info"))          # below warn: filtered
        models.snapshot(logging.DEBUG, E("models-debug"))  # lab.models=debug
        models.snapshot(5, E("models-trace"))              # below debug: filtered
        env.snapshot(logging.CRITICAL, E("env-critical"))  # critical folds into error
        snapbus.shutdown()
        """
    )
    run_producer(bus, TESTS_ON_PATH + code, env={"SNAPBUS_FILTER": "warn,lab.models=debug"})
    events = echo_oldest(bus, 2, "test.filter")
    assert [(e["payload"]["who"], e["level"]) for e in events] == [
        ("models-debug", "debug"),
        ("env-critical", "error"),
    ]


def test_init_sets_the_name_and_is_refused_after_first_use(bus, tmp_path) -> None:
    script = tmp_path / "my_experiment.py"
    script.write_text(
        textwrap.dedent(
            """
            import snapbus
            snapbus.get_telemetry("x")
            try:
                snapbus.init(name="late")
            except RuntimeError as e:
                assert "before the first get_telemetry" in str(e)
            else:
                raise AssertionError("init after first use was accepted")
            assert snapbus.wait_for_bus(30)
            print("ready", flush=True)
            import time; time.sleep(60)
            """
        )
    )
    named = bus.spawn_py(
        "import snapbus, time\nsnapbus.init(name='exp-42', session_tag='s1')\n"
        "assert snapbus.wait_for_bus(30)\nprint('ready', flush=True)\ntime.sleep(60)"
    )
    default = bus.spawn_py([str(script)])
    for p in (named, default):
        assert p.popen.stdout is not None
        assert p.popen.stdout.readline().strip() == "ready", p.popen.stderr
    names = {
        p["info"]["name"]
        for p in bus.ls()["producers"]  # type: ignore[index,union-attr]
    }
    assert {"exp-42", "my_experiment.py"} <= names, names
    assert not any(n.startswith("python") for n in names), names


def test_a_killed_producer_is_marked_dead_and_its_ring_stays_readable(bus, tmp_path) -> None:
    code = textwrap.dedent(
        """
        import logging, time
        from rt_schema import event
        E = event("test.crash", i=int)
        t = snapbus.get_telemetry("lab")
        for i in range(10):
            t.snapshot(logging.INFO, E(i))
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    p = bus.spawn_py(TESTS_ON_PATH + "import snapbus\nassert snapbus.wait_for_bus(30)\n" + code)
    assert p.popen.stdout is not None and p.popen.stdout.readline().strip() == "ready"
    pid = p.pid
    p.kill()

    def dead() -> bool:
        for prod in bus.ls()["producers"]:  # type: ignore[union-attr]
            if prod["info"]["pid"] == pid:  # type: ignore[index]
                return "dead" in str(prod["status"])  # type: ignore[index]
        return False

    wait_until("the producer marked dead", dead)
    crash = tmp_path / "crash.mcap"
    bus.cli("snapshot", "-o", str(crash), "--schema", "test.crash")
    from mcap.reader import make_reader

    with crash.open("rb") as f:
        schemas = [s.name for s, _, _ in make_reader(f).iter_messages()]
    assert schemas == ["test.crash"] * 10, schemas


def test_children_import_the_snapbus_under_test(bus) -> None:
    # A pip-installed suite must not test the source tree's package in its children.
    import snapbus

    out = bus.spawn_py("import snapbus, sys\nprint(snapbus.__file__)\n").wait()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == snapbus.__file__


def test_numpy_is_optional_at_import() -> None:
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "import snapbus, logging\n"
        "from dataclasses import dataclass\nfrom typing import ClassVar, List\n"
        "@dataclass\nclass E:\n"
        "    schema_id: ClassVar[str] = 'test.nonumpy'\n    schema_version: ClassVar[int] = 1\n"
        "    xs: List[snapbus.f32]\n"
        "snapbus.get_telemetry('x').snapshot(logging.INFO, E([1.0, 2.0]))\n"
        "print(snapbus.schema_of(E)['fingerprint'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHILD_CWD,
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip()) == 16


def test_wait_for_bus_is_interrupted_by_ctrl_c(bus) -> None:
    code = (
        "import snapbus, time, sys\n"
        "t0 = time.monotonic()\n"
        "try:\n"
        "    print('waiting', flush=True)\n"
        "    snapbus.wait_for_bus(60)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after %.2f s' % (time.monotonic() - t0), flush=True)\n"
        "    sys.exit(0)\n"
        "sys.exit(3)\n"
    )
    p = bus.spawn_py(code, env={"SNAPBUS_BUS": "no-such-bus-either"})
    assert p.popen.stdout is not None and p.popen.stdout.readline().strip() == "waiting"
    import signal
    import time

    # Not a synchronisation (an earlier SIGINT is caught the same way): it only makes the
    # signal land inside the wait, which has no state to await from outside.
    time.sleep(0.3)
    p.signal(signal.SIGINT)
    out = p.wait(10)
    assert out.returncode == 0, out.stderr
    took = float(out.stdout.split()[2])
    assert took < 5, out.stdout


def test_sample_resources_emits_resource_samples(bus) -> None:
    code = textwrap.dedent(
        """
        import time
        with snapbus.sample_resources(0.05):
            time.sleep(0.5)
        snapbus.shutdown()
        """
    )
    run_producer(bus, code)
    ev = echo_oldest(bus, 2, "snapbus.resource")
    assert ev[0]["target"] == "snapbus.resources" and ev[0]["payload"]["rss_bytes"] > 0


def test_the_default_name_of_a_module_run_with_dash_m(bus, tmp_path) -> None:
    pkg = tmp_path / "labpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        "import snapbus, time\nassert snapbus.wait_for_bus(30)\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    env = {"PYTHONPATH": str(tmp_path)}
    p = bus.spawn_py(["-m", "labpkg.train"], env=env)
    assert p.popen.stdout is not None and p.popen.stdout.readline().strip() == "ready"
    names = [q["info"]["name"] for q in bus.ls()["producers"]]  # type: ignore[index,union-attr]
    assert names == ["labpkg.train"], names


def test_numpy_scalars_and_threads(bus) -> None:
    code = textwrap.dedent(
        """
        import logging, threading, time
        import numpy as np
        from rt_schema import event
        S = event("test.scalars", i=snapbus.u16, f=float, h=snapbus.f32, b=bool)
        t = snapbus.get_telemetry("lab.np")
        t.snapshot(logging.INFO, S(np.uint8(7), np.float32(0.5), np.float64(1.5), np.bool_(True)))
        # One decorated function timed from two threads at once: one sample per call.
        @t.span(logging.INFO, "threaded")
        def slow(d):
            time.sleep(d)
        short = threading.Thread(target=slow, args=(0.1,))
        long = threading.Thread(target=slow, args=(0.4,))
        short.start(); time.sleep(0.03); long.start()  # the first one in ends first
        short.join(); long.join()
        snapbus.shutdown()
        """
    )
    run_producer(bus, TESTS_ON_PATH + code)
    ev = echo_oldest(bus, 1, "test.scalars")[0]
    assert ev["payload"] == {"i": 7, "f": 0.5, "h": 1.5, "b": True}
    spans = sorted(e["payload"]["duration_nanos"] for e in echo_oldest(bus, 2, "snapbus.duration"))
    assert 100_000_000 <= spans[0] < 400_000_000 <= spans[1], spans


def test_snapbus_filter_changes_python_targets_live(bus) -> None:
    code = textwrap.dedent(
        """
        import logging, time
        from rt_schema import event
        E = event("test.live", i=int)
        t = snapbus.get_telemetry("lab.models.policy")
        assert snapbus.wait_for_bus(30)
        print("ready", flush=True)
        i = 0
        while not t.isEnabledFor(logging.DEBUG):   # off until `snapbus filter` says debug
            t.snapshot(logging.DEBUG, E(-1))
            time.sleep(0.005)
        for i in range(3):
            t.snapshot(logging.DEBUG, E(i))
        snapbus.shutdown()
        """
    )
    p = bus.spawn_py(TESTS_ON_PATH + "import snapbus\n" + code)
    assert p.popen.stdout is not None and p.popen.stdout.readline().strip() == "ready"
    bus.cli("filter", "info,lab.models=debug")
    out = p.wait()
    assert out.returncode == 0, out.stderr
    events = echo_oldest(bus, 3, "test.live")
    assert [e["payload"]["i"] for e in events] == [0, 1, 2]
    assert {e["level"] for e in events} == {"debug"}


def test_spans_record_their_trace_and_parent(bus) -> None:
    """Nested `span()` blocks (and a decorated function called inside one) name the enclosing
    span as their parent, in its trace; a span whose level is off records nothing; a span
    with none open starts a new trace."""
    code = textwrap.dedent(
        """
        import logging
        t = snapbus.get_telemetry("lab.trace")
        @t.span(logging.INFO, "decorated")
        def f():
            pass
        with t.span(logging.INFO, "episode"):
            with t.span(logging.INFO, "step"):
                pass
            with t.span(logging.DEBUG, "off"):
                pass
            f()
        with t.span(logging.INFO, "next"):
            pass
        snapbus.shutdown()
        """
    )
    run_producer(bus, code)
    got = {e["payload"]["label"]: e["payload"] for e in echo_oldest(bus, 4, "snapbus.duration")}
    assert sorted(got) == ["decorated", "episode", "next", "step"], got
    episode, nxt = got["episode"], got["next"]
    assert episode["parent_id"] == 0 and episode["span_id"] != 0, episode
    for child in (got["step"], got["decorated"]):
        assert child["parent_id"] == episode["span_id"], child
        assert child["trace_id"] == episode["trace_id"], child
    assert nxt["parent_id"] == 0 and nxt["trace_id"] != episode["trace_id"], nxt

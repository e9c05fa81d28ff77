"""The rerun bridge (issue 19): `snapbus attach rerun` streams the demo into an `.rrd` file or
a rerun gRPC server; what arrives is read back with the rerun CLI of the same wheel (`rerun rrd
verify`, `rerun rrd print -vvv`) and checked against the demo's formulas; a stopped bridge never
holds up the producer and its loss shows in `snapbus ls` and in the recording's log; bad input
fails before `attach` returns; `snapbus export --format rrd` converts a ring snapshot.

The bridge runs in its own interpreter, $SNAPBUS_RERUN_PYTHON (`.ci/test` makes
target/py-rerun: rerun-sdk==0.41.0 and snapbus). These tests fail, never skip, without it.
Every rerun process gets a temporary HOME (rerun writes its analytics settings there).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
from conftest import (
    TESTS_ON_PATH,
    WATCHDOG_S,
    Bus,
    Proc,
    _new_bus,
    demo_emitted,
    demo_episode_end_expected,
    demo_step_expected,
    wait_until,
)

EPISODES, STEPS = 3, 5
PIN = "rerun-sdk==0.41.0"


def rerun_python() -> str:
    """The bridge's interpreter: $SNAPBUS_RERUN_PYTHON, which must import rerun-sdk 0.36 to
    0.41 (`.ci/test` pins 0.41.0; $SNAPBUS_RERUN_PIN=0.36.3 checks the floor)."""
    py = os.environ.get("SNAPBUS_RERUN_PYTHON", "")
    assert py, (
        "$SNAPBUS_RERUN_PYTHON is not set: the rerun tests need a Python >= 3.10 with "
        f"{PIN} and snapbus (`.ci/test` makes target/py-rerun)"
    )
    out = subprocess.run(
        [py, "-c", "import rerun, snapbus.rerun; print(rerun.__version__)"],
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    want = os.environ.get("SNAPBUS_RERUN_PIN", PIN.split("==")[1])
    assert out.returncode == 0 and out.stdout.strip() == want, (
        f"{py} cannot run the bridge ({PIN} and snapbus): {out.stderr[-2000:]}"
    )
    return py


def rerun_cli() -> str:
    """The rerun CLI binary of the wheel in the bridge's interpreter (not its Python wrapper,
    so that a signal reaches the server itself)."""
    out = subprocess.run(
        [rerun_python(), "-c", "import rerun_cli, os; print(os.path.dirname(rerun_cli.__file__))"],
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
        check=True,
    )
    path = Path(out.stdout.strip()) / "rerun"
    assert path.is_file(), path
    return str(path)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HOME (and XDG dirs) for everything this test starts, the broker included
    (the bridge inherits the broker's environment)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("SNAPBUS_RERUN_PYTHON", rerun_python())
    return home


@pytest.fixture()
def rbus(home: Path) -> Iterator[Bus]:
    """A fresh bus whose broker runs with the temporary HOME."""
    import uuid

    yield from _new_bus(f"pytest-rr-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def rrd(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [rerun_cli(), "rrd", *args], capture_output=True, text=True, timeout=WATCHDOG_S
    )
    if check:
        assert out.returncode == 0, f"rerun rrd {args}: {out.returncode}\n{out.stderr[-3000:]}"
    return out


Rows = List[Dict[str, str]]


def rrd_tables(path: Path) -> Dict[str, Rows]:
    """`rerun rrd print -vvv FILE`, parsed: every entity's rows (all its chunks), each a dict
    of column name (`step`, `time`, `Scalars:scalars`, …) to the printed cell."""
    text = rrd("print", "-vvv", str(path)).stdout
    tables: Dict[str, Rows] = {}
    entity = None
    header: List[str] = []
    for line in text.splitlines():
        m = re.match(r"Chunk\(\S+\) with \d+ rows \([^)]*\) - (\S+) - ", line)
        if m:
            entity, header = m.group(1), []
            tables.setdefault(entity, [])
            continue
        cells = [c.strip() for c in line.strip().strip("│").strip().strip("│").split("┆")]
        if entity is None or len(cells) < 2:
            continue
        if cells[0] == "RowId":
            header = cells
        elif cells[0].startswith("row_") and header:
            tables[entity].append(dict(zip(header, cells)))
    return tables


def numbers(cell: str) -> List[float]:
    """`[0.5, -4.0]` -> [0.5, -4.0] (a cut cell's `…` tail is dropped)."""
    inner = cell.strip("[]").split("…")[0]
    parts = [p.strip() for p in inner.replace("[", "").replace("]", "").split(",")]
    complete = parts if "…" not in cell else parts[:-1]
    return [float(p) for p in complete if p]


def attach_rerun(bus: Bus, *args: str) -> Tuple[int, int]:
    """`snapbus attach rerun ARGS`: its consumer id and pid."""
    out = bus.cli("attach", "rerun", *args)
    cid = int(out.stdout.strip())
    consumer = wait_until("the bridge in ls", lambda: consumer_of(bus, cid))
    return cid, int(consumer["info"]["pid"])  # type: ignore[index]


def consumer_of(bus: Bus, cid: int) -> Dict[str, object] | None:
    for c in bus.ls()["consumers"]:  # type: ignore[union-attr]
        if c["id"] == cid:
            return c  # type: ignore[no-any-return]
    return None


def delivered(bus: Bus, cid: int) -> Tuple[int, int]:
    c = consumer_of(bus, cid)
    assert c is not None, f"consumer {cid} is gone: {bus.ls()}"
    return int(c["delivered"]), int(c["lost"])  # type: ignore[call-overload]


def detach(bus: Bus, cid: int) -> None:
    out = bus.cli("detach", str(cid))
    assert "exited 0" in out.stdout + out.stderr, out


def in_episode(r: Dict[str, str]) -> Tuple[int, int]:
    """(episode, step in it) of a row: the `step` timeline continues across episodes."""
    e = int(r["episode"])
    return e, int(r["step"]) - e * STEPS


def check_demo(tables: Dict[str, Rows], summaries: bool) -> None:
    """The demo's steps, with the right values, timelines and counts."""
    reward = tables["/demo/demo.step/reward"]
    assert len(reward) == EPISODES * STEPS, reward
    got = sorted((*in_episode(r), numbers(r["Scalars:scalars"])[0]) for r in reward)
    want = [
        (e, s, pytest.approx(demo_step_expected(e, s)["reward"]))
        for e in range(EPISODES)
        for s in range(STEPS)
    ]
    assert got == want
    step = tables["/demo/demo.step/step"]
    # The demo's `step` restarts at 0 every episode; on the `step` timeline the episodes follow
    # one another (never two records of different episodes at one step), and the field's own
    # value is its series.
    assert sorted(
        (int(r["step"]), int(r["episode"]), numbers(r["Scalars:scalars"])[0]) for r in step
    ) == [(e * STEPS + s, e, float(s)) for e in range(EPISODES) for s in range(STEPS)]
    assert all(r["time"].startswith("20") for r in step), step[0]
    position = tables["/demo/demo.step/position"]
    for r in position:
        e, s = in_episode(r)
        assert numbers(r["Scalars:scalars"]) == demo_step_expected(e, s)["position"], r
    assert len(position) == EPISODES * STEPS
    mode = tables["/demo/demo.step/mode"]
    assert sorted((int(r["episode"]), r["TextLog:text"].strip("[]")) for r in mode) == sorted(
        (e, str(demo_step_expected(e, s)["mode"])) for e in range(EPISODES) for s in range(STEPS)
    )
    images = [r for r in tables["/demo/demo.step/observation"] if "Image:buffer" in r]
    assert len(images) == EPISODES * STEPS
    for r in images:
        e, s = in_episode(r)
        pixels = [p for row in demo_step_expected(e, s)["observation"] for p in row]  # type: ignore[union-attr]
        shown = numbers(r["Image:buffer"])
        assert len(shown) >= 16 and shown == pixels[: len(shown)], (e, s, shown)
    formats = [r for r in tables["/demo/demo.step/observation"] if "Image:format" in r]
    # One static format: 8 wide, 6 high, luminance (color_model 1), u8 (channel_datatype 6).
    assert len(formats) == 1, formats
    assert "width: 8, height: 6" in formats[0]["Image:format"], formats
    assert "color_model: 1, channel_datatype: 6" in formats[0]["Image:format"], formats
    ends = tables["/demo/demo.episode_end/total_reward"]
    assert sorted(numbers(r["Scalars:scalars"])[0] for r in ends) == pytest.approx(
        sorted(demo_episode_end_expected(e, STEPS)["total_reward"] for e in range(EPISODES))
    )
    if summaries:
        mean = tables["/demo/demo.step.summary/episode/stats/reward/mean"]
        by_episode = {int(r["episode"]): numbers(r["Scalars:scalars"])[0] for r in mean}
        assert by_episode == {
            e: pytest.approx(demo_episode_end_expected(e, STEPS)["mean_reward"])
            for e in range(EPISODES)
        }
        assert len(tables["/demo/demo.step.summary/experiment/stats/reward/mean"]) == 1


def test_save_while_the_demo_runs_then_verify_and_print(rbus: Bus, tmp_path: Path) -> None:
    out = tmp_path / "demo.rrd"
    cid, _ = attach_rerun(rbus, "--save", str(out))
    demo = rbus.cli("demo", "--rate", "0", "--episodes", str(EPISODES), "--steps", str(STEPS))
    assert demo_emitted(demo.stdout + demo.stderr) == EPISODES * (STEPS + 1)
    # Steps and ends, and the aggregator's summaries: one per episode and the experiment's.
    total = EPISODES * (STEPS + 1) + EPISODES + 1
    wait_until(f"{total} records at the bridge", lambda: delivered(rbus, cid)[0] >= total)
    detach(rbus, cid)
    assert (
        "verified without error" in rrd("verify", str(out)).stdout + rrd("verify", str(out)).stderr
    )
    tables = rrd_tables(out)
    check_demo(tables, summaries=True)
    log = tables["/demo/snapbus"]
    assert any("producer demo" in r["TextLog:text"] and "joined" in r["TextLog:text"] for r in log)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connect_streams_to_a_rerun_grpc_server(rbus: Bus, tmp_path: Path) -> None:
    port = free_port()
    got = tmp_path / "server.rrd"
    # A rerun gRPC server on loopback that writes what it receives into a file.
    serve = ["--serve-grpc", "--bind", "127.0.0.1", "--port", str(port)]
    server = Proc([rerun_cli(), *serve, "--save", str(got)], dict(os.environ))
    rbus.procs.append(server)

    def listening() -> bool:
        assert server.popen.poll() is None, server.wait()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    wait_until("the rerun server", listening)
    url = f"rerun+http://127.0.0.1:{port}/proxy"
    cid, _ = attach_rerun(rbus, "--connect", url, "--schema", "demo.*")
    rbus.cli("demo", "--no-echo", "--rate", "0", "--episodes", str(EPISODES), "--steps", str(STEPS))
    total = EPISODES * (STEPS + 1)
    wait_until(f"{total} records at the bridge", lambda: delivered(rbus, cid)[0] >= total)
    detach(rbus, cid)

    def arrived() -> Dict[str, Rows] | None:
        if not got.exists():
            return None
        out = rrd("print", "-vvv", str(got), check=False)
        if out.returncode != 0 or out.stdout.count("/demo/demo.step/reward") == 0:
            return None
        tables = rrd_tables(got)
        n = len(tables.get("/demo/demo.step/reward", []))
        return tables if n == EPISODES * STEPS else None

    tables = wait_until("the demo at the rerun server", arrived)
    check_demo(tables, summaries=False)  # type: ignore[arg-type]
    server.signal(signal.SIGTERM)
    assert server.wait().returncode is not None


def test_a_stopped_bridge_never_holds_up_the_producer_and_its_loss_is_shown(
    rbus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "lag.rrd"
    cid, pid = attach_rerun(rbus, "--save", str(out), "--schema", "demo.*")
    episodes, steps = 40, 1000
    os.kill(pid, signal.SIGSTOP)
    monkeypatch.setenv("SNAPBUS_LANE_BYTES", str(1 << 20))
    try:
        demo = rbus.cli(
            "demo", "--no-echo", "--rate", "0", "--episodes", str(episodes), "--steps", str(steps)
        )
        # The producer emitted everything while its one consumer was stopped.
        emitted = demo_emitted(demo.stdout + demo.stderr)
        assert emitted == episodes * (steps + 1)
        assert delivered(rbus, cid) == (0, 0)
    finally:
        os.kill(pid, signal.SIGCONT)
    # Once running again, the bridge reads what the 1 MiB ring still holds and is told the rest
    # was lost: exactly, in `snapbus ls`.
    wait_until(
        "the bridge's loss in ls",
        lambda: sum(delivered(rbus, cid)) == emitted and delivered(rbus, cid)[1] > 0,
    )
    got, lost = delivered(rbus, cid)
    detach(rbus, cid)
    rrd("verify", str(out))
    tables = rrd_tables(out)
    log = tables["/demo/snapbus"]
    warned = [r["TextLog:text"].strip("[]") for r in log if r.get("TextLog:level") == "[WARN]"]
    counts = [int(m.group(1)) for m in (re.match(r"lost (\d+) records", w) for w in warned) if m]
    assert sum(counts) == lost, warned
    tables = rrd_tables(out)
    ends = tables.get("/demo/demo.episode_end/steps", [])
    shown = len(tables["/demo/demo.step/reward"]) + len(ends)
    assert shown == got, (len(ends), got, lost, sorted(tables))


def test_export_rrd_of_a_ring_snapshot(rbus: Bus, tmp_path: Path) -> None:
    rbus.cli("demo", "--rate", "0", "--episodes", str(EPISODES), "--steps", str(STEPS))
    snap = tmp_path / "snap.mcap"
    rbus.cli("snapshot", "-o", str(snap))
    out = tmp_path / "snap.rrd"
    rbus.cli("export", "--format", "rrd", str(snap), "-o", str(out))
    rrd("verify", str(out))
    check_demo(rrd_tables(out), summaries=True)
    # A --schema that matches nothing fails, and leaves no file.
    none = tmp_path / "none.rrd"
    args = ("export", "--format", "rrd", str(snap), "-o", str(none), "--schema", "nope.*")
    nothing = rbus.cli(*args, check=False)
    assert nothing.returncode != 0 and "matches --schema nope.*" in nothing.stderr, nothing
    assert not none.exists()
    # An existing output is refused without --force.
    again = rbus.cli("export", "--format", "rrd", str(snap), "-o", str(out), check=False)
    assert again.returncode != 0 and "--force" in again.stderr


def test_bad_input_fails_before_attach_returns(rbus: Bus, tmp_path: Path) -> None:
    def refused(*args: str) -> str:
        out = rbus.cli("attach", "rerun", *args, check=False)
        assert out.returncode != 0 and out.stdout == "", out
        assert rbus.ls()["consumers"] == [], "nothing may be started"
        assert "panicked" not in out.stderr
        return out.stderr

    # No rerun in this interpreter (the test suite's own: .ci/test never installs rerun there).
    no_rerun = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('rerun'))"],
        capture_output=True,
        text=True,
    )
    assert no_rerun.stdout.strip() == "None", f"{sys.executable} has rerun: use one without"
    err = refused("--python", sys.executable, "--save", str(tmp_path / "x.rrd"))
    assert f"pip install '{PIN}'" in err and sys.executable in err, err
    assert not (tmp_path / "x.rrd").exists()
    snap = tmp_path / "none.mcap"
    exported = rbus.cli(
        "export",
        "--format",
        "rrd",
        "--python",
        sys.executable,
        str(snap),
        "-o",
        "y.rrd",
        check=False,
    )
    assert exported.returncode != 0 and "none.mcap" in exported.stderr, exported.stderr

    # A URL that is not rerun's, and one where nothing listens.
    err = refused("--connect", "http://127.0.0.1:9876/proxy")
    assert "bad rerun URL" in err and "rerun+http://" in err, err
    err = refused("--connect", "rerun+http://127.0.0.1:9876/viewer")
    assert "the path must be /proxy" in err, err
    port = free_port()
    err = refused("--connect", f"rerun+http://127.0.0.1:{port}/proxy")
    assert f"no rerun viewer or server at rerun+http://127.0.0.1:{port}/proxy" in err, err

    # An --save path that cannot be written.
    err = refused("--save", str(tmp_path / "no" / "such" / "dir.rrd"))
    assert "cannot save to" in err and "No such file or directory" in err, err
    err = refused("--save", str(tmp_path))
    assert "is a directory" in err, err

    # A missing interpreter.
    err = refused("--python", str(tmp_path / "nopython"))
    assert "no Python interpreter" in err, err


KINDS = (
    TESTS_ON_PATH
    + """
import numpy as np
from numpy.typing import NDArray
from rt_schema import event, row

Shapes = event(
    "rt.shapes",
    step=int,
    bars=NDArray[np.float32],
    cube=NDArray[np.float32],
    rgba=NDArray[np.uint8],
)

telemetry = snapbus.get_telemetry("lab.kinds")
for i in range(6):
    telemetry.snapshot(snapbus.INFO, row(i))
    telemetry.snapshot(snapbus.INFO, Shapes(
        step=i,
        bars=np.arange(40, dtype=np.float32) * i,
        cube=np.zeros((2, 3, 4, 5), np.float32) + i,
        rgba=np.full((3, 2, 4), i, np.uint8),
    ))
assert snapbus.stats()["written"] == 12
"""
)


def test_every_kind_of_field_goes_to_its_archetype(rbus: Bus, tmp_path: Path) -> None:
    """The mapping table of the README, row by row, on the round-trip tests' schema (every
    field kind; an Optional that is sometimes None, lists of varying length) and on arrays of
    other shapes."""
    from conftest import run_producer

    out = tmp_path / "kinds.rrd"
    # `--timeline` replaces the default names: `small` (a u8 field) and `step` are timelines.
    timelines = ("--timeline", "small", "--timeline", "step")
    cid, _ = attach_rerun(rbus, "--save", str(out), "--schema", "rt.*", *timelines)
    run_producer(rbus, KINDS)
    wait_until("12 records at the bridge", lambda: delivered(rbus, cid)[0] >= 12)
    detach(rbus, cid)
    rrd("verify", str(out))
    t = rrd_tables(out)
    # The producer's name (the script's: `-c` here) is the first part of every path.
    producer = next(e.split("/")[1] for e in t if "/rt.row/" in e)
    row = f"/{producer}/rt.row/"

    def values(entity: str, column: str = "Scalars:scalars") -> List[List[float]]:
        return [numbers(r[column]) for r in t[row + entity] if column in r]

    # Scalars: ints, floats, bools, unsigned; one row per record, on the timelines asked for.
    assert values("count") == [[float(-(10**12) + i)] for i in range(6)]
    assert [int(r["small"]) for r in t[row + "count"]] == list(range(6))
    assert values("ratio") == [[pytest.approx(i / 3)] for i in range(6)]
    assert values("flag") == [[1.0 if i % 2 == 0 else 0.0] for i in range(6)]
    # An Optional: only the records that have a value (i % 3 != 0).
    assert values("maybe") == [[float(i)] for i in range(6) if i % 3]
    # Small lists: a series per index; empty ones skipped. Structs and maps by path.
    assert values("values") == [[float(v) for v in range(i % 5)] for i in range(6) if i % 5]
    assert values("pose/y") == [[-float(i)] for i in range(6)]
    assert values("table/a") == [[float(i)] for i in range(6)]
    assert values("poses/0/x") == [[1.0] for i in range(6) if i % 3]
    # Strings and enums: text logs.
    names = [r["TextLog:text"].strip("[]") for r in t[row + "name"]]
    assert names == [f"row-{i}-é" for i in range(6)]
    assert len(t[row + "mode"]) == 6 and len(t[row + "heading"]) == 6
    # 2-D floats: depth images (f32, f64) with a colormap; 3-D with 3 or 4 channels: images.
    depth = t[row + "patch"]
    assert sum("DepthImage:buffer" in r for r in depth) == 6
    static = [r for r in depth if "DepthImage:format" in r]
    assert len(static) == 1 and "width: 4, height: 3" in static[0]["DepthImage:format"]
    assert "DepthImage:colormap" in static[0]
    assert sum("DepthImage:buffer" in r for r in t[row + "grids/g"]) == 6
    image = t[row + "image"]
    assert sum("Image:buffer" in r for r in image) == 6
    fmt = [r["Image:format"] for r in image if "Image:format" in r]
    assert len(fmt) == 1 and "width: 2, height: 2" in fmt[0] and "color_model: 2" in fmt[0]
    shapes = f"/{producer}/rt.shapes/"
    rgba = [r["Image:format"] for r in t[shapes + "rgba"] if "Image:format" in r]
    assert len(rgba) == 1 and "width: 2, height: 3" in rgba[0] and "color_model: 3" in rgba[0]
    # Long 1-D arrays: bar charts; other shapes: tensors (one row per record, on `step`).
    bars = t[shapes + "bars"]
    assert sorted(int(r["step"]) for r in bars if "BarChart:values" in r) == list(range(6))
    cube = t[shapes + "cube"]
    assert sorted(int(r["step"]) for r in cube if "Tensor:data" in r) == list(range(6))
    # Nothing unshowable (bytes) made an entity.
    assert row + "blob" not in t


DYNAMIC = """
import dataclasses
from typing import Any, ClassVar, Dict
import numpy as np

@dataclasses.dataclass
class Seen:
    schema_id: ClassVar[str] = "rt.seen"
    schema_version: ClassVar[int] = 1
    step: int
    extra: Dict[str, Any]
    anything: Any

telemetry = snapbus.get_telemetry("lab.dynamic")
for i in range(6):
    extra = dict(loss=0.5 * i, model=dict(steps=i + 1), image=np.full((3, 2), i, np.uint8))
    # The same field holds a number in some records and a map in others.
    anything = i if i % 2 else dict(k=float(i))
    telemetry.snapshot(snapbus.INFO, Seen(step=i, extra=extra, anything=anything))
assert snapbus.stats()["written"] == 6
"""


def test_dynamic_values_go_to_the_archetypes_of_their_values(rbus: Bus, tmp_path: Path) -> None:
    """A `Dict[str, Any]` field: its numbers are scalars under their keys, its 2-D array an
    image; a field whose shape changes from record to record is shown as each record has it."""
    from conftest import run_producer

    out = tmp_path / "dynamic.rrd"
    cid, _ = attach_rerun(rbus, "--save", str(out), "--schema", "rt.*")
    run_producer(rbus, DYNAMIC)
    wait_until("6 records at the bridge", lambda: delivered(rbus, cid)[0] >= 6)
    detach(rbus, cid)
    rrd("verify", str(out))
    t = rrd_tables(out)
    producer = next(e.split("/")[1] for e in t if "/rt.seen/" in e)
    seen = f"/{producer}/rt.seen/"

    def values(entity: str) -> List[List[float]]:
        # In the order of the `step` timeline: records of both shapes of `anything` are sent
        # in batches of their own.
        rows = sorted(
            (r for r in t[seen + entity] if "Scalars:scalars" in r), key=lambda r: int(r["step"])
        )
        return [numbers(r["Scalars:scalars"]) for r in rows]

    assert values("extra/loss") == [[0.5 * i] for i in range(6)]
    assert values("extra/model/steps") == [[float(i + 1)] for i in range(6)]
    image = t[seen + "extra/image"]
    assert sum("Image:buffer" in r for r in image) == 6
    assert values("anything") == [[float(i)] for i in range(6) if i % 2]
    assert values("anything/k") == [[float(i)] for i in range(6) if i % 2 == 0]


def test_a_producer_killed_shows_as_a_warning(rbus: Bus, tmp_path: Path) -> None:
    out = tmp_path / "died.rrd"
    cid, _ = attach_rerun(rbus, "--save", str(out))
    code = (
        "import snapbus, sys, time\n"
        "assert snapbus.wait_for_bus(30)\n"
        "from dataclasses import dataclass\n"
        "from typing import ClassVar\n"
        "@dataclass\n"
        "class Beat:\n"
        "    schema_id: ClassVar[str] = 'rt.beat'\n"
        "    schema_version: ClassVar[int] = 1\n"
        "    step: int\n"
        "snapbus.get_telemetry('lab').snapshot(snapbus.INFO, Beat(step=7))\n"
        "print('emitted', flush=True)\n"
        "time.sleep(600)\n"
    )
    victim = rbus.spawn_py(code)
    assert victim.popen.stdout is not None
    assert victim.popen.stdout.readline().strip() == "emitted"
    wait_until("the record at the bridge", lambda: delivered(rbus, cid)[0] >= 1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.popen.wait()

    def dead() -> bool:
        return any(p.get("status") == "dead" for p in rbus.ls()["producers"])  # type: ignore[union-attr]

    wait_until("the producer dead in ls", dead)
    # The bridge hears of it from the broker, and says so in its log too.
    log = Path(str(consumer_of(rbus, cid)["log"]))  # type: ignore[index]
    wait_until("the death in the bridge's log", lambda: "died" in log.read_text())
    detach(rbus, cid)
    t = rrd_tables(out)
    logs = [r for e, rows in t.items() if e.endswith("/snapbus") for r in rows]
    died = [r for r in logs if "died" in r["TextLog:text"]]
    assert len(died) == 1 and died[0]["TextLog:level"] == "[WARN]", logs
    assert f"(pid {victim.pid}) died" in died[0]["TextLog:text"]


def test_a_step_that_restarts_each_episode_continues_across_episodes() -> None:
    from snapbus.rerun._mapping import Continued

    restarting = Continued()
    got = [restarting.value(e, s) for e in range(3) for s in range(4)]
    assert got == list(range(12))
    # Episodes of different lengths, an episode seen again (a second run): still increasing.
    uneven = Continued()
    got = [uneven.value(e, s) for e, n in ((0, 2), (1, 5), (0, 3)) for s in range(n)]
    assert got == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    # A step that already counts on across episodes is left as it is.
    counting = Continued()
    assert [counting.value(s // 4, s) for s in range(12)] == list(range(12))


def test_the_pinned_rerun_imports_without_a_warning() -> None:
    out = subprocess.run(
        [
            rerun_python(),
            "-W",
            "error",
            "-c",
            "from snapbus.rerun import _setup; _setup.import_rerun()",
        ],
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    from snapbus.rerun._setup import supported

    assert supported("0.41.0") and supported("0.36.3") and supported("0.40.1")
    assert not supported("0.35.0") and not supported("0.42.0") and not supported("dev")

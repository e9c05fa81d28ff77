"""tbp.monty's result files from the bus (`snapbus.reports`): episodes emitted through
tbp.monty's own `getTelemeter` and `SnapbusHandler` (real producer processes) and written by
`python -m snapbus.reports` (a real consumer process) equal, byte for byte, what tbp-monty's
`BasicCSVStatsHandler` writes from the same stats (`monty_stats.ReferenceCSV`); the JSON Lines
parse to what `DetailedJSONHandler` writes; a second run renames the first files `*_old`; an
earlier run's records in the ring are not mixed in; spawned workers land in one CSV in episode
order."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import TESTS_ON_PATH, Bus, run_producer, wait_until

try:
    import tbp.monty.telemetry  # noqa: F401 (installed?)
except ImportError:
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("tbp-monty is not installed (.ci/test installs it)", allow_module_level=True)

import monty_stats

# What a monty experiment's telemetry config says (docs/python.md), and one episode's event.
EMIT = (
    TESTS_ON_PATH
    + """
import logging.config
from tbp.monty import telemetry
from tbp.monty.frameworks.experiments.mode import ExperimentMode
from tbp.monty.telemetry.schemas import TelemetryEvent
import monty_stats

# Made at import by monty's modules, before the experiment configures logging.
telemeter = telemetry.getTelemeter("tbp.monty.frameworks.experiments.monty_experiment")

def configure():
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"snapbus": {"class": "snapbus.SnapbusHandler", "schema_prefix": "monty."}},
        "loggers": {"telemetry.tbp.monty": {"handlers": ["snapbus"], "level": "INFO"}},
    })

def emit(run, started, episode):
    telemeter.info(TelemetryEvent(
        kind="EpisodeStats", run=run, run_started=started, mode=ExperimentMode.TRAIN,
        episode=episode, stats=monty_stats.stats(episode), overall=monty_stats.overall(episode),
    ))
"""
)


def produce(bus: Bus, run: str, started: float, episodes: List[int]) -> None:
    code = EMIT + f"configure()\nfor e in {episodes!r}:\n    emit({run!r}, {started!r}, e)\n"
    run_producer(bus, code)


def report(bus: Bus, out: Path, *args: str) -> str:
    """`python -m snapbus.reports` over what the rings hold, to its end."""
    p = bus.spawn_py(
        [
            "-m",
            "snapbus.reports",
            "--output-dir",
            str(out),
            "--from",
            "oldest",
            "--until-end",
            *args,
        ]
    )
    done = p.wait()
    assert done.returncode == 0, done.stderr
    return done.stderr


def reference(out: Path, episodes: List[int]) -> None:
    """What tbp.monty writes for `episodes` into `out` (a fresh handler: one run)."""
    out.mkdir(exist_ok=True)
    csv = monty_stats.ReferenceCSV()
    for e in episodes:
        csv.report_episode({e: monty_stats.stats(e)}, out, "train")
    json_path = out / "detailed_run_stats.json"
    if json_path.exists():
        json_path.rename(out / "detailed_run_stats_old.json")
    for e in episodes:
        monty_stats.reference_json(out, e, monty_stats.stats(e))


def same_json(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def json_lines(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def csv_rows(out: Path) -> List[Any]:
    """(target episode, lm_id) of the CSV's rows, read back with pandas (a 2-D array's cell
    spans lines)."""
    import pandas as pd

    df = pd.read_csv(out / "train_stats.csv", index_col=0)
    return [(int(r.split("_")[1]) // 10, lm) for r, lm in zip(df["result"], df["lm_id"])]


def assert_same_files(got: Path, want: Path, suffix: str = "") -> None:
    csv = f"train_stats{suffix}.csv"
    assert (got / csv).read_bytes() == (want / csv).read_bytes(), (
        f"{csv} differs:\n--- consumer\n{(got / csv).read_text()[:3000]}\n--- tbp.monty\n"
        f"{(want / csv).read_text()[:3000]}"
    )
    js = f"detailed_run_stats{suffix}.json"
    a, b = json_lines(got / js), json_lines(want / js)
    assert same_json(a, b), f"{js}:\n{a}\n{b}"


def test_csv_and_json_equal_tbp_montys_and_a_second_run_renames_them(
    bus: Bus, tmp_path: Path
) -> None:
    out, want = tmp_path / "out", tmp_path / "want"
    produce(bus, "run-a", 1000.0, [0, 1, 2])
    report(bus, out)
    reference(want, [0, 1, 2])
    assert_same_files(out, want)
    assert csv_rows(out) == [(e, f"LM_{lm}") for e in range(3) for lm in range(2)]

    # The second run (its records after the first's in the ring): the first's files become
    # `*_old`, as tbp.monty's second run into the directory does, and nothing is mixed.
    produce(bus, "run-b", 2000.0, [0, 1, 2, 3])
    stderr = report(bus, out, "--run", "run-b")
    assert "3 of other runs skipped" in stderr, stderr
    reference(want, [0, 1, 2, 3])
    assert_same_files(out, want)
    first = tmp_path / "first"
    reference(first, [0, 1, 2])
    assert (out / "train_stats_old.csv").read_bytes() == (first / "train_stats.csv").read_bytes()


def test_an_earlier_runs_records_in_the_ring_are_not_mixed_in(bus: Bus, tmp_path: Path) -> None:
    produce(bus, "old", 1000.0, [0, 1, 2, 3])  # a stale run, still in the ring
    produce(bus, "new", 2000.0, [0, 1])
    out, want = tmp_path / "out", tmp_path / "want"
    report(bus, out)
    reference(want, [0, 1])
    assert_same_files(out, want)


WORKER = (
    EMIT
    + """
def worker(run, started, episodes):
    configure()
    for e in episodes:
        emit(run, started, e)
    snapbus.shutdown()

if __name__ == "__main__":
    import multiprocessing as mp
    ctx = mp.get_context(sys.argv[1])
    # One worker per episode in turn, as tbp.monty's run_parallel hands them out: the bus sees
    # them out of order.
    procs = [ctx.Process(target=worker, args=("par", 3000.0, list(range(i, 20, 4))))
             for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0, p.exitcode
"""
)


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_four_workers_land_in_one_csv_in_episode_order(
    bus: Bus, tmp_path: Path, start: str
) -> None:
    """`snapbus attach monty`, a consumer supervised by the broker, started before the run."""
    out, want = tmp_path / "out", tmp_path / "want"
    attached = bus.cli(
        "attach", "monty", "--output-dir", str(out), "--python", sys.executable, "--from", "latest"
    )
    cid = attached.stdout.strip()
    assert f"snapbus detach {cid}" in attached.stderr, attached.stderr
    script = tmp_path / "parallel.py"
    script.write_text("import sys, snapbus\n" + WORKER)
    done = bus.spawn_py([str(script), start]).wait()
    assert done.returncode == 0, done.stderr
    csv = out / "train_stats.csv"
    wait_until("20 episodes in the CSV", lambda: csv.exists() and len(csv_rows(out)) == 20 * 2)
    bus.cli("detach", cid)
    reference(want, list(range(20)))
    assert_same_files(out, want)
    assert csv_rows(out) == [(e, f"LM_{lm}") for e in range(20) for lm in range(2)]
    # One experiment summary over every worker's episodes (run_parallel's get_overall_stats).
    summary = json.loads((out / "train_overall_stats.json").read_text())
    assert summary == {
        "overall/percent_correct": 50.0,  # episode/correct: e % 2
        "overall/run_time": sum(0.5 + e for e in range(20)),
        "overall/avg_episode_run_time": sum(0.5 + e for e in range(20)) / 20,
        "overall/num_episodes": 20,
        "overall/num_processes": 4,
    }


def test_per_episode_json_files_of_the_selected_episodes(bus: Bus, tmp_path: Path) -> None:
    """`DetailedJSONHandler(detailed_save_per_episode=True, detailed_episodes_to_save=...)`."""
    out = tmp_path / "out"
    produce(bus, "r", 1.0, [0, 1, 2, 3])
    report(bus, out, "--detailed-per-episode", "--detailed-episodes", "1,3")
    files = sorted(p.name for p in (out / "detailed_run_stats").iterdir())
    assert files == ["episode_000001.json", "episode_000003.json"]
    assert not (out / "detailed_run_stats.json").exists()
    for e in (1, 3):
        text = (out / "detailed_run_stats" / f"episode_{e:06d}.json").read_text()
        want = json.dumps({e: monty_stats.stats(e)}, cls=monty_stats._Encoder)
        assert same_json(json.loads(text), json.loads(want)) and not text.endswith("\n")


def test_attach_monty_fails_in_the_caller_on_a_bad_interpreter(bus: Bus, tmp_path: Path) -> None:
    out = bus.cli(
        "attach", "monty", "--output-dir", str(tmp_path), "--python", "/no/python", check=False
    )
    assert out.returncode != 0 and "/no/python" in out.stderr, out.stderr
    assert not bus.ls().get("consumers"), bus.ls()


def test_a_record_off_the_contract_is_skipped_and_told(bus: Bus, tmp_path: Path) -> None:
    code = EMIT + (
        "configure()\n"
        "tel = snapbus.get_telemetry('x')\n"
        "tel.snapshot(20, {'kind': 'monty.EpisodeStats', 'episode': 7, 'mode': 'train',"
        " 'run': 'r', 'run_started': 1.0, 'stats': 'not a mapping'})\n"
        "emit('r', 1.0, 0)\n"
    )
    run_producer(bus, code)
    out = tmp_path / "out"
    stderr = report(bus, out)
    assert "field 'stats' is str, not a mapping" in stderr, stderr
    assert "1 episodes" in stderr and "1 off the contract skipped" in stderr, stderr
    assert csv_rows(out) == [(0, "LM_0"), (0, "LM_1")]


def wandb_history(out: Path) -> List[Dict[str, Any]]:
    """The history rows of the offline run under `out/wandb`, read with wandb's own reader of
    its `.wandb` log (`DataStore`, what `wandb sync` uses)."""
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal.datastore import DataStore

    (path,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    store = DataStore()
    store.open_for_scan(str(path))
    rows = []
    while True:
        data = store.scan_data()
        if data is None:
            return rows
        rec = pb.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "history":
            rows.append(
                {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in rec.history.item
                }
            )


def test_wandb_offline_run_holds_the_overall_series_and_the_stats_table(
    bus: Bus, tmp_path: Path
) -> None:
    if os.environ.get("CI", "").lower() != "true":  # .ci/test installs it
        pytest.importorskip("wandb")
    out = tmp_path / "out"
    produce(bus, "wb", 1.0, [0, 1, 2])
    report(bus, out, "--wandb")
    *rows, summary = wandb_history(out)
    assert [r["_step"] for r in rows] == [0, 1, 2]
    # The experiment summary after them (run_parallel's get_overall_stats).
    assert summary["_step"] == 3, summary
    assert summary["overall/percent_correct"] == pytest.approx(100 / 3)
    assert summary["overall/num_processes"] == 1
    for e, r in enumerate(rows):
        for key, value in monty_stats.overall(e).items():
            assert r[key] == pytest.approx(value), (key, r)
    # The last table holds every episode's LM rows, its cells as W&B serialised them.
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    table = json.loads((run_dir / "files" / rows[-1]["train_stats_table/path"]).read_text())
    assert rows[-1]["train_stats_table/nrows"] == 3 * 2
    cols = table["columns"]
    assert cols[-1] == "lm_id" and "primary_performance" in cols
    got = [(r[cols.index("result")], r[cols.index("lm_id")]) for r in table["data"]]
    assert got == [(f"mug_{e * 10 + lm}", f"LM_{lm}") for e in range(3) for lm in range(2)]


def test_a_file_is_kept_in_episode_order_whatever_order_episodes_come_in(tmp_path: Path) -> None:
    from snapbus.reports import OrderedFile

    path = tmp_path / "x.csv"
    path.write_text("an earlier run\n")
    f = OrderedFile(path)
    f.add(2, "h2\n", "r2\n")
    f.write()  # the first write renames the earlier file
    assert (tmp_path / "x_old.csv").read_text() == "an earlier run\n"
    assert path.read_text() == "h2\nr2\n"
    f.add(3, "h3\n", "r3\n")
    f.write()  # in order: appended
    assert path.read_text() == "h2\nr2\nr3\n"
    f.add(0, "h0\n", "r0\n")
    f.add(1, "h1\n", "r1\n")
    f.write()  # before those written: rewritten, the first episode's header on top
    assert path.read_text() == "h0\nr0\nr1\nr2\nr3\n"
    assert not (tmp_path / "x.csv.tmp").exists()


GENERIC = """
from dataclasses import dataclass
from typing import ClassVar
import numpy as np
from numpy.typing import NDArray

@dataclass
class EpisodeEnd:
    schema_id: ClassVar[str] = "lab.episode_end"
    schema_version: ClassVar[int] = 1
    episode: int
    mode: str
    reward: float
    position: NDArray[np.float64]
    run: str

tel = snapbus.get_telemetry("lab")
for e in (2, 0, 1, 3):
    mode = "eval" if e == 3 else "train"
    tel.snapshot(20, EpisodeEnd(e, mode, 0.5 * e - 0.25, np.arange(3.0) * e, "g"))
"""


def test_the_generic_layout_writes_a_row_per_episode_of_any_schema(
    bus: Bus, tmp_path: Path
) -> None:
    import numpy as np
    import pandas as pd

    out = tmp_path / "out"
    run_producer(bus, GENERIC)
    report(bus, out, "--layout", "generic", "--schema", "lab.episode_end")
    rows = {
        e: {
            "episode": e,
            "mode": "eval" if e == 3 else "train",
            "reward": 0.5 * e - 0.25,
            "position": np.arange(3.0) * e,
        }
        for e in range(4)
    }
    want = pd.DataFrame([rows[e] for e in (0, 1, 2)]).to_csv(None, index=False)
    assert (out / "train_episodes.csv").read_text() == want
    assert (out / "eval_episodes.csv").read_text() == pd.DataFrame([rows[3]]).to_csv(
        None, index=False
    )
    got = json_lines(out / "episodes.json")
    assert [list(g) for g in got] == [["0"], ["1"], ["2"], ["3"]]
    assert got[2]["2"] == {**rows[2], "position": [0.0, 2.0, 4.0]}

"""`snapbus export` of a demo recording, read where researchers read it: the Parquet files with
pyarrow, pandas, polars and DuckDB (a UTC timestamp, tensors as lists of their dtype with their
shape), the CSV with short fixed arrays split into a column per element; `Recording.to_pandas`
and `to_arrow` with the same columns. Every value is checked against `snapbus demo --help`."""

from __future__ import annotations

import csv
import importlib
import os
import sys
from pathlib import Path
from typing import Any, Tuple

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import Bus, demo_step_expected

import snapbus

EPISODES, STEPS, WIDTH, HEIGHT = 3, 5, 8, 6


def _recording(bus: Bus, tmp_path: Path) -> Path:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", str(EPISODES), "--steps", str(STEPS))
    out = tmp_path / "snap.mcap"
    bus.cli("snapshot", "-o", str(out))
    return out


def test_parquet_export_of_the_demo_reads_back_in_pyarrow_and_pandas(
    bus: Bus, tmp_path: Path
) -> None:
    out = tmp_path / "parquet"
    bus.cli("export", str(_recording(bus, tmp_path)), "--format", "parquet", "-o", str(out))
    table = pq.read_table(out / "demo.step.parquet")
    assert table.num_rows == EPISODES * STEPS
    rows = table.to_pylist()
    frame = pd.read_parquet(out / "demo.step.parquet")
    assert len(frame) == EPISODES * STEPS and list(frame.columns) == table.column_names
    for i, row in enumerate(rows):
        e, s = divmod(i, STEPS)
        want = demo_step_expected(e, s, WIDTH, HEIGHT)
        assert (row["episode"], row["step"], row["mode"]) == (e, s, want["mode"])
        assert row["reward"] == pytest.approx(want["reward"])
        assert row["position"] == pytest.approx(want["position"])
        assert row["observation.shape"] == [HEIGHT, WIDTH]
        image = np.asarray(row["observation"]).reshape(row["observation.shape"])
        assert image.tolist() == want["observation"]
        # pandas sees the same cells: the image as an array cell, reshaped by its shape cell.
        cell = frame["observation"].iloc[i]
        shape = list(frame["observation.shape"].iloc[i])
        assert np.asarray(cell).reshape(shape).tolist() == want["observation"]


def test_csv_export_splits_the_position_into_a_column_per_element(bus: Bus, tmp_path: Path) -> None:
    out = tmp_path / "csv"
    bus.cli("export", str(_recording(bus, tmp_path)), "--format", "csv", "-o", str(out))
    with (out / "demo.step.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == EPISODES * STEPS
    assert {"position.0", "position.1", "position.2"} <= set(rows[0])
    assert "position" not in rows[0]
    for i, row in enumerate(rows):
        e, s = divmod(i, STEPS)
        want = demo_step_expected(e, s, WIDTH, HEIGHT)
        got = [float(row[f"position.{k}"]) for k in range(3)]
        assert got == pytest.approx(want["position"])


def _peer(name: str, ci_from: Tuple[int, int] = (3, 8)) -> Any:
    """A reader that the Parquet export is checked against: skipped where it is not installed,
    a failure under CI=true from Python `ci_from` on (.ci/test installs it there)."""
    if os.environ.get("CI") == "true" and sys.version_info[:2] >= ci_from:
        return importlib.import_module(name)
    return pytest.importorskip(name)


def test_parquet_types_read_the_same_in_pyarrow_pandas_polars_and_duckdb(
    bus: Bus, tmp_path: Path
) -> None:
    out = tmp_path / "parquet"
    bus.cli("export", str(_recording(bus, tmp_path)), "--format", "parquet", "-o", str(out))
    path = out / "demo.step.parquet"
    n = EPISODES * STEPS
    # pyarrow: the types as written.
    schema = pq.read_schema(path)
    assert str(schema.field("t_nanos").type) == "timestamp[ns, tz=UTC]"
    assert schema.field("observation").type.value_type == "uint8"
    assert schema.field("position").type.value_type == "float"  # f32, not double
    assert schema.field("observation.shape").type.value_type == "int64"
    assert schema.field("observation").metadata[b"snapbus.shape_column"] == b"observation.shape"
    assert {"producer", "pid", "level", "seq", "version"} <= set(schema.names)
    # pandas.
    frame = pd.read_parquet(path)
    assert str(frame["t_nanos"].dtype) == "datetime64[ns, UTC]"
    assert frame["observation"].iloc[0].dtype == np.uint8
    assert (frame["level"] == "INFO").all() and (frame["producer"] == "demo").all()
    assert frame["pid"].nunique() == 1 and int(frame["pid"].iloc[0]) > 0
    # polars.
    pl = _peer("polars")
    # polars 1.8.2, the last release for CPython 3.8, cannot parse the footer parquet-rs 60
    # writes ("Invalid thrift: bad data"; pyarrow reads it, and so does polars after pyarrow
    # rewrites it): there it reads through pyarrow. From 1.9 on (CI: 3.11, 3.13), its own
    # reader reads the file.
    df = pl.read_parquet(path, use_pyarrow=sys.version_info < (3, 9))
    assert df.schema["t_nanos"] == pl.Datetime("ns", "UTC")
    assert df.schema["observation"] == pl.List(pl.UInt8)
    assert df.schema["position"] == pl.List(pl.Float32)
    assert df.height == n and df["level"].to_list() == ["INFO"] * n
    first = df.row(0, named=True)
    want = demo_step_expected(0, 0, WIDTH, HEIGHT)
    assert (
        np.array(first["observation"]).reshape(first["observation.shape"]).tolist()
        == (want["observation"])
    )
    # DuckDB.
    duckdb = _peer("duckdb", ci_from=(3, 11))  # no DuckDB wheel for 3.8 (.ci/test)
    types = {
        row[0]: row[1]
        for row in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()
    }
    # DuckDB >= 1.5 keeps the nanoseconds; older ones read the same column as microseconds.
    assert types["t_nanos"] in ("TIMESTAMPTZ_NS", "TIMESTAMP WITH TIME ZONE")
    assert types["observation"] == "UTINYINT[]"
    assert types["position"] == "FLOAT[]"
    assert types["observation.shape"] == "BIGINT[]"
    rows = duckdb.sql(
        f"SELECT episode, step, len(observation) FROM read_parquet('{path}') ORDER BY t_nanos"
    ).fetchall()
    assert rows == [(e, s, WIDTH * HEIGHT) for e in range(EPISODES) for s in range(STEPS)]
    # The time is the recorded time (within the test's run), in UTC.
    t0 = frame["t_nanos"].iloc[0]
    assert abs((pd.Timestamp.now(tz="UTC") - t0).total_seconds()) < 600


def assert_same_frame(a: Any, b: Any) -> None:
    """Equal frames, array cells compared by value (older pandas cannot compare them)."""
    assert list(a.columns) == list(b.columns) and list(a.dtypes) == list(b.dtypes)
    assert len(a) == len(b)
    for c in a.columns:
        if a[c].dtype == object:
            assert all(np.array_equal(x, y) for x, y in zip(a[c], b[c])), c
        else:
            assert a[c].equals(b[c]), c


def test_to_pandas_is_columnar_typed_and_can_be_called_again(bus: Bus, tmp_path: Path) -> None:
    rec = snapbus.open_recording(_recording(bus, tmp_path))
    first = rec.to_pandas("demo.step")
    # Iterating the recording in between changes nothing: each call reads the file anew.
    assert sum(1 for _ in rec) >= EPISODES * STEPS
    again = rec.to_pandas("demo.step")
    assert len(first) == EPISODES * STEPS
    assert_same_frame(first, again)
    assert str(first["t_nanos"].dtype) == "datetime64[ns, UTC]"
    assert str(first["episode"].dtype) == "uint32" and str(first["reward"].dtype) == "float64"
    for i in range(len(first)):
        e, s = divmod(i, STEPS)
        want = demo_step_expected(e, s, WIDTH, HEIGHT)
        cell = first["observation"].iloc[i]
        assert cell.dtype == np.uint8 and cell.shape == (HEIGHT, WIDTH)
        assert cell.tolist() == want["observation"]
        assert first["position"].iloc[i].dtype == np.float32
        assert first["mode"].iloc[i] == want["mode"]
    table = rec.to_arrow("demo.step")
    assert table.equals(rec.to_arrow("demo.step"))
    assert str(table.schema.field("observation").type.value_type) == "uint8"
    with pytest.raises(KeyError, match=r"demo\.nope"):
        rec.to_pandas("demo.nope")

"""`snapbus export` of a demo recording, read where researchers read it: the Parquet files with
pyarrow and pandas (tensors as list columns with their shape), the CSV with short fixed arrays
split into a column per element. Every value is checked against `snapbus demo --help`."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import Bus, demo_step_expected

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

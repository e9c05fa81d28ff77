"""Issue #45 item 5: recordings are LZ4-compressed by default; `open_recording`, `snapbus
inspect` and the official `mcap` reader (with the `lz4` package, which it needs for LZ4 chunks:
imported here, so a missing `lz4` fails this test instead of skipping it) read them exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import lz4.frame  # noqa: F401  (the mcap reader decodes LZ4 chunks with it)
from conftest import Bus
from mcap.reader import make_reader

import snapbus


def _events(path: Path) -> List[Any]:
    with snapbus.open_recording(path) as rec:
        out = [(ev.schema.id, bytes(ev.data)) for ev in rec if ev.schema.id.startswith("demo.")]
        assert rec.complete and not rec.damage and rec.error is None
    return out


def test_a_compressed_snapshot_reads_back_exactly_everywhere(bus: Bus, tmp_path: Path) -> None:
    bus.cli(
        "demo", "--no-echo", "--rate", "0", "--episodes", "3", "--steps", "50",
        "--image", "64x64",
    )  # fmt: skip
    lz4, plain = tmp_path / "lz4.mcap", tmp_path / "plain.mcap"
    bus.cli("snapshot", "-o", str(lz4))
    bus.cli("snapshot", "-o", str(plain), "--compression", "none")
    events = _events(lz4)
    assert len(events) == 3 * 51
    assert events == _events(plain)
    assert lz4.stat().st_size * 2 < plain.stat().st_size, (lz4.stat(), plain.stat())

    with lz4.open("rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        assert summary is not None
        assert {c.compression for c in summary.chunk_indexes} == {"lz4"}
        got = [
            (schema.name, bytes(message.data))
            for schema, _, message in reader.iter_messages(log_time_order=False)
            if schema is not None and schema.name.startswith("demo.")
        ]
    assert got == events

    report = json.loads(bus.cli("inspect", "--json", str(lz4)).stdout)
    comp = report["compression"]
    assert comp["codecs"] == ["lz4"] and comp["ratio"] < 0.5, comp
    assert comp["stored_bytes"] * 2 < comp["uncompressed_bytes"], comp
    text = bus.cli("inspect", str(lz4)).stdout
    assert "compression lz4" in text and "ratio" in text, text
    plain_report = json.loads(bus.cli("inspect", "--json", str(plain)).stdout)
    assert plain_report["compression"]["codecs"] == ["none"]

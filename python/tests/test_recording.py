"""open_recording over `snapbus record` and `snapbus snapshot` files of a demo; to_pandas;
cut and corrupt files reported honestly; missing files and non-recordings raise."""

from __future__ import annotations

import signal
from pathlib import Path

import lz4.frame
import numpy as np
import pytest
from conftest import (
    DEMO_STEP_FIELDS,
    Bus,
    demo_episode_end_expected,
    demo_step_expected,
    wait_until,
)

import snapbus

EPISODES, STEPS = 3, 4


def _snapshot(bus: Bus, tmp_path: Path) -> Path:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", str(EPISODES), "--steps", str(STEPS))
    out = tmp_path / "snap.mcap"
    bus.cli("snapshot", "-o", str(out))
    return out


def test_open_recording_of_a_snapshot_gives_the_same_events(bus: Bus, tmp_path: Path) -> None:
    rec = snapbus.open_recording(_snapshot(bus, tmp_path))
    evs = [e for e in rec if e.schema.id.startswith("demo.")]
    assert rec.complete and rec.error is None and rec.damage == [] and rec.lost == 0
    assert len(evs) == EPISODES * (STEPS + 1)
    steps = [e for e in evs if e.schema.id == "demo.step"]
    for i, ev in enumerate(steps):
        e, s = divmod(i, STEPS)
        want = demo_step_expected(e, s)
        assert (ev.payload.episode, ev.payload.step, ev.payload.mode) == (e, s, want["mode"])
        assert ev.payload.observation.tolist() == want["observation"]
        assert ev.producer.name == "demo" and ev.emitter == "demo" and ev.level == 20
    ends = [e.payload for e in evs if e.schema.id == "demo.episode_end"]
    assert [p.total_reward for p in ends] == pytest.approx(
        [demo_episode_end_expected(e, STEPS)["total_reward"] for e in range(EPISODES)]
    )
    assert any(name == "snapbus.recording" for name, _ in rec.metadata)


def test_to_pandas_gives_dotted_columns_and_array_cells(bus: Bus, tmp_path: Path) -> None:
    path = _snapshot(bus, tmp_path)
    df = snapbus.open_recording(path).to_pandas("demo.step")
    assert len(df) == EPISODES * STEPS
    for col in ("t_nanos", "producer", "seq", *DEMO_STEP_FIELDS):
        assert col in df.columns, df.columns
    assert df["producer"].unique().tolist() == ["demo"]
    assert df["reward"].tolist() == pytest.approx(
        [demo_step_expected(e, s)["reward"] for e in range(EPISODES) for s in range(STEPS)]
    )
    cell = df["observation"].iloc[5]
    assert isinstance(cell, np.ndarray) and cell.shape == (6, 8)
    ends = snapbus.open_recording(path).to_pandas("demo.episode_end")
    assert ends["episode"].tolist() == list(range(EPISODES))


def test_nested_records_flatten_to_dotted_columns(bus: Bus, tmp_path: Path) -> None:
    bus.cli("demo", "--rate", "0", "--episodes", "2", "--steps", "3")
    out = tmp_path / "summary.mcap"
    wait_until(
        "a snapshot of the aggregator's summaries",
        lambda: (
            bus.cli(
                "snapshot", "--force", "-o", str(out), "--schema", "demo.step.summary", check=False
            ).returncode
            == 0
        ),
    )
    df = snapbus.open_recording(out).to_pandas("demo.step.summary")
    assert len(df) >= 1
    assert "stats.reward.mean" in df.columns and "stats.position.0.max" in df.columns
    assert df["producer"].iloc[0] != "demo"  # the aggregator emits the summaries
    assert (df["payload.producer"] == "demo").all()  # a payload field named like a header
    assert df["stats.step.count"].iloc[0] == 3


def test_a_recording_made_by_snapbus_record_and_cut_short(bus: Bus, tmp_path: Path) -> None:
    out = tmp_path / "rec.mcap"
    rec_proc = bus.spawn_cli("record", "-o", str(out), "--schema", "demo.*")
    wait_until("the recorder to subscribe", lambda: "record" in str(bus.ls().get("consumers", "")))
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", str(EPISODES), "--steps", str(STEPS))
    total = EPISODES * (STEPS + 1)

    def read_all() -> bool:
        consumers = bus.ls().get("consumers", [])
        assert isinstance(consumers, list)
        return any(c["info"]["kind"] == "recorder" and c["delivered"] >= total for c in consumers)

    # Ctrl-C stops the recorder where it is: first, it has read what the demo wrote.
    wait_until("the recorder has read the demo", read_all)
    rec_proc.signal(signal.SIGINT)
    assert rec_proc.wait().returncode == 0
    rec = snapbus.open_recording(out)
    assert sum(1 for e in rec if e.schema.id.startswith("demo.")) == total
    assert rec.complete
    # The same file cut in the middle: what is there is read, the cut is reported.
    cut = tmp_path / "cut.mcap"
    data = out.read_bytes()
    cut.write_bytes(data[: len(data) * 2 // 3])
    rec2 = snapbus.open_recording(cut)
    n = sum(1 for _ in rec2)
    assert not rec2.complete and rec2.error is not None and "offset" in rec2.error
    assert n <= EPISODES * (STEPS + 1)


def test_a_damaged_chunk_is_skipped_and_reported(bus: Bus, tmp_path: Path) -> None:
    src = _snapshot(bus, tmp_path)
    data = bytearray(src.read_bytes())
    # Flip bytes in the middle of the file (inside a chunk's compressed records).
    mid = len(data) // 2
    for i in range(mid, mid + 16):
        data[i] ^= 0xFF
    bad = tmp_path / "bad.mcap"
    bad.write_bytes(bytes(data))
    rec = snapbus.open_recording(bad)
    list(rec)
    assert rec.damage or rec.error, "the damage must be reported"


def _chunks(data: bytes) -> list[tuple[int, int, int]]:
    """The chunks of an MCAP file, from its top-level records: (start, end, messages), the
    messages counted from the opcodes of the records inside each chunk."""
    out = []
    at = 8
    while at + 9 <= len(data) and data[at] != 0x0F:  # up to the data end record
        opcode, length = data[at], int.from_bytes(data[at + 1 : at + 9], "little")
        end = at + 9 + length
        if opcode == 0x06:
            # start, end, uncompressed size (u64), CRC (u32), compression (u32 + name), length,
            # records (an LZ4 frame for "lz4", snapbus's default).
            name_len = int.from_bytes(data[at + 37 : at + 41], "little")
            name = data[at + 41 : at + 41 + name_len]
            records = data[at + 41 + name_len + 8 : end]
            if name == b"lz4":
                records = lz4.frame.decompress(records)
            r, n = 0, 0
            while r < len(records):
                n += records[r] == 0x05
                r += 9 + int.from_bytes(records[r + 1 : r + 9], "little")
            out.append((at, end, n))
        at = end
    return out


def test_a_flipped_bit_in_the_first_chunk_costs_only_that_chunk(bus: Bus, tmp_path: Path) -> None:
    """Issue #44 item 2: the first chunk declares the schemas and channels; one flipped bit in
    it used to make every later record unreadable. Now only its records are missing (the
    channels come from the summary at the end of the file), and the damage says how many."""
    bus.cli(
        "demo", "--no-echo", "--rate", "0", "--episodes", "4", "--steps", "100",
        "--image", "64x64",
    )  # fmt: skip
    src = tmp_path / "big.mcap"
    bus.cli("snapshot", "-o", str(src))
    good = snapbus.open_recording(src)
    total = sum(1 for _ in good)
    assert good.complete and not good.damage
    data = bytearray(src.read_bytes())
    chunks = _chunks(bytes(data))
    assert len(chunks) >= 2 and sum(c[2] for c in chunks) == total, (chunks, total)
    first_start, first_end, first_records = chunks[0]
    data[(first_start + first_end) // 2] ^= 0x10
    bad = tmp_path / "flipped.mcap"
    bad.write_bytes(bytes(data))
    rec = snapbus.open_recording(bad)
    read = sum(1 for _ in rec)
    assert read == total - first_records, (read, total, first_records, rec.damage)
    assert len(rec.damage) == 1, rec.damage
    assert f"they held {first_records} records" in rec.damage[0], rec.damage


def test_missing_and_non_recording_files_raise(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no recording at"):
        snapbus.open_recording(tmp_path / "missing.mcap")
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"this is not an MCAP file at all")
    with pytest.raises(ValueError, match=r"not a readable snapbus recording.*MCAP"):
        snapbus.open_recording(junk)
    empty = tmp_path / "empty.mcap"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        snapbus.open_recording(empty)

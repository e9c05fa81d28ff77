"""Python → lane → Python: every row of the mapping table emitted by a Python producer in its
own process and read back by a Python subscription (into the user's class with `as_`, and as
the generic decoded payload), and through a recorder's file (`open_recording` and the `mcap`
package's own reader)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, List

import numpy as np
from conftest import TESTS_ON_PATH, Bus, run_producer, wait_until
from mcap.reader import make_reader
from rt_schema import Large, Mode, Pose, Row, Sizes, large, row, sizes

import snapbus

N = 24

PRODUCE = (
    TESTS_ON_PATH
    + f"""
from rt_schema import row
telemetry = snapbus.get_telemetry("lab.roundtrip")
for i in range({N}):
    telemetry.snapshot(snapbus.INFO, row(i))
s = snapbus.stats()
assert s["written"] == {N}, s
"""
)


def assert_same(got: Any, want: Any, path: str = "row") -> None:
    """Deep equality that compares arrays by dtype, shape and values."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{path}: {type(got).__name__}"
        assert got.dtype == want.dtype and got.shape == want.shape, f"{path}: {got!r}"
        assert np.array_equal(got, want), f"{path}: {got!r} != {want!r}"
        assert not got.flags.writeable, f"{path}: a view over the record must be read-only"
    elif dataclasses.is_dataclass(want):
        assert type(got) is type(want), f"{path}: {type(got).__name__}"
        for f in dataclasses.fields(want):
            assert_same(getattr(got, f.name), getattr(want, f.name), f"{path}.{f.name}")
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{path}: {got!r}"
        for k in want:
            assert_same(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), f"{path}: {got!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    else:
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"


def assert_generic(payload: Any, want: Row) -> None:
    """The payload decoded without the user's class: records, variant names, lists."""
    assert payload.count == want.count and payload.wide == want.wide
    assert payload.name == want.name and payload.blob == want.blob
    assert payload.mode == want.mode.name  # an Enum's variants are its member names
    assert payload.heading == want.heading  # a Literal's variants are its values
    assert payload.maybe == want.maybe and payload.maybe_not is None
    assert payload.values == want.values and payload.pair == want.pair
    assert payload.table == want.table
    assert (payload.pose.x, payload.pose.y) == (want.pose.x, want.pose.y)
    assert [(p.x, p.y) for p in payload.poses] == [(p.x, p.y) for p in want.poses]
    assert np.array_equal(payload.patch, want.patch) and payload.patch.dtype == np.float32
    assert np.array_equal(payload.grids["g"], want.grids["g"])


def test_every_mapping_row_round_trips_python_to_python(bus: Bus) -> None:
    with snapbus.subscribe("rt.*", start="oldest", bus=bus.name) as sub:
        run_producer(bus, PRODUCE)
        events = [sub.get(timeout=30) for _ in range(N)]
        assert sub.lost == 0 and sub.delivered == N
    for i, ev in enumerate(events):
        assert (ev.schema.id, ev.schema.version) == ("rt.row", 1)
        assert ev.emitter == "lab.roundtrip" and ev.level == snapbus.INFO
        assert_same(ev.as_(Row), row(i))
        assert_generic(ev.payload, row(i))
    assert isinstance(events[1].as_(Row).mode, Mode) and isinstance(events[0].as_(Row).pose, Pose)


def test_a_python_producer_recorded_by_attach_recorder_reads_back(
    bus: Bus,
    tmp_path: Path,
) -> None:
    out = tmp_path / "rt.mcap"
    attached = bus.cli("attach", "recorder", "-o", str(out), "--schema", "rt.*")
    consumer_id = attached.stdout.split()[-1]
    run_producer(bus, PRODUCE)

    def recorded() -> bool:
        ls = bus.ls()
        return any(c.get("delivered", 0) >= N for c in ls.get("consumers", []))  # type: ignore[union-attr]

    wait_until("the recorder has read every record", recorded)
    bus.cli("detach", consumer_id)

    with snapbus.open_recording(out) as rec:
        events = [ev for ev in rec if ev.schema.id == "rt.row"]
        assert rec.complete and not rec.damage
    assert len(events) == N
    for i, ev in enumerate(events):
        assert ev.producer.name and ev.emitter == "lab.roundtrip"
        assert_same(ev.as_(Row), row(i))

    with out.open("rb") as f:
        messages: List[Any] = [
            (schema, channel, message)
            for schema, channel, message in make_reader(f).iter_messages()
            if schema is not None and schema.name == "rt.row"
        ]
    assert len(messages) == N
    assert [m.data for _, _, m in messages] == [ev.data for ev in events]

    frame = snapbus.open_recording(out).to_pandas("rt.row")
    assert list(frame["count"]) == [row(i).count for i in range(N)]
    assert list(frame["pose.x"]) == [row(i).pose.x for i in range(N)]


LARGE = (
    TESTS_ON_PATH
    + """
from rt_schema import large
telemetry = snapbus.get_telemetry("lab.large")
telemetry.snapshot(snapbus.INFO, large(0))  # the lane exists once the first record is written
assert snapbus._snapbus._streams_large_payloads(), "a 1 GiB lane should outgrow the caches"
for i in range(1, 6):
    telemetry.snapshot(snapbus.INFO, large(i))
s = snapbus.stats()
assert s["written"] == 6, s
"""
)


def test_large_arrays_streamed_past_the_caches_read_back_exactly(bus: Bus) -> None:
    # A lane larger than the last-level cache: arrays and bytes of 16 KiB and more are copied
    # with non-temporal stores (contiguous ones), misaligned after an odd-length string, and
    # through Python's own copy (a strided view).
    with snapbus.subscribe("rt.large", start="oldest", bus=bus.name) as sub:
        # 1 GiB (sparse until written): larger than any CPU cache.
        run_producer(bus, LARGE, env={"SNAPBUS_LANE_BYTES": str(1 << 30)})
        events = [sub.get(timeout=30) for _ in range(6)]
        assert sub.lost == 0 and sub.delivered == 6
    for i, ev in enumerate(events):
        assert_same(ev.as_(Large), large(i))


SIZES = (
    TESTS_ON_PATH
    + """
from rt_schema import sizes
telemetry = snapbus.get_telemetry("lab.sizes")
for i in range(6):
    event = sizes(i)
    if i == 5:
        event.buffer = bytearray(event.buffer)  # a buffer, not bytes: copied from its memory
    telemetry.snapshot(snapbus.INFO, event)
s = snapbus.stats()
assert s["written"] == 6, s
"""
)


def test_values_either_side_of_the_staging_limits_read_back_exactly(bus: Bus) -> None:
    with snapbus.subscribe("rt.sizes", start="oldest", bus=bus.name) as sub:
        run_producer(bus, SIZES)
        events = [sub.get(timeout=30) for _ in range(6)]
        assert sub.lost == 0 and sub.delivered == 6
    for i, ev in enumerate(events):
        assert_same(ev.as_(Sizes), sizes(i))

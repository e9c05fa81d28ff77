"""Reading recordings: `snapbus.open_recording(path)` over an MCAP file written by
`snapbus record` / `attach recorder` or `snapbus snapshot`.

    rec = snapbus.open_recording("crash.mcap")
    df = rec.to_pandas("demo.step")          # dotted columns, tensors as array cells

Iterating a `Recording` gives the same `Event`s a subscription gives (`seq` is the low 32 bits
of the lane's record number: that is what MCAP keeps). Damaged chunks are skipped and
described in `damage`; a file cut short (a killed recorder) ends the iteration with
`complete == False` and the reason in `error`; `lost` counts the records the recorder never
got.
"""

from __future__ import annotations

import os
from typing import Any

from ._snapbus import Recording as _NativeRecording
from .fields import columns

__all__ = ["Recording", "open_recording"]


class Recording(_NativeRecording):
    """An MCAP recording opened for reading: an iterator of `Event`s in file order."""

    def to_pandas(self, schema: str) -> Any:
        """The records of schema id `schema` (read from where the iteration stands) as a
        pandas DataFrame: header columns `t_nanos`, `producer`, `pid`, `seq`, `version`, then
        one column per leaf of the schema's field tree, named as every sink names it
        (`snapbus.fields`: `position.x`, `pair.0`, an enum's variant name at `mode` and its
        payload at `mode.Jump.height`; a leaf named like a header column gets a `payload.`
        prefix), the same columns as `snapbus export`'s; tensors, lists and maps are cells
        (numpy arrays, lists, dicts). Needs pandas."""
        import pandas  # type: ignore[import-untyped, unused-ignore]

        rows: list[dict[str, Any]] = []
        for ev in self:
            if ev.schema.id != schema:
                continue
            row: dict[str, Any] = {
                "t_nanos": ev.t_nanos,
                "producer": ev.producer.name,
                "pid": ev.producer.pid,
                "seq": ev.seq,
                "version": ev.schema.version,
            }
            for k, v in columns(ev.payload, ev.schema).items():
                row["payload." + k if k in row else k] = v
            rows.append(row)
        return pandas.DataFrame(rows)


def open_recording(path: str | os.PathLike[str]) -> Recording:
    """Opens an MCAP recording or snapshot. Raises FileNotFoundError for a missing file and
    ValueError for a file that is not a snapbus recording (the message says why)."""
    return Recording(os.fspath(path))

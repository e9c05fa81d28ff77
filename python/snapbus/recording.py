"""Reading recordings: `snapbus.open_recording(path)` over an MCAP file written by
`snapbus record` / `attach recorder` or `snapbus snapshot`.

    rec = snapbus.open_recording("crash.mcap")
    df = rec.to_pandas("demo.step")          # typed columns, tensors as array cells
    table = rec.to_arrow("demo.step")        # the same columns as a pyarrow Table

Iterating a `Recording` gives the same `Event`s a subscription gives (`seq` is the low 32 bits
of the lane's record number: that is what MCAP keeps). Damaged chunks are skipped and
described in `damage`; a file cut short (a killed recorder) ends the iteration with
`complete == False` and the reason in `error`; `lost` counts the records the recorder never
got. `to_arrow` and `to_pandas` read the file from its start, whatever the iteration has read,
so they can be called again and give the same table.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ._snapbus import Recording as _NativeRecording

__all__ = ["Recording", "open_recording"]


class Recording(_NativeRecording):
    """An MCAP recording opened for reading: an iterator of `Event`s in file order."""

    def to_arrow(self, schema: str) -> Any:
        """The records of schema id `schema` as a pyarrow Table, built in Rust with the
        columns and types of `snapbus export --format parquet` (docs/recording.md): `t_nanos`
        as `timestamp[ns, tz=UTC]`, `producer_id`, `producer`, `pid`, `level` (`INFO`, ...),
        `seq`, `version`, then one column per leaf of the schema's field tree, named as every
        sink names it (`position`, `mode`, `mode.Jump.height`; a leaf named like a header
        column gets a `payload.` prefix); numbers in their declared type, arrays as lists of
        their dtype, a tensor as a flat list of its dtype with its shape in `<name>.shape`.
        Several versions of the schema are concatenated (columns of all of them, null where
        a version has none). Reads the whole file each call. Raises KeyError when the file
        holds no record of `schema` (naming those it holds); warns about payloads that do not
        decode, damaged parts and a cut file. Needs pyarrow."""
        import pyarrow  # type: ignore[import-untyped, import-not-found, unused-ignore]

        streams, undecodable, damage, error, ids = self._arrow_ipc(schema)
        if not streams:
            raise KeyError(
                f"{self.path} holds no record of schema {schema!r}; it holds: "
                + (", ".join(ids) or "no records")
            )
        if undecodable:
            warnings.warn(
                f"{self.path}: {undecodable} record(s) of {schema} do not decode and are left out",
                stacklevel=2,
            )
        for d in damage:
            warnings.warn(f"{self.path}: skipped a damaged part: {d}", stacklevel=2)
        if error is not None:
            warnings.warn(f"{self.path}: read up to a cut: {error}", stacklevel=2)
        tables = [pyarrow.ipc.open_stream(s).read_all() for s in streams]
        if len(tables) == 1:
            return tables[0]
        try:
            return pyarrow.concat_tables(tables, promote_options="default")
        except TypeError:  # pyarrow < 14
            return pyarrow.concat_tables(tables, promote=True)

    def to_pandas(self, schema: str) -> Any:
        """The records of schema id `schema` as a pandas DataFrame: `to_arrow(schema)`
        converted by pyarrow (`t_nanos` as `datetime64[ns, UTC]`, integers and floats in their
        own dtypes, lists as numpy array cells), each tensor cell reshaped to its shape (an
        `(H, W)` image is a 2-D array; cells are read-only views of the table's memory).
        Re-callable: each call reads the file anew. Needs pandas and pyarrow."""
        table = self.to_arrow(schema)
        frame = table.to_pandas()
        for field in table.schema:
            meta = field.metadata or {}
            if meta.get(b"snapbus.kind") != b"tensor":
                continue
            shape_col = meta.get(b"snapbus.shape_column", b"").decode()
            if shape_col in frame.columns:
                frame[field.name] = _shaped(table, field.name, shape_col)
        return frame


def _shaped(table: Any, data: str, shape: str) -> Any:
    """The tensor column `data` as an object array of arrays shaped by the column `shape`."""
    import numpy as np

    col = table.column(data).combine_chunks()
    shapes = table.column(shape).combine_chunks()
    n = len(col)
    cells = np.empty(n, dtype=object)
    if n == 0:
        return cells
    if col.null_count == 0 and shapes.null_count == 0:
        dims = shapes.values.to_numpy(zero_copy_only=False)
        ndim = len(shapes[0])
        if ndim > 0 and len(dims) == n * ndim:
            dims = dims.reshape(n, ndim)
            if (dims == dims[0]).all():
                # One shape for every row (the usual case): one reshape of the flat values.
                first = tuple(int(d) for d in dims[0])
                flat = col.flatten().to_numpy(zero_copy_only=False)
                size = int(np.prod(first))
                offsets = col.offsets.to_numpy()
                if len(flat) == n * size and offsets[0] == 0:
                    return _rows(flat.reshape((n, *first)))
    for i in range(n):
        v, s = col[i], shapes[i]
        if v.is_valid and s.is_valid:
            cells[i] = v.values.to_numpy(zero_copy_only=False).reshape(tuple(s.as_py()))
    return cells


def _rows(stack: Any) -> Any:
    """The rows of `stack` as an object array of views (`cells[:] = list(stack)` would read
    the equal-shape rows as one more dimension)."""
    import numpy as np

    try:
        return np.fromiter(stack, dtype=object, count=len(stack))
    except (TypeError, ValueError):  # numpy < 1.23: no object dtype in fromiter
        cells = np.empty(len(stack), dtype=object)
        for i, row in enumerate(stack):
            cells[i] = row
        return cells


def open_recording(path: str | os.PathLike[str]) -> Recording:
    """Opens an MCAP recording or snapshot. Raises FileNotFoundError for a missing file and
    ValueError for a file that is not a snapbus recording (the message says why)."""
    return Recording(os.fspath(path))

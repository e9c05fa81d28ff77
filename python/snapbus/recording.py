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
        decode, damaged parts and a cut file. Needs pyarrow >= 14."""
        import pyarrow  # type: ignore[import-untyped, import-not-found, unused-ignore]

        streams, undecodable, damage, error, ids = self._arrow_streams(schema)
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
        # The Arrow C stream interface: the arrays built in Rust, taken as they are (no copy).
        tables = [pyarrow.RecordBatchReader._import_from_c_capsule(s).read_all() for s in streams]
        if len(tables) == 1:
            return tables[0]
        try:
            return pyarrow.concat_tables(tables, promote_options="default")
        except TypeError:  # pyarrow < 14
            return pyarrow.concat_tables(tables, promote=True)

    def to_pandas(self, schema: str) -> Any:
        """The records of schema id `schema` as a pandas DataFrame, with the columns of
        `to_arrow(schema)`: `t_nanos` as `datetime64[ns, UTC]`, numbers, strings and bools in
        their own dtypes, array and list cells as 1-D numpy arrays of their dtype, each tensor
        cell reshaped to its shape (an `(H, W)` image is a 2-D array) and its `.shape` cell a
        tuple; array cells are read-only views of the table's memory. Re-callable: each call
        reads the file anew. Needs pandas and pyarrow."""
        return _frame(self.to_arrow(schema))


def _frame(table: Any) -> Any:
    """`table` as a DataFrame: pyarrow converts the plain columns; the list, tensor and shape
    columns become cells here, from their flat values (pyarrow would make a numpy array per
    row by slicing, several times slower)."""
    import pandas  # type: ignore[import-untyped, unused-ignore]

    kinds = {f.name: (f.metadata or {}).get(b"snapbus.kind", b"") for f in table.schema}
    special = [name for name, kind in kinds.items() if kind in (b"list", b"tensor", b"shape")]
    plain = table.drop(special) if special else table
    frame = plain.to_pandas()
    if not special:
        return frame
    shapes = {
        f.name: (f.metadata or {}).get(b"snapbus.shape_column", b"").decode()
        for f in table.schema
        if kinds[f.name] == b"tensor"
    }
    data = {}
    for name in table.column_names:
        kind = kinds[name]
        if kind == b"shape":
            data[name] = _joined(_shape_cells(c) for c in table.column(name).chunks)
        elif kind in (b"list", b"tensor"):
            shape = shapes.get(name, "")
            chunks = table.column(name).chunks
            dims = table.column(shape).chunks if shape in kinds else [None] * len(chunks)
            data[name] = _joined(_list_cells(c, d) for c, d in zip(chunks, dims))
        else:
            data[name] = frame[name]
    return pandas.DataFrame(data, index=frame.index)


def _joined(parts: Any) -> Any:
    """The object arrays `parts` (one per chunk: the columns of one table are chunked alike) as
    one (the cells' pointers copied, not their values as `combine_chunks` would)."""
    import numpy as np

    parts = list(parts)
    if not parts:
        return np.empty(0, dtype=object)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _uniform_dims(dims: Any, n: int) -> Any:
    """The one shape of every row of the shape column `dims` (a tuple), or None."""
    import numpy as np

    if n == 0 or dims.null_count or len(dims) != n:
        return None
    first = dims[0].as_py()
    flat = dims.flatten().to_numpy(zero_copy_only=False)
    if len(flat) != n * len(first):
        return None
    if len(first) and not (flat.reshape(n, len(first)) == np.asarray(first)).all():
        return None
    return tuple(first)


def _shape_cells(dims: Any) -> Any:
    """A tensor's shape column: a tuple per row (one shared tuple when all are equal)."""
    import numpy as np

    n = len(dims)
    cells = np.empty(n, dtype=object)
    one = _uniform_dims(dims, n)
    if one is not None:
        cells.fill(one)
        return cells
    for i, d in enumerate(dims.to_pylist()):
        cells[i] = None if d is None else tuple(d)
    return cells


def _list_cells(col: Any, dims: Any) -> Any:
    """A list column as numpy array cells (shaped by the shape column `dims`, if given)."""
    import numpy as np

    n = len(col)
    flat = col.flatten().to_numpy(zero_copy_only=False)
    offsets = col.offsets.to_numpy()
    offsets = offsets - offsets[0]
    if col.null_count == 0 and n:
        one = _uniform_dims(dims, n) if dims is not None else None
        width = int(offsets[1]) if n else 0
        if dims is None and len(flat) == n * width and (np.diff(offsets) == width).all():
            return _rows(flat.reshape(n, width))
        if one is not None and len(flat) == n * int(np.prod(one, dtype=np.int64)):
            return _rows(flat.reshape((n, *one)))
    cells = np.empty(n, dtype=object)
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    shapes = dims.to_pylist() if dims is not None else None
    for i in range(n):
        if valid[i]:
            cell = flat[offsets[i] : offsets[i + 1]]
            if shapes is not None and shapes[i] is not None:
                cell = cell.reshape(shapes[i])
            cells[i] = cell
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

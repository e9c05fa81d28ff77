#!/usr/bin/env python3
"""Reads every `*.parquet` file of a `snapbus export --format parquet` directory with pyarrow
AND pandas and prints what they hold as JSON.

Usage: check_parquet.py DIR

Prints {file name: {"rows": n, "columns": [...], "arrow_types": {column: type},
"pandas_dtypes": {column: dtype}, "first": {column: value of the first row}}}.
Fails if pyarrow and pandas disagree on the row count or the columns.
"""

import json
import pathlib
import sys

import pandas as pd
import pyarrow.parquet as pq


def plain(v):
    """A JSON-able form of a pyarrow Python value."""
    if isinstance(v, bytes):
        return list(v)
    return str(v)


def main():
    out = {}
    for path in sorted(pathlib.Path(sys.argv[1]).glob("*.parquet")):
        table = pq.read_table(path)
        frame = pd.read_parquet(path)
        if len(frame) != table.num_rows or list(frame.columns) != table.column_names:
            sys.exit(f"{path}: pandas and pyarrow disagree")
        rows = table.slice(0, 1).to_pylist()
        out[path.name] = {
            "rows": table.num_rows,
            "columns": table.column_names,
            "arrow_types": {f.name: str(f.type) for f in table.schema},
            "pandas_dtypes": {c: str(frame[c].dtype) for c in frame.columns},
            "first": rows[0] if rows else None,
        }
    print(json.dumps(out, default=plain))


if __name__ == "__main__":
    main()

"""The rerun bridge: streams the bus (or a recording) into a rerun viewer or an `.rrd` file,
with no configuration for the common case.

    snapbus attach rerun --save run.rrd               # supervised by the broker
    python -m snapbus.rerun --connect rerun+http://127.0.0.1:9876/proxy --schema 'lab.*'
    python -m snapbus.rerun --from-recording crash.mcap --save crash.rrd

It needs rerun-sdk 0.36 to 0.41 (`rerun-sdk==0.41.0` in CI; Python >= 3.10, numpy >= 2) next
to `snapbus` in the interpreter that runs it; the experiment itself may run any Python snapbus
supports.

Mapping (entity paths are `/<producer>/<schema id>/<field path>`, the field path named by the
rule of every sink, `snapbus.fields`, with `/` for `.`: `pose/x`, `pair/0`; also a map's
entries by key, `table/a`, and a list of structs' elements by index, `poses/0/x`):

- timelines: `time` (the record's `t_nanos`, a timestamp) and a sequence timeline for every
  integer leaf named like `episode`, `step`, `epoch` or `iteration` (`--timeline FIELD`
  replaces that list; a dotted path names a nested field);
- numeric scalar leaves (and bools) -> `Scalars` time series;
- 1-D numeric arrays and lists of up to 16 values -> one `Scalars` entity, a series per index;
  longer ones -> `BarChart`;
- 2-D tensors: integers -> `Image` (luminance), floats -> `DepthImage` (viridis colormap);
  3-D with 1, 3 or 4 channels (last axis) -> `Image` (L, RGB, RGBA); others -> `Tensor`;
- strings and enums -> `TextLog`;
- the aggregator's summaries (`*.summary`) -> `/<summarised producer>/<schema>/<window>/...`
  with the window's index as a sequence timeline named after the window;
- records lost (`on_lag`) and producers dying -> `TextLog` at WARN on `/<producer>/snapbus`.

Everything but tensors and bar charts is sent in columns, one `send_columns` per entity per
flush (rerun has no columnar tensors): the bridge keeps up with well over 50 k events/s.
"""

from __future__ import annotations

from ._bridge import Bridge
from ._cli import _entry, main, parser
from ._mapping import SERIES_MAX
from ._setup import (
    DEFAULT_TIMELINES,
    DEFAULT_URL,
    RERUN_PIN,
    RerunMissing,
    check_reachable,
    check_save_path,
    check_url,
    import_rerun,
)

__all__ = [
    "DEFAULT_TIMELINES",
    "DEFAULT_URL",
    "RERUN_PIN",
    "SERIES_MAX",
    "Bridge",
    "RerunMissing",
    "_entry",
    "check_reachable",
    "check_save_path",
    "check_url",
    "import_rerun",
    "main",
    "parser",
]

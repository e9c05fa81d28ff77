"""The rerun bridge: streams the bus (or a recording) into a rerun viewer or an `.rrd` file,
with no configuration for the common case.

    snapbus attach rerun --save run.rrd               # supervised by the broker
    python -m snapbus.rerun --connect rerun+http://127.0.0.1:9876/proxy --schema 'lab.*'
    python -m snapbus.rerun --from-recording crash.mcap --save crash.rrd

It needs `rerun-sdk==0.36.3` (Python >= 3.10, numpy >= 2) next to `snapbus` in the
interpreter that runs it; the experiment itself may run any Python snapbus supports.

Mapping (entity paths are `/<producer>/<schema id>/<field path>`):

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

import argparse
import dataclasses
import os
import signal
import socket
import sys
import time
import urllib.parse
from operator import attrgetter, itemgetter
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .consumer import STOP, Consumer, ProducerChange, run
from .subscription import Event, Producer

__all__ = ["RERUN_PIN", "Bridge", "main"]

RERUN_PIN = "rerun-sdk==0.36.3"
"""The rerun SDK the bridge is written and tested against."""

DEFAULT_TIMELINES = ("episode", "step", "epoch", "iteration")
"""Integer leaves with these names become sequence timelines (unless `--timeline`)."""

DEFAULT_URL = "rerun+http://127.0.0.1:9876/proxy"

SERIES_MAX = 16
"""1-D arrays up to this length are a series per index; longer ones a bar chart."""

# Header fields of the aggregator's summaries that are not worth a plot.
_SUMMARY_SKIP = frozenset(
    {
        "producer",
        "producer_pid",
        "producer_lane",
        "window",
        "index",
        "first_t_nanos",
        "last_t_nanos",
        "first_seq",
        "last_seq",
    }
)

_INT_DTYPES = {
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
}
_COLOR_MODELS = {1: "L", 3: "RGB", 4: "RGBA"}


class RerunMissing(RuntimeError):
    """rerun-sdk cannot be imported in this interpreter."""


def import_rerun() -> Any:
    """`import rerun`, or `RerunMissing` naming what to install into which interpreter."""
    try:
        import rerun  # type: ignore[import-not-found, unused-ignore]
    except ImportError as e:
        raise RerunMissing(
            f"the rerun bridge needs {RERUN_PIN} (Python >= 3.10, numpy >= 2), and "
            f"{sys.executable} (Python {sys.version.split()[0]}) cannot import rerun ({e}); "
            f"install it there: {sys.executable} -m pip install '{RERUN_PIN}', or pass "
            "--python PATH (or set $SNAPBUS_RERUN_PYTHON) to an interpreter that has it and "
            "snapbus"
        ) from None
    version = getattr(rerun, "__version__", "?")
    if version != RERUN_PIN.split("==")[1]:
        print(
            f"snapbus rerun: warning: rerun-sdk {version} is installed; the bridge is tested "
            f"with {RERUN_PIN}",
            file=sys.stderr,
        )
    return rerun


def check_url(url: str) -> Tuple[str, int]:
    """The host and port of a rerun gRPC URL (`rerun+http://HOST:PORT/proxy`); ValueError
    saying what is wrong."""
    parsed = urllib.parse.urlsplit(url)
    schemes = ("rerun", "rerun+http", "rerun+https")
    if parsed.scheme not in schemes:
        raise ValueError(
            f"bad rerun URL {url!r}: the scheme must be one of {', '.join(schemes)} "
            f"(e.g. {DEFAULT_URL})"
        )
    if parsed.path.rstrip("/") != "/proxy":
        raise ValueError(f"bad rerun URL {url!r}: the path must be /proxy (e.g. {DEFAULT_URL})")
    try:
        port = parsed.port
    except ValueError as e:
        raise ValueError(f"bad rerun URL {url!r}: {e}") from None
    if not parsed.hostname:
        raise ValueError(f"bad rerun URL {url!r}: no host (e.g. {DEFAULT_URL})")
    default_port = 443 if parsed.scheme == "rerun+https" else 9876
    return parsed.hostname, port if port is not None else default_port


def check_reachable(url: str, timeout_s: float = 3.0) -> None:
    """ConnectionError unless something listens at the URL's host and port."""
    host, port = check_url(url)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise ConnectionError(
            f"no rerun viewer or server at {url} ({e}); start one with `rerun` (a viewer) or "
            f"`rerun --serve-grpc --port {port}`"
        ) from None


def check_save_path(path: str) -> None:
    """OSError unless `path` can be written (it is created, and left empty)."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot save to {path}: it is a directory")
    try:
        with open(path, "ab"):
            pass
    except OSError as e:
        raise OSError(f"cannot save to {path}: {e.strerror or e}") from None


# ---------------------------------------------------------------------------------------------
# Mapping: a plan per (schema, producer), compiled from its first record; rows buffered in
# columns between flushes.
# ---------------------------------------------------------------------------------------------

Path = Tuple[str, ...]
Getter = Callable[[Any], Any]


Guard = Tuple[Getter, Callable[[Any], bool]]


def _leaves(
    value: Any,
    path: Path,
    get: Getter,
    out: List[Tuple[Path, Getter, Any]],
    guards: Optional[List[Guard]] = None,
) -> None:
    """Every leaf of a decoded payload: its field path, how to get it from a payload of the
    same shape, and its value here. `guards`: what a payload must keep for those getters to
    find the same leaves (a map's keys, a list of structs' length)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            sub = _then(get, attrgetter(f.name))
            _leaves(getattr(value, f.name), (*path, f.name), sub, out, guards)
    elif isinstance(value, dict):
        if guards is not None:
            keys = set(value)
            guards.append((get, lambda v: type(v) is dict and v.keys() == keys))
        for k, v in value.items():
            _leaves(v, (*path, str(k)), _then(get, itemgetter(k)), out, guards)
    elif isinstance(value, (list, tuple)) and value and not _is_numeric_list(value):
        if guards is not None:
            n = len(value)
            guards.append((get, lambda v: len(v) == n))
        for i, v in enumerate(value):
            _leaves(v, (*path, str(i)), _then(get, itemgetter(i)), out, guards)
    else:
        out.append((path, get, value))


def _identity(value: Any) -> Any:
    return value


def _then(first: Getter, second: Getter) -> Getter:
    if first is _identity:
        return second
    return lambda value: second(first(value))


def _is_numeric_list(value: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


class _Column:
    """One entity's buffered rows: the rows of its batch they belong to (None: every row) and
    their values."""

    __slots__ = ("kind", "path", "rows", "shape", "values")

    def __init__(self, path: Path, kind: str, shape: Tuple[int, ...] = ()) -> None:
        self.path = path
        self.kind = kind
        self.shape = shape
        self.rows: Optional[List[int]] = []
        self.values: List[Any] = []


class _Batch:
    """The records of one entity prefix (producer, schema) since the last flush, in columns."""

    __slots__ = ("columns", "prefix", "seqs", "slots", "times")

    def __init__(self, prefix: Path) -> None:
        self.prefix = prefix
        self.times: List[int] = []
        self.seqs: Dict[str, List[int]] = {}
        self.columns: Dict[Tuple[Path, str, Tuple[int, ...]], _Column] = {}
        self.slots: List[Optional[_Column]] = []
        """A planned batch's columns in the order of its plan's getters (None: no column)."""


def _kind(value: Any, np: Any) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """How a leaf is shown: (kind, shape), or None (not shown)."""
    if isinstance(value, (bool, int, float)):
        return ("scalar", ())
    if isinstance(value, str):
        return ("text", ())
    if isinstance(value, (list, tuple)):
        if value and _is_numeric_list(value):
            return ("series" if len(value) <= SERIES_MAX else "bars", ())
        return None
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" or value.size == 0:
            return None
        shape = tuple(int(d) for d in value.shape)
        nd = len(shape)
        if nd == 0:
            return ("scalar", ())
        if nd == 1:
            return ("series" if shape[0] <= SERIES_MAX else "bars", ())
        dtype = "uint8" if value.dtype.kind == "b" else value.dtype.name
        if dtype not in _INT_DTYPES:
            return ("tensor", ())
        if nd == 2:
            return ("depth" if value.dtype.kind == "f" else "image", shape)
        if nd == 3 and shape[2] in _COLOR_MODELS:
            return ("image", shape)
        return ("tensor", ())
    return None


def _unshown_checker(value: Any) -> Callable[[Any], bool]:
    """A fast test that a later value of a leaf that is not shown (None, an empty list, bytes)
    still is not."""
    if value is None:
        return lambda v: v is None
    t = type(value)
    if isinstance(value, (list, tuple)) and not value:
        return lambda v: type(v) is t and not v
    return lambda v: type(v) is t


def _checker(value: Any, kind: str, np: Any) -> Callable[[Any], bool]:
    """A fast test that a later value of the same leaf is shown the same way."""
    if kind == "scalar" and not isinstance(value, np.ndarray):
        scalar_types = (int, float, bool)
        return lambda v: type(v) in scalar_types
    if kind == "text":
        return lambda v: type(v) is str
    if isinstance(value, np.ndarray):
        shape, dtype, ndarray = value.shape, value.dtype, np.ndarray
        return lambda v: type(v) is ndarray and v.shape == shape and v.dtype == dtype
    t, n = type(value), len(value)
    return lambda v: type(v) is t and len(v) == n


class _Plan:
    """Where each leaf of the records of one (schema, producer) goes: a dense batch, each
    record a row of every column. A record that does not fit takes the general path."""

    __slots__ = ("batch", "checks", "columns", "getters", "prefix", "timelines")

    def __init__(self, prefix: Path) -> None:
        self.prefix = prefix
        self.getters: List[Getter] = []
        self.checks: List[Callable[[Any], bool]] = []
        self.columns: List[Optional[Tuple[Path, str, Tuple[int, ...]]]] = []
        """Per getter: its column, or None (a leaf not shown, a guard)."""
        self.timelines: List[Tuple[str, Getter]] = []
        self.batch: Optional[_Batch] = None

    def new_batch(self) -> _Batch:
        batch = _Batch(self.prefix)
        for name, _ in self.timelines:
            batch.seqs[name] = []
        for key in self.columns:
            if key is None:
                batch.slots.append(None)
                continue
            col = _Column(*key)
            col.rows = None
            batch.columns[key] = col
            batch.slots.append(col)
        self.batch = batch
        return batch


class Bridge(Consumer):
    """A snapbus consumer that sends what it receives to a rerun `RecordingStream`.

    `timelines`: the names (or dotted paths) of integer leaves that become sequence
    timelines. Records are buffered per (producer, schema) and sent in columns on `flush`.
    """

    kind = "rerun"

    def __init__(
        self,
        recording: Any,
        timelines: Iterable[str] = DEFAULT_TIMELINES,
        rr: Any = None,
    ) -> None:
        super().__init__()
        import numpy

        self.np = numpy
        self.rr = rr if rr is not None else import_rerun()
        self.rec = recording
        self.timelines = tuple(timelines)
        self.events = 0
        """Records received."""
        self.lost = 0
        """Records lost before the bridge could read them (`on_lag`)."""
        self.stopping = False
        """Set (by a signal handler) to stop: `on_event` returns STOP, `flush` raises."""
        self._plans: Dict[Tuple[int, str], Optional[_Plan]] = {}
        self._live: List[_Plan] = []
        self._batches: Dict[Path, _Batch] = {}
        self._paths: Dict[Path, str] = {}
        self._formats: Dict[str, Any] = {}

    # -- hooks ---------------------------------------------------------------------------------

    def on_event(self, event: Event) -> Any:
        self._on_event(event)
        return STOP if self.stopping else None

    def _on_event(self, event: Event) -> None:
        self.events += 1
        key = (event.schema.fingerprint, event.producer.name)
        try:
            plan = self._plans[key]
        except KeyError:
            plan = self._plans[key] = self._compile(event)
        if plan is None:
            self._place(event)
            return
        payload = event.payload
        try:
            values = [get(payload) for get in plan.getters]
        except (AttributeError, LookupError, TypeError):
            self._place(event)
            return
        for check, v in zip(plan.checks, values):
            if not check(v):
                self._place(event)
                return
        batch = plan.batch
        if batch is None:
            batch = plan.new_batch()
            self._live.append(plan)
        batch.times.append(event.t_nanos)
        seqs = batch.seqs
        for name, get in plan.timelines:
            seqs[name].append(get(payload))
        for col, v in zip(batch.slots, values):
            if col is not None:
                col.values.append(v)

    def on_lag(self, producer: Producer, lost: int) -> None:
        self.lost += lost
        self._text(
            producer.name,
            f"lost {lost} records of {producer.name} (pid {producer.pid}): overwritten in its "
            f"ring before the rerun bridge read them ({self.lost} in all)",
            "WARN",
        )

    def on_producer(self, change: ProducerChange) -> None:
        p = change.producer
        if change.kind == "died":
            self._text(p.name, f"producer {p.name} (pid {p.pid}) died", "WARN")
        else:
            self._text(p.name, f"producer {p.name} (pid {p.pid}) {change.kind}", "INFO")

    def flush(self) -> None:
        live, self._live = self._live, []
        for plan in live:
            if plan.batch is not None:
                self._send(plan.batch)
                plan.batch = None
        batches, self._batches = self._batches, {}
        for batch in batches.values():
            self._send(batch)
        if self.stopping:
            self.stopping = False
            raise _Terminated

    # -- mapping -------------------------------------------------------------------------------

    def _text(self, producer: str, text: str, level: str) -> None:
        rr = self.rr
        if level == "WARN":
            # Also in the bridge's own log (`snapbus ls` names it for a supervised bridge).
            print(f"snapbus rerun: warning: {text}", file=sys.stderr, flush=True)
        self.rec.set_time("time", timestamp=self.np.datetime64(time.time_ns(), "ns"))
        self.rec.log(self._path((producer, "snapbus")), rr.TextLog(text, level=level))

    def _path(self, parts: Path) -> str:
        path = self._paths.get(parts)
        if path is None:
            path = self._paths[parts] = self.rr.new_entity_path(list(parts))
        return path

    def _is_timeline(self, path: Path, value: Any) -> bool:
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        return path[-1] in self.timelines or ".".join(path) in self.timelines

    def _compile(self, event: Event) -> Optional[_Plan]:
        """The plan of the records like `event` (None: the aggregator's summaries, whose
        entities depend on their values, take the general path)."""
        if event.schema.id.endswith(".summary"):
            return None
        leaves: List[Tuple[Path, Getter, Any]] = []
        guards: List[Guard] = []
        _leaves(event.payload, (), _identity, leaves, guards)
        plan = _Plan((event.producer.name, event.schema.id))
        for get, check in guards:
            plan.getters.append(get)
            plan.checks.append(check)
            plan.columns.append(None)
        for path, get, value in leaves:
            if self._is_timeline(path, value):
                plan.timelines.append((".".join(path), get))
            shown = _kind(value, self.np)
            plan.getters.append(get)
            if shown is None:
                plan.checks.append(_unshown_checker(value))
                plan.columns.append(None)
            else:
                plan.checks.append(_checker(value, shown[0], self.np))
                plan.columns.append((path, *shown))
        return plan

    def _place(self, event: Event) -> None:
        """The general path: a record's leaves found one by one, into sparse columns."""
        schema = event.schema.id
        leaves: List[Tuple[Path, Getter, Any]] = []
        _leaves(event.payload, (), _identity, leaves)
        prefix: Path = (event.producer.name, schema)
        timelines: List[Tuple[str, int]] = []
        if schema.endswith(".summary"):
            # `/<summarised producer>/<schema>/<window>/...`, on a timeline named after the
            # window whose values are the summaries' indexes.
            top = {p[0]: v for p, _, v in leaves if len(p) == 1}
            window = str(top.get("window", "window"))
            prefix = (str(top.get("producer", event.producer.name)), schema, window)
            index = top.get("index")
            if isinstance(index, int):
                timelines.append((window, index))
            leaves = [leaf for leaf in leaves if leaf[0][0] not in _SUMMARY_SKIP]
        for path, _, value in leaves:
            if self._is_timeline(path, value):
                timelines.append((".".join(path), value))
        batch = self._batches.get(prefix)
        if batch is None:
            batch = self._batches[prefix] = _Batch(prefix)
        row = len(batch.times)
        batch.times.append(event.t_nanos)
        for name, v in timelines:
            seq = batch.seqs.get(name)
            if seq is None:
                seq = batch.seqs[name] = [-1] * row
            seq.append(v)
        for seq in batch.seqs.values():
            if len(seq) <= row:
                seq.append(-1)
        for path, _, value in leaves:
            shown = _kind(value, self.np)
            if shown is None:
                continue
            ckey = (path, *shown)
            col = batch.columns.get(ckey)
            if col is None:
                col = batch.columns[ckey] = _Column(path, *shown)
            assert col.rows is not None
            col.rows.append(row)
            col.values.append(value)

    def _send(self, batch: _Batch) -> None:
        rr, np = self.rr, self.np
        n = len(batch.times)
        if n == 0:
            return
        times = np.asarray(batch.times, dtype=np.int64)
        seqs = {k: np.asarray(v, dtype=np.int64) for k, v in batch.seqs.items()}
        for col in batch.columns.values():
            entity = self._path((*batch.prefix, *col.path))
            if col.rows is None or len(col.rows) == n:
                t, s = times, seqs
            else:
                ix = np.asarray(col.rows, dtype=np.int64)
                t = times[ix]
                s = {k: v[ix] for k, v in seqs.items()}
            indexes = [rr.TimeColumn("time", timestamp=t.view("datetime64[ns]"))]
            for name, v in s.items():
                if (v >= 0).all():
                    indexes.append(rr.TimeColumn(name, sequence=v))
            self._send_column(entity, col, indexes, t, s)

    def _send_column(
        self, entity: str, col: _Column, indexes: List[Any], t: Any, s: Dict[str, Any]
    ) -> None:
        rr, np, rec = self.rr, self.np, self.rec
        kind, values, n = col.kind, col.values, len(col.values)
        if kind == "scalar":
            arr = np.asarray(values, dtype=np.float64)
            rec.send_columns(entity, indexes=indexes, columns=rr.Scalars.columns(scalars=arr))
        elif kind == "series":
            arr = np.asarray(values, dtype=np.float64) if _same_length(values) else None
            if arr is not None and arr.ndim == 2:
                flat, lengths = arr.ravel(), np.full(n, arr.shape[1], dtype=np.int64)
            else:
                flat = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in values])
                lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=n)
            cols = rr.Scalars.columns(scalars=flat).partition(lengths)
            rec.send_columns(entity, indexes=indexes, columns=cols)
        elif kind == "text":
            text = rr.TextLog.columns(text=[str(v) for v in values])
            rec.send_columns(entity, indexes=indexes, columns=text)
        elif kind in ("image", "depth"):
            rec.send_columns(entity, indexes=indexes, columns=self._images(entity, col))
        else:
            # Tensors and bar charts: rerun has no columns of them; one log call per record.
            for i, v in enumerate(values):
                rec.set_time("time", timestamp=t[i : i + 1].view("datetime64[ns]")[0])
                for name, seq in s.items():
                    if seq[i] >= 0:
                        rec.set_time(name, sequence=int(seq[i]))
                arr = np.asarray(v)
                rec.log(entity, rr.BarChart(arr) if kind == "bars" else rr.Tensor(arr))
            rec.reset_time()

    def _blobs(self, flat: Any, n: int) -> Any:
        """`n` equal image buffers, back to back in `flat` (u8), as the arrow list array rerun
        keeps them in: handed over as is (rerun's own conversion of a 2-D array copies it
        twice and walks the rows in Python)."""
        pa, np = _pyarrow(), self.np
        size = len(flat) // n
        if len(flat) >= 2**31:
            return flat.reshape(n, size)  # past 32-bit offsets: rerun's own conversion
        offsets = pa.array(np.arange(0, (n + 1) * size, size, dtype=np.int32))
        list_type = self.rr.components.ImageBufferBatch._ARROW_DATATYPE
        return pa.ListArray.from_arrays(offsets, pa.array(flat), type=list_type)

    def _images(self, entity: str, col: _Column) -> Any:
        """The columns of a batch of images (or depth images) of one shape."""
        rr, np = self.rr, self.np
        n, shape = len(col.values), col.shape
        stack = np.stack(col.values)
        if stack.dtype.kind == "b":
            stack = stack.astype(np.uint8)
        h, w = shape[0], shape[1]
        channels = shape[2] if len(shape) == 3 else 1
        dtype = _INT_DTYPES[stack.dtype.name]
        buffers = self._blobs(stack.reshape(-1).view(np.uint8), n)
        depth = col.kind == "depth"
        archetype = rr.DepthImage if depth else rr.Image
        fmt_key = (w, h, channels, dtype)
        if depth:
            fmt = rr.components.ImageFormat(width=w, height=h, channel_datatype=dtype)
        else:
            model = _COLOR_MODELS[channels]
            fmt = rr.components.ImageFormat(
                width=w, height=h, color_model=model, channel_datatype=dtype
            )
        known = self._formats.get(entity)
        if known is None:
            # The common case: one shape per entity, its format sent once (static).
            self._formats[entity] = fmt_key
            static: Dict[str, Any] = {"format": fmt}
            if depth:
                static["colormap"] = "viridis"
            self.rec.log(entity, archetype.from_fields(**static), static=True)
        elif known != fmt_key:
            # The shape changed: from now on every row carries its format.
            self._formats[entity] = "varying"
            return archetype.columns(buffer=buffers, format=[fmt] * n)
        return archetype.columns(buffer=buffers)


def _pyarrow() -> Any:
    import pyarrow  # type: ignore[import-not-found, import-untyped, unused-ignore]

    return pyarrow


def _same_length(values: List[Any]) -> bool:
    first = len(values[0])
    return all(len(v) == first for v in values)


# ---------------------------------------------------------------------------------------------
# The command line: `python -m snapbus.rerun` (what `snapbus attach rerun` and `snapbus rerun`
# run, and `snapbus export --format rrd`).
# ---------------------------------------------------------------------------------------------


class _Terminated(BaseException):
    """Raised by `Bridge.flush` once a stop was asked for (a BaseException: rerun's SDK turns
    the Exceptions raised inside its calls into warnings)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m snapbus.rerun",
        description="Stream the bus (or a recording) into rerun.",
    )
    p.add_argument("--schema", action="append", default=[], metavar="GLOB")
    # Sinks: any of them, together (none: --spawn).
    p.add_argument("--connect", metavar="URL", nargs="?", const=DEFAULT_URL)
    p.add_argument("--spawn", action="store_true")
    p.add_argument("--save", metavar="FILE.rrd")
    p.add_argument("--timeline", action="append", default=[], metavar="FIELD")
    p.add_argument("--from", dest="start", default="latest", choices=["latest", "oldest"])
    p.add_argument("--bus", default=None)
    p.add_argument("--flush-every", type=float, default=0.2, metavar="SECONDS")
    p.add_argument("--from-recording", metavar="FILE.mcap")
    p.add_argument("--recording-name", default=None)
    p.add_argument("--check", action="store_true", help="check the arguments and rerun, then exit")
    return p


def _open_sink(rr: Any, ns: argparse.Namespace, name: str) -> Any:
    """A recording stream writing to every sink asked for (none: a spawned viewer)."""
    rec = rr.RecordingStream(name)
    sinks = []
    if ns.save:
        check_save_path(ns.save)
        sinks.append(rr.FileSink(ns.save))
    if ns.connect:
        check_reachable(ns.connect)
        sinks.append(rr.GrpcSink(ns.connect))
    if ns.spawn or not sinks:
        # A viewer on rerun's default port (an existing one is reused), then streamed to. The
        # SDK looks for the viewer on $PATH: the one of this wheel first (a supervised bridge
        # has the broker's $PATH, which need not name this venv).
        _viewer_on_path()
        rec.spawn(connect=False)
        try:
            check_reachable(DEFAULT_URL)
        except ConnectionError:
            raise ConnectionError(
                "the rerun viewer did not start, or stopped (no display? see above); on a "
                "machine without one use --save FILE.rrd, or --connect to a `rerun "
                "--serve-web` (its web viewer in a browser)"
            ) from None
        if ns.connect != DEFAULT_URL:
            sinks.append(rr.GrpcSink(DEFAULT_URL))
    rec.set_sinks(*sinks)
    return rec


def _viewer_on_path() -> None:
    """Puts the directory of this rerun-sdk's viewer binary first on $PATH."""
    try:
        import rerun_cli  # type: ignore[import-not-found, import-untyped, unused-ignore]

        where = os.path.dirname(os.path.abspath(rerun_cli.__file__))
    except ImportError:
        where = os.path.dirname(sys.executable)
    os.environ["PATH"] = where + os.pathsep + os.environ.get("PATH", "")


def _check(ns: argparse.Namespace) -> None:
    import_rerun()
    if ns.connect:
        check_reachable(ns.connect)
    if ns.save:
        existed = os.path.exists(ns.save)
        check_save_path(ns.save)
        if not existed:
            os.unlink(ns.save)
    if ns.from_recording and not os.path.isfile(ns.from_recording):
        raise FileNotFoundError(f"no recording {ns.from_recording}")


def _from_recording(bridge: Bridge, path: str, globs: Sequence[str]) -> int:
    """Feeds a recording's records (of `globs`) through the bridge; returns how many."""
    import fnmatch

    from .recording import open_recording

    rec = open_recording(path)
    count = pending = 0
    for ev in rec:
        if globs and not any(fnmatch.fnmatchcase(ev.schema.id, g) for g in globs):
            continue
        bridge.on_event(ev)
        count += 1
        pending += len(ev.data)
        # Batches of at most 64 Ki records or 256 MiB of records, as a live bridge's flushes.
        if count % 65536 == 0 or pending >= 1 << 28:
            bridge.flush()
            pending = 0
    bridge.flush()
    lost = int(getattr(rec, "lost", 0) or 0)
    if lost:
        bridge.rec.log(
            "/snapbus",
            bridge.rr.TextLog(f"the recorder lost {lost} records", level="WARN"),
            static=True,
        )
    if not getattr(rec, "complete", True):
        why = getattr(rec, "error", "") or "cut short"
        bridge.rec.log(
            "/snapbus",
            bridge.rr.TextLog(f"the recording is incomplete: {why}", level="WARN"),
            static=True,
        )
    return count


def main(argv: Optional[Sequence[str]] = None) -> int:
    ns = parser().parse_args(argv)
    if ns.check:
        _check(ns)
        return 0
    rr = import_rerun()
    name = ns.recording_name or (
        os.path.basename(ns.from_recording) if ns.from_recording else "snapbus"
    )
    rec = _open_sink(rr, ns, name)
    bridge = Bridge(rec, ns.timeline or DEFAULT_TIMELINES, rr=rr)
    try:
        if ns.from_recording:
            count = _from_recording(bridge, ns.from_recording, ns.schema)
            print(f"snapbus rerun: {count} records of {ns.from_recording}", file=sys.stderr)
        else:

            def terminated(signum: int, frame: Any) -> None:
                # Never raised in the middle of a hook (a batch half-written): the bridge
                # stops after the record it is on, or at its next flush when idle.
                bridge.stopping = True

            signal.signal(signal.SIGTERM, terminated)
            signal.signal(signal.SIGINT, terminated)
            try:
                run(
                    bridge,
                    *ns.schema,
                    start=ns.start,
                    bus=ns.bus,
                    flush_every=ns.flush_every,
                )
            except _Terminated:
                pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        rec.flush(timeout_sec=30.0)
        rec.disconnect()
    if ns.from_recording and ns.schema and bridge.events == 0:
        if ns.save:
            os.unlink(ns.save)
        raise ValueError(f"no record of {ns.from_recording} matches --schema {' '.join(ns.schema)}")
    print(
        f"snapbus rerun: {bridge.events} records, {bridge.lost} lost",
        file=sys.stderr,
    )
    return 0


def _entry() -> int:
    from ._snapbus import _report_exit

    code = 1
    try:
        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except (RerunMissing, ValueError, OSError) as e:
        print(f"snapbus rerun: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    finally:
        _report_exit(code)
    return code


if __name__ == "__main__":
    sys.exit(_entry())

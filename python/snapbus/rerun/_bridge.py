"""The rerun bridge: a snapbus consumer that sends what it receives to a rerun
`RecordingStream`, in columns."""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..consumer import STOP, Consumer, ProducerChange
from ..subscription import Event, Producer
from ._mapping import (
    _COLOR_MODELS,
    _INT_DTYPES,
    EPISODE,
    Continued,
    Getter,
    Guard,
    Path,
    _Batch,
    _checker,
    _Column,
    _identity,
    _kind,
    _leaves,
    _Plan,
    _unshown_checker,
)
from ._setup import DEFAULT_TIMELINES, import_rerun

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


class _Terminated(BaseException):
    """Raised by `Bridge.flush` once a stop was asked for (a BaseException: rerun's SDK turns
    the Exceptions raised inside its calls into warnings)."""


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
        self._continued: Dict[Tuple[Path, str], Continued] = {}

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
        if plan.episode is None:
            for name, get, _ in plan.timelines:
                seqs[name].append(get(payload))
        else:
            episode = plan.episode(payload)
            for name, get, cont in plan.timelines:
                v = get(payload)
                seqs[name].append(v if cont is None else cont.value(episode, v))
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

    def _continuing(self, prefix: Path, name: str) -> Continued:
        """The continuation across episodes of timeline `name` of (producer, schema)."""
        cont = self._continued.get((prefix, name))
        if cont is None:
            cont = self._continued[(prefix, name)] = Continued()
        return cont

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
        timelines = [(path, get) for path, get, value in leaves if self._is_timeline(path, value)]
        plan.episode = next((get for path, get in timelines if path[-1] == EPISODE), None)
        for path, get in timelines:
            name = ".".join(path)
            cont = None
            if plan.episode is not None and path[-1] != EPISODE:
                cont = self._continuing(plan.prefix, name)
            plan.timelines.append((name, get, cont))
        for path, get, value in leaves:
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
        found = [(path, v) for path, _, v in leaves if self._is_timeline(path, v)]
        episode = next((v for path, v in found if path[-1] == EPISODE), None)
        for path, v in found:
            name = ".".join(path)
            if episode is not None and path[-1] != EPISODE:
                v = self._continuing(prefix, name).value(episode, v)
            timelines.append((name, v))
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

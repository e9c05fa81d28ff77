"""``SnapbusHandler``: a ``logging.Handler`` that emits log records as snapshots.

A record carrying an event (``snapbus.schema.is_event``: a dataclass with
``schema_id``/``schema_version``, a pydantic model, a ``dict`` with a ``"kind"``) is emitted
as that event: under the first of the record's ``attrs`` it has (``extra={"snapbus": event}``;
by default also ``telemetry_event`` and ``telemetry_schema``, the names of tbp.monty's earlier
telemetry), else as the message itself (``logger.info(event)``, as ``tbp.monty.telemetry``
logs). Any other record is emitted as the built-in ``log.record`` schema. The target is the
logger's name without a leading ``telemetry.`` (``telemetry.tbp.monty.x`` -> ``tbp.monty.x``).

``logging`` has decided the level before the record reaches the handler (the logger's level,
the handler's own), so the handler emits whatever reaches it unless a filter set on the bus
(``snapbus filter``) refuses it. It works on ``propagate=False`` loggers like any handler, is
built by ``logging.config.dictConfig`` (``class: snapbus.SnapbusHandler`` with ``level``,
``attrs``, ``schema_prefix``), and takes no lock (the lane is thread-safe). Records cross
processes through the lane, so no ``QueueListener`` thread is needed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Iterable, Optional, Union

from .schema import i64, is_event, u32, u64
from .telemetry import Telemetry, get_telemetry

__all__ = ["ATTRS", "LogRecord", "SnapbusHandler"]


@dataclass
class LogRecord:
    """The built-in ``log.record`` schema: a ``logging`` record that carries no event."""

    schema_id: ClassVar[str] = "log.record"
    schema_version: ClassVar[int] = 1
    name: str
    levelno: i64
    message: str
    created: float
    pathname: str
    lineno: i64
    funcName: str
    thread: Optional[u64]
    process: Optional[u32]
    exc_text: Optional[str]


ATTRS = ("snapbus", "telemetry_event", "telemetry_schema")
"""The record attributes ``SnapbusHandler`` looks for an event under by default."""


class SnapbusHandler(logging.Handler):
    """Emits ``logging`` records onto the bus: events as their own schema, anything else as
    ``log.record``. Follows the ``Handler`` contract: errors go to ``handleError``, never
    raised.

    ``attrs``: the record attributes (``extra`` keys) an event may come under, the first found
    wins; the message itself is the event when none is set. ``schema_prefix``: prepended to
    the schema id of events (``"monty."``: tbp.monty's ``GlobalMatchingStep`` goes on the bus
    as ``monty.GlobalMatchingStep``); not to ``log.record``.
    """

    def __init__(
        self,
        level: Union[int, str] = logging.NOTSET,
        attrs: Union[str, Iterable[str]] = ATTRS,
        schema_prefix: Optional[str] = None,
    ) -> None:
        super().__init__(level)
        names = (attrs,) if isinstance(attrs, str) else tuple(attrs)
        if not all(isinstance(a, str) and a for a in names):
            raise TypeError(f"SnapbusHandler(attrs=...) takes attribute names, not {attrs!r}")
        if schema_prefix is not None and not isinstance(schema_prefix, str):
            raise TypeError(f"SnapbusHandler(schema_prefix=...) takes a str, not {schema_prefix!r}")
        self.attrs = names
        self.schema_prefix = schema_prefix or None
        self._handles: dict[str, Telemetry] = {}

    def _telemetry(self, name: str) -> Telemetry:
        t = self._handles.get(name)
        if t is None:
            t = self._handles[name] = get_telemetry(name)
        return t

    def handle(self, record: logging.LogRecord) -> bool:
        """As ``Handler.handle`` without the handler's lock: writing to the lane is
        thread-safe, and never blocks."""
        rv: object = self.filter(record)
        if isinstance(rv, logging.LogRecord):  # Python >= 3.12: a filter may replace it
            record = rv
        if rv:
            self.emit(record)
        return bool(rv)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tel = self._handles.get(record.name) or self._telemetry(record.name)
            attrs = record.__dict__
            for name in self.attrs:
                event = attrs.get(name)
                if event is not None:
                    break
            else:
                event = record.msg
                if not _carries_event(event):
                    tel._snapshot_logged(record.levelno, _log_record(record))
                    return
            tel._snapshot_logged(record.levelno, event, self.schema_prefix)
        except RecursionError:  # the stdlib handlers' rule
            raise
        except Exception:
            self.handleError(record)


# Whether a message of a class (not a dict) is an event: a message's class decides.
_EVENT_CLASSES: dict[type, bool] = {}


def _carries_event(msg: object) -> bool:
    """``is_event(msg)``, remembered per class where the class decides (not for a dict)."""
    cls = type(msg)
    known = _EVENT_CLASSES.get(cls)
    if known is None:
        if isinstance(msg, dict):
            return is_event(msg)
        known = _EVENT_CLASSES[cls] = is_event(msg)
    return known


def _log_record(record: logging.LogRecord) -> LogRecord:
    """A record that carries no event, as the ``log.record`` schema."""
    exc_text = record.exc_text
    if exc_text is None and record.exc_info:
        exc_text = record.exc_text = logging.Formatter().formatException(record.exc_info)
    return LogRecord(
        name=record.name,
        levelno=record.levelno,
        message=record.getMessage(),
        created=record.created,
        pathname=record.pathname,
        lineno=record.lineno,
        funcName=record.funcName,
        thread=record.thread,
        process=record.process,
        exc_text=exc_text,
    )

"""``SnapbusHandler``: a ``logging.Handler`` that emits log records as snapshots.

A record whose message (``logger.info(event)``) or ``extra={"snapbus": event}`` is an event
(a dataclass with ``schema_id``/``schema_version``) is emitted as that schema under the
logger's name; any other record as the built-in ``log.record`` schema. Records cross processes
through the lane, so no ``QueueListener`` thread is needed. Level filtering is snapbus's
(``SNAPBUS_FILTER`` on the logger name) on top of the handler's own level.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import ClassVar, Optional

from .schema import i64, u32, u64
from .telemetry import Telemetry, get_telemetry

__all__ = ["LogRecord", "SnapbusHandler"]


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


def _is_event(obj: object) -> bool:
    cls = type(obj)
    return (
        dataclasses.is_dataclass(cls)
        and isinstance(getattr(cls, "schema_id", None), str)
        and isinstance(getattr(cls, "schema_version", None), int)
    )


class SnapbusHandler(logging.Handler):
    """Emits ``logging`` records onto the bus: events as their own schema, anything else as
    ``log.record``. Follows the ``Handler`` contract: errors go to ``handleError``, never
    raised."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self._handles: dict[str, Telemetry] = {}

    def _telemetry(self, name: str) -> Telemetry:
        t = self._handles.get(name)
        if t is None:
            t = self._handles[name] = get_telemetry(name)
        return t

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tel = self._telemetry(record.name)
            level = record.levelno
            if not tel._level_enabled(level):
                return
            event = getattr(record, "snapbus", None)
            if event is None and _is_event(record.msg):
                event = record.msg
            if event is None:
                exc_text = record.exc_text
                if exc_text is None and record.exc_info:
                    exc_text = record.exc_text = logging.Formatter().formatException(
                        record.exc_info
                    )
                event = LogRecord(
                    name=record.name,
                    levelno=level,
                    message=record.getMessage(),
                    created=record.created,
                    pathname=record.pathname,
                    lineno=record.lineno,
                    funcName=record.funcName,
                    thread=record.thread,
                    process=record.process,
                    exc_text=exc_text,
                )
            tel.snapshot(level, event)
        except RecursionError:  # the stdlib handlers' rule
            raise
        except Exception:
            self.handleError(record)

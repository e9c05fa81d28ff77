"""compare_py.py's `logging` rows: tbp.monty's events through `SnapbusHandler` against monty's own
`JsonFormatter` + `StreamHandler` to /dev/null, side by side on the same events and records.

Needs tbp-monty (`pip install --no-deps tbp-monty` and pydantic; `.ci/test` installs them).
"""

from __future__ import annotations

import logging
import os
import statistics
import timeit
from typing import Any, Dict, Tuple

import snapbus


def _ns(stmt: str, names: Dict[str, Any], number: int, repeat: int) -> float:
    times = timeit.repeat(stmt, number=number, repeat=repeat, globals=names)
    return statistics.median(times) / number * 1e9


def _logger(name: str, handler: logging.Handler) -> logging.Logger:
    log = logging.getLogger(name)
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    return log


class _Raising(snapbus.SnapbusHandler):
    """Raises what it could not emit (a row with an error, not a timing of handleError)."""

    def handleError(self, record: logging.LogRecord) -> None:
        raise  # the exception emit caught


def handler_costs(quick: bool) -> Dict[str, float]:
    """ns per event: `logger.info(event)` and `handler.handle(record)` of one 5-extra-field
    monty `TelemetryEvent`, for `SnapbusHandler` (`snapbus*`) and monty's JSON lines
    (`json*`). This process must have its lane (written records, not `no_bus` ones)."""
    from tbp.monty.telemetry.formatters import (  # type: ignore[import-untyped,unused-ignore]
        JsonFormatter,
    )
    from tbp.monty.telemetry.schemas import (  # type: ignore[import-untyped,unused-ignore]
        TelemetryEvent,
    )

    number, repeat = (5_000, 3) if quick else (200_000, 7)
    event = TelemetryEvent(
        kind="LearningModuleStep", episode=3, step=17, lm_id=2, evidence=0.875, mode="eval"
    )
    ours = _Raising(schema_prefix="monty.")
    with open(os.devnull, "w") as devnull:
        json_handler = logging.StreamHandler(devnull)
        json_handler.setFormatter(JsonFormatter())
        loggers: Dict[str, Tuple[logging.Logger, logging.Handler]] = {
            "snapbus": (_logger("telemetry.bench.monty.snapbus", ours), ours),
            "json": (_logger("telemetry.bench.monty.json", json_handler), json_handler),
        }
        out: Dict[str, float] = {}
        for name, (log, handler) in loggers.items():
            record = log.makeRecord(log.name, logging.INFO, __file__, 1, event, (), None)
            names = {"log": log, "event": event, "handler": handler, "record": record}
            handler.handle(record)  # the schema registered, the plan compiled
            out[f"{name}_info"] = _ns("log.info(event)", names, number, repeat)
            out[f"{name}_handle"] = _ns("handler.handle(record)", names, number, repeat)
    return out

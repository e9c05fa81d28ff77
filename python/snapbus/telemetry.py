"""Telemetry handles and process-wide producer settings.

``get_telemetry(__name__)`` (alias ``getTelemetry``, like ``logging.getLogger``) returns the
handle of a module; ``snapshot(level, event)`` emits an event at a ``logging`` level.

Which levels are emitted: one rule, the first that applies decides.

1. A filter set on the bus by ``snapbus filter`` (until ``snapbus filter --reset``).
2. The level of the nearest ``logging`` logger from ``telemetry.<name>`` up to (not
   including) the root that has a level set: emit iff ``levelno >= level``, as ``logging``
   does (``logging.disable(n)`` also mutes ``levelno <= n``). ``setLevel``, ``dictConfig`` and
   ``logging.disable`` take effect at the next call.
3. The process's own filter: ``SNAPBUS_FILTER`` (default ``info``), with ``__name__``
   targets: ``SNAPBUS_FILTER="info,tbp.monty.models=debug"``.

Levels: Python ``< 10`` is TRACE, ``10-19`` DEBUG, ``20-29`` INFO, ``30-39`` WARN, ``>= 40``
ERROR (CRITICAL folds into ERROR).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

from . import _snapbus
from ._snapbus import ResourceSampler, Span, Telemetry

__all__ = [
    "DEBUG",
    "ERROR",
    "INFO",
    "TRACE",
    "WARN",
    "ResourceSampler",
    "Span",
    "Telemetry",
    "getTelemetry",
    "get_telemetry",
    "init",
    "is_connected",
    "sample_resources",
    "shutdown",
    "stats",
    "wait_for_bus",
]

TRACE = 5
DEBUG = 10
INFO = 20
WARN = 30
ERROR = 40

# Reentrant: the one no-bus warning is logged while settling, and a `SnapbusHandler` that
# receives it settles too.
_lock = threading.RLock()
_settled = False


def _raise_from_env() -> bool:
    """Whether bad values raise (the default): ``SNAPBUS_BAD_VALUES=count`` counts them; the
    older ``SNAPBUS_STRICT`` is still read when that is unset (``1`` raises, ``0`` counts)."""
    mode = os.environ.get("SNAPBUS_BAD_VALUES", "").strip().lower()
    if mode in ("raise", "count"):
        return mode == "raise"
    strict = os.environ.get("SNAPBUS_STRICT", "").strip().lower()
    return strict not in ("0", "false", "no", "off")


_snapbus._set_strict(_raise_from_env())


def default_name() -> str:
    """The producer name ``snapbus ls`` shows by default: the ``-m`` module, else the script's
    file name (never ``python3``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name and name not in ("__main__", "__mp_main__"):
        return name[: -len(".__main__")] if name.endswith(".__main__") else name
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and argv0 not in ("-c", "-"):
        return Path(argv0).name
    # A multiprocessing spawn child: its parent's main script.
    mp_main = sys.modules.get("__mp_main__")
    path = getattr(mp_main, "__file__", None)
    if isinstance(path, str) and path:
        return Path(path).name
    return "python"


def snapbus_binary() -> str | None:
    """The ``snapbus`` binary a producer starts its bus with: ``$SNAPBUS_BIN``, else the one
    beside the interpreter (``<venv>/bin/snapbus``, which the wheel installs), else ``snapbus``
    on ``PATH``; None if there is none."""
    explicit = os.environ.get("SNAPBUS_BIN")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "snapbus"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("snapbus")


def _settle() -> None:
    """Fixes the settings (the default name unless `init` was called) and joins the bus
    (starting its broker if none runs, unless ``SNAPBUS_START_BUS=0``) before first use."""
    global _settled
    if _settled:
        return
    with _lock:
        if not _settled:
            _snapbus._init(name=default_name(), snapbus_bin=snapbus_binary())
            _settled = True


def init(
    bus: str | None = None,
    name: str | None = None,
    session_tag: str | None = None,
    perf_tag: str | None = None,
    lane_bytes: int | None = None,
    bad_values: str | None = None,
    start_bus: bool | None = None,
    record: str | os.PathLike[str] | None = None,
) -> None:
    """Sets process-wide settings and joins the bus: the bus (default ``$SNAPBUS_BUS``, else
    ``default``), the producer name (default: the script or ``-m`` module), run metadata shown
    by ``snapbus ls`` (default ``$SNAPBUS_SESSION_TAG`` / ``$SNAPBUS_PERF_TAG``) and the lane
    size in bytes (default ``$SNAPBUS_LANE_BYTES``, else 64 MiB; a power of two; a record may
    take up to a quarter of it, at most 8 MiB: ``8 << 20`` keeps 1 MiB arrays in the cache
    while they come fast enough for the ring to go round before the cache lets them go, with
    less history).
    ``bad_values``: ``"raise"`` (the default: a value that does not fit its field raises
    ``TypeError``/``ValueError`` naming it) or ``"count"`` (production runs: the event is
    dropped, counted in ``stats()['data_errors']`` and warned about once per class and field;
    default ``$SNAPBUS_BAD_VALUES``).
    ``start_bus``: with no broker running for the bus, start one in the background from the
    ``snapbus`` binary (see ``snapbus_binary``); it stops by itself after 60 s with no
    producer and no consumer, or at ``snapbus down`` (default ``$SNAPBUS_START_BUS``, else
    True). With none running and none started, the logger ``snapbus`` warns once and
    snapshots are counted as ``no_bus`` until a bus appears.
    ``record``: the broker started here records every run into this directory (``snapbus up
    --record DIR``; default ``$SNAPBUS_RECORD``).
    Everything emitted from here on reaches consumers, also while the broker is starting.
    Call it before the first ``get_telemetry`` (which joins the bus with the defaults);
    afterwards it raises ``RuntimeError``."""
    global _settled
    if bad_values not in (None, "raise", "count"):
        raise ValueError(f'bad_values must be "raise" or "count", not {bad_values!r}')
    if start_bus is not None and not isinstance(start_bus, bool):
        raise TypeError(f"start_bus must be a bool, not {type(start_bus).__name__}")
    with _lock:
        if _settled or not _snapbus._init(
            bus=bus,
            name=name if name is not None else default_name(),
            session_tag=session_tag,
            perf_tag=perf_tag,
            lane_bytes=lane_bytes,
            start_bus=start_bus,
            snapbus_bin=snapbus_binary(),
            record=os.fspath(record) if record is not None else None,
        ):
            raise RuntimeError(
                "snapbus.init() must be called before the first get_telemetry() (or other "
                "snapbus emit call): the settings of this process are already fixed"
            )
        _settled = True
    if bad_values is not None:
        _snapbus._set_strict(bad_values == "raise")


def get_telemetry(name: str) -> Telemetry:
    """The telemetry handle of a module (pass ``__name__``); cheap, keep it. Its levels follow
    the logger ``telemetry.<name>`` (see the module's rule); a leading ``telemetry.`` in
    ``name`` is dropped (``getTelemeter``'s logger names work too). ``"__main__"`` is the
    module's real name where Python knows it (``python -m pkg.mod``: ``pkg.mod``)."""
    if not isinstance(name, str):
        raise TypeError(f"get_telemetry(name): name must be a str, not {type(name).__name__}")
    _settle()
    return _snapbus._get_telemetry(target_of(name))


def target_of(name: str) -> str:
    """The target a logger or module name emits under: ``telemetry.`` dropped, ``__main__``
    (and a spawned child's ``__mp_main__``) as the module's ``__spec__.name`` if it has one."""
    if name.startswith("telemetry."):
        name = name[len("telemetry.") :]
    if name in ("__main__", "__mp_main__"):
        spec = getattr(sys.modules.get(name), "__spec__", None)
        real = getattr(spec, "name", None)
        if isinstance(real, str) and real and real not in ("__main__", "__mp_main__"):
            return real
    return name


def _logging_threshold(logger: str) -> tuple[bool, int]:
    """Rule 2 for the logger ``logger`` (called from Rust when ``logging`` changed): whether a
    logger level decides, and the least ``levelno`` emitted. Looks loggers up without making
    any (placeholders and the root do not count)."""
    manager = logging.Logger.manager
    disable = manager.disable
    floor = disable + 1 if disable > 0 else -(1 << 31)
    loggers = manager.loggerDict
    name = logger
    while True:
        found = loggers.get(name)
        if isinstance(found, logging.Logger) and found.level > 0:
            return True, max(found.level, floor)
        dot = name.rfind(".")
        if dot < 0:
            return False, floor
        name = name[:dot]


def _follow_logging() -> None:
    """Makes every level change in ``logging`` reach the handles: ``logging`` clears its
    ``isEnabledFor`` caches through ``Logger.manager._clear_cache`` (``setLevel``,
    ``logging.disable``, ``dictConfig``); wrapped, it also bumps the handles' generation."""
    manager = logging.Logger.manager
    clear: Callable[[], None] = getattr(manager, "_clear_cache")  # noqa: B009 (private)
    if getattr(clear, "_snapbus", False):
        return

    def _clear_cache() -> None:
        clear()
        _snapbus._logging_changed()

    _clear_cache._snapbus = True  # type: ignore[attr-defined]
    setattr(manager, "_clear_cache", _clear_cache)  # noqa: B010 (private)


_follow_logging()


getTelemetry = get_telemetry


def stats() -> dict[str, Any]:
    """This process's counters: ``written``, ``not_written`` and its reasons (``no_bus``,
    ``lane_full``, ``oversize``, ``encode_errors``, ``data_errors``, ``catalog_errors``,
    ``closed``, ``no_lane``, ``unadopted``: records in a lane no broker was ever handed, lost
    with the process), ``has_lane``, ``connected``, and ``refused``: why the bus's broker
    refused this process's lane (a broker of another snapbus release, or out of file
    descriptors), or None."""
    return _snapbus.stats()


def is_connected() -> bool:
    """Whether this process is connected to a bus now."""
    _settle()
    return _snapbus.is_connected()


def wait_for_bus(timeout: float = 5.0) -> bool:
    """Waits up to ``timeout`` seconds for a bus (GIL released, Ctrl-C interrupts it);
    returns whether connected."""
    _settle()
    return _snapbus.wait_for_bus(timeout)


def shutdown() -> None:
    """Closes this process's lane: consumers see the stream end rather than a dead producer.
    Later snapshots are counted as ``closed``. Called at interpreter exit (and at the end of a
    ``multiprocessing`` fork child) by itself: a script that just ends shows as closed, not
    dead."""
    _snapbus.shutdown()


class _LaneCloser:
    """The (weak-referenceable) key of the after-fork hook below."""


_LANE_CLOSER = _LaneCloser()


def _close_at_child_exit() -> None:
    # A multiprocessing fork child ends with os._exit, past atexit. Its bootstrap clears the
    # finalizers it inherited, then runs the after-fork hooks: one of them registers a
    # finalizer that closes the child's lane when its target returns.
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        mp_util.register_after_fork(
            _LANE_CLOSER,
            lambda _: mp_util.Finalize(None, _snapbus.shutdown, exitpriority=-100),
        )


atexit.register(_snapbus.shutdown)
os.register_at_fork(after_in_child=_close_at_child_exit)


def sample_resources(period: float = 1.0) -> ResourceSampler:
    """Emits this process's RSS, CPU time and page faults every ``period`` seconds (INFO,
    target ``snapbus.resources``) until the returned sampler is stopped (``stop()``, or a
    ``with`` block)."""
    _settle()
    return _snapbus.sample_resources(period)


_F = TypeVar("_F", bound=Callable[..., Any])


def _timed(span: Span, func: _F) -> _F:
    """`Telemetry.span(...)` used as a decorator: every call of `func` is one sample."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with span:
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]

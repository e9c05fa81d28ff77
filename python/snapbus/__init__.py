"""snapbus: schema-versioned telemetry snapshots through shared memory.

A running experiment emits dataclass snapshots at sub-microsecond cost and never blocks;
consumers in other processes subscribe, attach and detach at any time, and are told exactly
how many records they lost.

    import logging, snapbus
    from dataclasses import dataclass
    from typing import ClassVar

    @dataclass
    class Step:
        schema_id: ClassVar[str] = "lab.step"
        schema_version: ClassVar[int] = 1
        episode: int
        loss: float

    telemetry = snapbus.get_telemetry(__name__)
    telemetry.snapshot(logging.INFO, Step(episode=1, loss=0.5))

    with snapbus.subscribe("lab.*") as sub:      # in another process
        for event in sub:
            print(event.producer.name, event.payload)
"""

from __future__ import annotations

# First: registers this interpreter's build of the native module as `snapbus._snapbus`.
from . import _native  # noqa: F401
from ._snapbus import __version__

# The read side (subscription.py, consumer.py, recording.py; asyncio in snapbus.aio).
from .consumer import STOP, Consumer, run

# The emit side (telemetry.py, schema.py, handler.py).
from .handler import SnapbusHandler
from .recording import Recording, open_recording
from .schema import (
    TelemetryEvent,
    Tensor,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    schema_of,
    u8,
    u16,
    u32,
    u64,
)
from .subscription import Event, Subscription, subscribe
from .telemetry import (
    DEBUG,
    ERROR,
    INFO,
    TRACE,
    WARN,
    Telemetry,
    get_telemetry,
    getTelemetry,
    init,
    is_connected,
    sample_resources,
    shutdown,
    stats,
    wait_for_bus,
)

__all__ = [
    "DEBUG",
    "ERROR",
    "INFO",
    "STOP",
    "TRACE",
    "WARN",
    "Consumer",
    "Event",
    "Recording",
    "SnapbusHandler",
    "Subscription",
    "Telemetry",
    "TelemetryEvent",
    "Tensor",
    "__version__",
    "f32",
    "f64",
    "getTelemetry",
    "get_telemetry",
    "i8",
    "i16",
    "i32",
    "i64",
    "init",
    "is_connected",
    "open_recording",
    "run",
    "sample_resources",
    "schema_of",
    "shutdown",
    "stats",
    "subscribe",
    "u8",
    "u16",
    "u32",
    "u64",
    "wait_for_bus",
]

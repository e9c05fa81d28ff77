"""tbp.monty's own telemetry onto the bus, for real: tbp-monty from PyPI, configured as a monty
user does (the `conf/telemetry/` YAML of docs/python.md, through `logging.config.dictConfig`),
its module telemeters (`tbp.monty.telemetry.getTelemeter`) emitting `TelemetryEvent`s with
scalar, dict, dataclass + Enum and numpy-array extras. `snapbus echo` and a Python subscriber
see every value exactly; an event below its logger's level never reaches the bus.

`.ci/test` installs tbp-monty (`--no-deps`) and pydantic; under `CI=true` this module fails
without them, elsewhere it is skipped."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List

import pytest
from conftest import REPO, Bus, echo_oldest, run_producer
from test_dynamic_consumers import assert_python

import snapbus

try:
    import tbp.monty.telemetry  # noqa: F401 (installed?)
except ImportError:
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("tbp-monty is not installed (.ci/test installs it)", allow_module_level=True)


def docs_yaml() -> str:
    """The `conf/telemetry/snapbus.yaml` docs/python.md gives monty users."""
    text = (REPO / "docs" / "python.md").read_text()
    m = re.search(r"```yaml\n(# @package experiment\.config\.telemetry\n.*?)```", text, re.S)
    assert m, "docs/python.md has no conf/telemetry YAML block"
    return m.group(1)


# What that YAML says, for a machine without PyYAML.
CONFIG: Dict[str, Any] = {
    "handlers": {"snapbus": {"class": "snapbus.SnapbusHandler", "schema_prefix": "monty."}},
    "loggers": {"telemetry.tbp.monty": {"handlers": ["snapbus"], "level": "INFO"}},
}


def monty_config() -> Dict[str, Any]:
    """The docs' YAML (parsed with PyYAML where installed) plus a module override, as monty's
    `conf/telemetry` docs show one."""
    try:
        import yaml
    except ImportError:
        config = json.loads(json.dumps(CONFIG))
    else:
        config = yaml.safe_load(docs_yaml())
        assert config == CONFIG
    # `propagate`: dictConfig keeps a configured telemeter's own `propagate=False`.
    config["loggers"]["telemetry.tbp.monty.frameworks.models.graph_matching"] = {
        "level": "WARNING",
        "propagate": True,
    }
    return config


PRODUCE = """
import json, logging.config
from dataclasses import dataclass
import numpy as np
from tbp.monty import telemetry
from tbp.monty.frameworks.experiments.mode import ExperimentMode
from tbp.monty.telemetry.schemas import TelemetryEvent

@dataclass
class RecognitionCounter:  # tbp.monty.experiment.recognition_policy's (its module needs torch)
    step: int = 0
    matching_steps: int = 0
    exploring_steps: int = 0
    mode: ExperimentMode = ExperimentMode.EVAL

# Monty's modules make their telemeters at import (`propagate=False`), before the experiment
# configures them: `dictConfig` then lets them propagate to `telemetry.tbp.monty`'s handlers.
base = telemetry.getTelemeter("tbp.monty.frameworks.models.monty_base")
policy = telemetry.getTelemeter("tbp.monty.experiment.recognition_policy")
graphs = telemetry.getTelemeter("tbp.monty.frameworks.models.graph_matching")
sensors = telemetry.getTelemeter("tbp.monty.sensor_modules.sensor_module")
assert not base.propagate

config = json.loads(sys.argv[1])
config["version"] = 1  # as MontyExperiment.init_loggers adds them
config["disable_existing_loggers"] = False
logging.config.dictConfig(config)

base.info(TelemetryEvent(kind="GlobalMatchingStep", matching_steps=3))
base.debug(TelemetryEvent(kind="GlobalMatchingStep", matching_steps=-1))  # below INFO
policy.info(TelemetryEvent(
    kind="TerminalCondition",
    model=dict(is_done=True, is_exploring=False),
    count=RecognitionCounter(step=77, matching_steps=3, mode=ExperimentMode.EVAL),
))
sensors.info(TelemetryEvent(
    kind="SensorPatch",
    rgba=np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
    depth=np.array([[0.5, 1.25], [-2.0, 3.0]], dtype=np.float32),
    location=np.array([0.5, -1.0, 2.0]),
))
policy.log(25, TelemetryEvent(  # tbp's TRACE, an INFO on the bus
    kind="EpisodeStats", episode=2, accuracy=0.75, mode=ExperimentMode.TRAIN, done=True,
    target="mug",
))
graphs.info(TelemetryEvent(kind="NewGraphAdded", graph_id="mug"))  # below its WARNING
graphs.warning(TelemetryEvent(kind="NewGraphAdded", graph_id="last"))
snapbus.shutdown()
"""

MODELS = "tbp.monty.frameworks.models"
EXPECTED: List[Dict[str, Any]] = [
    {
        "schema": "monty.GlobalMatchingStep",
        "target": f"{MODELS}.monty_base",
        "level": "info",
        "payload": {"kind": "GlobalMatchingStep", "matching_steps": 3},
    },
    {
        "schema": "monty.TerminalCondition",
        "target": "tbp.monty.experiment.recognition_policy",
        "level": "info",
        "payload": {
            "kind": "TerminalCondition",
            "model": {"is_done": True, "is_exploring": False},
            "count": {"step": 77, "matching_steps": 3, "exploring_steps": 0, "mode": "eval"},
        },
    },
    {
        "schema": "monty.SensorPatch",
        "target": "tbp.monty.sensor_modules.sensor_module",
        "level": "info",
        "payload": {
            "kind": "SensorPatch",
            "rgba": {"dtype": "u8", "shape": [2, 3, 4], "data": list(range(24))},
            "depth": {"dtype": "f32", "shape": [2, 2], "data": [0.5, 1.25, -2.0, 3.0]},
            "location": {"dtype": "f64", "shape": [3], "data": [0.5, -1.0, 2.0]},
        },
    },
    {
        "schema": "monty.EpisodeStats",
        "target": "tbp.monty.experiment.recognition_policy",
        "level": "info",
        "payload": {
            "kind": "EpisodeStats",
            "episode": 2,
            "accuracy": 0.75,
            "mode": "train",
            "done": True,
            "target": "mug",
        },
    },
    {
        "schema": "monty.NewGraphAdded",
        "target": f"{MODELS}.graph_matching",
        "level": "warn",
        "payload": {"kind": "NewGraphAdded", "graph_id": "last"},
    },
]


def test_montys_events_reach_echo_and_a_subscriber_exactly(bus: Bus) -> None:
    out = run_producer(bus, PRODUCE.replace("sys.argv[1]", repr(json.dumps(monty_config()))))
    assert "Logging error" not in out.stderr, out.stderr  # the handler's handleError
    keys = ("schema", "target", "level", "payload")
    # Every event in order, the last one after those below their level: none of those came.
    echoed = echo_oldest(bus, len(EXPECTED), "monty.*")
    assert [{k: e[k] for k in keys} for e in echoed] == EXPECTED

    with snapbus.subscribe("monty.*", start="oldest", bus=bus.name, until_end=True) as sub:
        events = list(sub)
    assert [(ev.schema.id, ev.emitter) for ev in events] == [
        (e["schema"], e["target"]) for e in EXPECTED
    ]
    for ev, want in zip(events, EXPECTED):
        assert ev.schema.version == 1  # TelemetrySchema.VERSION
        for field, value in want["payload"].items():
            assert_python(getattr(ev.payload, field), value, f"{ev.schema.id}.{field}")

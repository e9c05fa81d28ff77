"""A monty-like experiment that emits its telemetry on a snapbus bus.

Episodes x steps: at every step a sensor module takes a 64x64 float32 observation patch and a
learning module updates its evidence; every episode ends with a summary. Each module has its own
telemetry target, so levels are set per module with the filter (as with `logging`):

    snapbus up
    python examples/monty_like.py --episodes 5 --steps 50 --rate 20
    SNAPBUS_FILTER="info,monty_like.policy=debug" python examples/monty_like.py   # + DEBUG steps
    snapbus filter "info,monty_like.sensor=off"   # live, while it runs: no more patches

Schemas (dataclasses with `schema_id` / `schema_version`):

    monty.step     v1  episode, step, lm_id, mode (explore|exploit), evidence, patch (64x64 f32)
    monty.episode  v1  episode, steps, total_evidence, mode, success
    monty.policy   v1  episode, step, heading (min|max|no|jump), avoid (DEBUG, off by default)

plus the duration samples of the spans `episode` (INFO) and `step` (DEBUG). Watch it with
`snapbus echo 'monty.*'`, or live with examples/live_plot.py.

Values are deterministic: evidence = ((7*e + 3*s) % 10) / 10, the patch is a gradient shifted by
the step, success = total_evidence > steps / 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

import numpy as np
from numpy.typing import NDArray

import snapbus

Mode = Literal["explore", "exploit"]
Heading = Literal["min", "max", "no", "jump"]


@dataclass
class StepEvent:
    """One step of one learning module: what the sensor saw, and the module's evidence."""

    schema_id: ClassVar[str] = "monty.step"
    schema_version: ClassVar[int] = 1
    episode: int
    step: int
    lm_id: int
    mode: Mode
    evidence: float
    patch: NDArray[np.float32]


@dataclass
class EpisodeEvent:
    """The end of an episode."""

    schema_id: ClassVar[str] = "monty.episode"
    schema_version: ClassVar[int] = 1
    episode: int
    steps: int
    total_evidence: float
    mode: Mode
    success: bool


@dataclass
class PolicyEvent:
    """The motor policy's choice (DEBUG: off unless the filter enables it)."""

    schema_id: ClassVar[str] = "monty.policy"
    schema_version: ClassVar[int] = 1
    episode: int
    step: int
    heading: Heading
    # Evaluated at run time (the schema is read from the annotations): no `X | None` on 3.8.
    avoid: Optional[bool] = None


# One telemetry handle per module, as `logging.getLogger(__name__)` in each of monty's modules.
experiment = snapbus.get_telemetry("monty_like.experiment")
sensor = snapbus.get_telemetry("monty_like.sensor")
policy = snapbus.get_telemetry("monty_like.policy")

HEADINGS: tuple[Heading, ...] = ("min", "max", "no", "jump")


def patch(episode: int, step: int) -> NDArray[np.float32]:
    """A 64x64 observation: a diagonal gradient shifted by the step and the episode."""
    y, x = np.mgrid[0:64, 0:64]
    out: NDArray[np.float32] = (((x + y + 3 * step + 5 * episode) % 64) / 63.0).astype(np.float32)
    return out


def run(episodes: int, steps: int, rate: float) -> None:
    period = 1.0 / rate if rate > 0 else 0.0
    next_t = time.monotonic()
    for e in range(episodes):
        mode: Mode = "exploit" if e % 4 == 3 else "explore"
        total = 0.0
        with experiment.span(logging.INFO, "episode"):
            for s in range(steps):
                with experiment.span(logging.DEBUG, "step"):
                    evidence = ((7 * e + 3 * s) % 10) / 10
                    total += evidence
                    sensor.snapshot(
                        logging.INFO,
                        StepEvent(
                            episode=e,
                            step=s,
                            lm_id=0,
                            mode=mode,
                            evidence=evidence,
                            patch=patch(e, s),
                        ),
                    )
                    if policy.isEnabledFor(logging.DEBUG):
                        heading = HEADINGS[(e + s) % 4]
                        policy.snapshot(
                            logging.DEBUG,
                            PolicyEvent(episode=e, step=s, heading=heading, avoid=s % 2 == 0),
                        )
                if period:
                    next_t += period
                    time.sleep(max(0.0, next_t - time.monotonic()))
        experiment.snapshot(
            logging.INFO,
            EpisodeEvent(
                episode=e,
                steps=steps,
                total_evidence=total,
                mode=mode,
                success=total > steps / 2,
            ),
        )
        print(f"episode {e}: {steps} steps, evidence {total:.1f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description="A monty-like experiment emitting telemetry.")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rate", type=float, default=20.0, help="steps/s (0: flat out)")
    parser.add_argument(
        "--wait-bus",
        type=float,
        default=5.0,
        help="seconds to wait for the bus before starting (telemetry never blocks the run)",
    )
    args = parser.parse_args()
    if not snapbus.wait_for_bus(args.wait_bus):
        print("monty_like: no bus yet (run `snapbus up`); running anyway", file=sys.stderr)
    try:
        run(args.episodes, args.steps, args.rate)
    finally:
        # Say we ended (consumers see the lane end), after everything was written.
        snapbus.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

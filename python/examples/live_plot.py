"""A live matplotlib view of examples/monty_like.py, in its own process.

A `snapbus.Consumer`: `on_event` only appends (it runs for every record); `flush`, which
`snapbus.run` calls a few times a second on this same thread, redraws: the evidence per step,
the total evidence per episode, and the newest observation patch.

    snapbus up
    python examples/live_plot.py &                  # a window (any interactive backend)
    python examples/monty_like.py --episodes 20

    python examples/live_plot.py --out plot.png     # headless (Agg): the PNG is rewritten at
                                                    # every redraw and at the end
    snapbus attach python -- examples/live_plot.py --out plot.png     # under the broker

`--episodes N` stops after N episode summaries; `--start oldest` first reads what the rings
still hold (a late start misses nothing still there). Ctrl-C, or SIGTERM (`snapbus detach`),
stops it after a last redraw.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

import numpy as np

import snapbus


class LivePlot(snapbus.Consumer):
    kind = "live_plot"

    def __init__(self, out: str | None = None, episodes: int | None = None) -> None:
        super().__init__()
        import matplotlib

        if out is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt = plt
        self.out = out
        self.until = episodes
        self.steps: list[float] = []
        self.evidence: list[float] = []
        self.episodes: list[int] = []
        self.totals: list[float] = []
        self.patch: Any | None = None
        self.dirty = False
        self.fig, (self.ax_step, self.ax_ep, self.ax_patch) = plt.subplots(1, 3, figsize=(12, 3.6))
        if out is None:
            plt.ion()
            plt.show(block=False)

    def on_event(self, ev: Any) -> object:
        schema = ev.schema.id
        p = ev.payload

        def get(name: str) -> Any:  # a record's field (or a dict's item)
            return p[name] if isinstance(p, dict) else getattr(p, name)

        if schema == "monty.step":
            self.steps.append(len(self.steps))
            self.evidence.append(float(get("evidence")))
            self.patch = get("patch")  # a read-only numpy view; it keeps its record alive
        elif schema == "monty.episode":
            self.episodes.append(int(get("episode")))
            self.totals.append(float(get("total_evidence")))
            print(f"episode {get('episode')} total {get('total_evidence'):.1f}", flush=True)
            if self.until is not None and len(self.episodes) >= self.until:
                self.dirty = True
                return snapbus.STOP
        self.dirty = True
        return None

    def flush(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        self.ax_step.clear()
        self.ax_step.plot(self.steps[-2000:], self.evidence[-2000:], lw=0.8)
        self.ax_step.set_title("evidence per step")
        self.ax_ep.clear()
        self.ax_ep.bar(self.episodes, self.totals)
        self.ax_ep.set_title("total evidence per episode")
        if self.patch is not None:
            self.ax_patch.clear()
            self.ax_patch.imshow(np.asarray(self.patch), cmap="viridis", vmin=0, vmax=1)
            self.ax_patch.set_title("newest patch")
        self.fig.tight_layout()
        if self.out is not None:
            self.fig.savefig(self.out)
        else:
            self.plt.pause(0.001)


def main() -> int:
    parser = argparse.ArgumentParser(description="Live plots of examples/monty_like.py.")
    parser.add_argument("--out", help="write a PNG instead of opening a window (Agg)")
    parser.add_argument("--episodes", type=int, help="stop after this many episodes")
    parser.add_argument("--start", choices=["latest", "oldest"], default="latest")
    args = parser.parse_args()

    def stop(signum: int, frame: Any) -> None:  # `snapbus detach` sends SIGTERM
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    plot = LivePlot(out=args.out, episodes=args.episodes)
    try:
        snapbus.run(plot, "monty.*", start=args.start, flush_every=0.25)
    except KeyboardInterrupt:
        pass
    plot.dirty = True
    plot.flush()
    seen: dict[str, object] = {"episodes": plot.episodes, "steps": len(plot.steps)}
    print(f"seen {seen}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The report consumer's command line: `python -m snapbus.reports --output-dir DIR`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, Optional, Sequence

from ..consumer import _exit_reported, run
from ._layouts import MONTY_SCHEMA, GenericLayout, MontyLayout
from ._report import EpisodeReport
from ._wandb import import_wandb


class _Terminated(Exception):
    """SIGTERM (the broker stopping it): flush and exit 0."""


def _episodes(text: str) -> frozenset:  # type: ignore[type-arg]
    try:
        return frozenset(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected episode numbers like 0,3,7, not {text!r}"
        ) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m snapbus.reports",
        description="Write tbp.monty's result files ({mode}_stats.csv, detailed_run_stats.json) "
        "from per-episode records on the bus.",
    )
    p.add_argument("--output-dir", required=True, metavar="DIR")
    p.add_argument(
        "--layout",
        default="monty",
        choices=["monty", "generic"],
        help="monty: tbp.monty's files from monty.EpisodeStats; generic: a row per record of "
        "any schema with an episode field (--schema)",
    )
    p.add_argument("--schema", default=None, metavar="GLOB", help=f"default: {MONTY_SCHEMA}")
    p.add_argument("--episode-field", default="episode", metavar="FIELD", help="generic layout")
    p.add_argument("--mode-field", default="mode", metavar="FIELD", help="generic layout")
    p.add_argument("--run", default=None, metavar="ID", help="only this run's records")
    p.add_argument(
        "--detailed-per-episode",
        action="store_true",
        help="one detailed_run_stats/episode_%%06d.json per episode instead of JSON Lines",
    )
    p.add_argument(
        "--detailed-episodes",
        type=_episodes,
        default=None,
        metavar="N,N,...",
        help="only these episodes' detailed JSON (default: all)",
    )
    p.add_argument(
        "--wandb",
        nargs="?",
        const="Monty",
        default=None,
        metavar="PROJECT",
        help="also log to W&B, offline, into DIR/wandb (project: Monty)",
    )
    p.add_argument("--from", dest="start", default="oldest", choices=["latest", "oldest"])
    p.add_argument("--bus", default=None)
    p.add_argument("--flush-every", type=float, default=1.0, metavar="SECONDS")
    p.add_argument("--until-end", action="store_true", help="stop once every producer has ended")
    p.add_argument(
        "--check", action="store_true", help="check pandas and the output directory, then exit"
    )
    return p


def _check(output_dir: str, wandb: bool) -> None:
    """What `snapbus attach monty` checks before it starts the consumer: pandas imports and
    the output directory is (or can be made) a writable directory."""
    try:
        import pandas  # type: ignore[import-untyped, unused-ignore]  # noqa: F401
    except ImportError as e:
        raise OSError(
            f"cannot import pandas ({e}); install it into {sys.executable}: pip install pandas"
        ) from None
    if wandb:
        import_wandb()
    os.makedirs(output_dir, exist_ok=True)
    if not os.access(output_dir, os.W_OK | os.X_OK):
        raise OSError(f"cannot write into {output_dir}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser()
    ns = p.parse_args(argv)
    if ns.layout == "generic" and not ns.schema:
        p.error("--layout generic needs --schema GLOB")
    layout = (
        GenericLayout(ns.schema, ns.episode_field, ns.mode_field)
        if ns.layout == "generic"
        else MontyLayout()
    )
    if ns.check:
        _check(ns.output_dir, ns.wandb is not None)
        return 0
    report = EpisodeReport(
        ns.output_dir,
        run=ns.run,
        detailed_per_episode=ns.detailed_per_episode,
        detailed_episodes=ns.detailed_episodes,
        wandb_project=ns.wandb,
        layout=layout,
    )

    def terminated(signum: int, frame: Any) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, terminated)
    try:
        summary = run(
            report,
            ns.schema or layout.schema,
            start=ns.start,
            bus=ns.bus,
            flush_every=ns.flush_every,
            until_end=ns.until_end,
        )
        lost = summary.lost
    except _Terminated:
        lost = 0
    finally:
        report.close()
    print(
        f"snapbus reports: {report.episodes} episodes, {report.skipped} of other runs "
        f"skipped, {report.bad} off the contract skipped, {lost} lost",
        file=sys.stderr,
    )
    return 0


def _entry() -> int:
    return _exit_reported(main, "snapbus reports", (ValueError, OSError))

"""W&B in offline mode, as tbp.monty's `BasicWandbChartStatsHandler` and
`BasicWandbTableStatsHandler` log: per episode the record's `overall` mapping (`overall/*`,
`episode/*`) at `step=episode`, and the `{mode}_stats_table` of every episode so far (one row
per LM). The run directory (`DIR/wandb/offline-run-*`) is uploaded later with `wandb sync`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Tuple

# `WandbHandler.variable_length_columns`: left out of the table.
VARIABLE_LENGTH = {
    "possible_object_poses",
    "possible_object_locations",
    "possible_object_sources",
    "possible_match_sources",
    "detected_path",
}


def import_wandb() -> Any:
    try:
        import wandb  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError as e:
        raise OSError(f"--wandb needs the wandb package ({e}): pip install wandb") from None
    return wandb


def table_frame(stats: Dict[str, Any]) -> Any:
    """The episode's rows as `lm_stats_to_dataframe(format_for_wandb=True)` builds them (a
    list `result` joined with `^`), without the variable-length columns (in the frame's order;
    tbp.monty's is a set's)."""
    import pandas as pd  # type: ignore[import-untyped, unused-ignore]

    lms = {}
    for k, v in stats.items():
        if isinstance(k, str) and k.startswith("LM_"):
            v = dict(v)
            if isinstance(v.get("result"), list):
                v["result"] = "^".join(v["result"])
            lms[k] = v
    if not lms:
        return None
    df = pd.DataFrame.from_dict(lms, orient="index")
    df["lm_id"] = df.index
    return df[[c for c in df.columns if c not in VARIABLE_LENGTH]]


class WandbSink:
    """One offline W&B run per bus run, logging episodes in episode order: those after the
    last one logged as soon as the episodes before them are in (W&B steps only go forward),
    the rest at `close`."""

    def __init__(self, output_dir: Path, project: str, run: str) -> None:
        self.wandb = import_wandb()
        output_dir.mkdir(parents=True, exist_ok=True)
        self.run = self.wandb.init(
            mode="offline",
            dir=str(output_dir),
            project=project,
            name=run,
            id=re.sub(r"[^A-Za-z0-9_-]", "-", run)[:64] or "run",
            config={},
            settings=self.wandb.Settings(silent=True, console="off"),
        )
        self.pending: Dict[int, Tuple[Dict[str, Any], str, Any]] = {}
        self.next_step = 0
        self.tables: Dict[str, Any] = {}
        self.late = 0

    def add(self, episode: int, overall: Dict[str, Any], table_name: str, frame: Any) -> None:
        """An episode's numbers (logged at `step=episode`) and its rows of table `table_name`
        (a DataFrame, or None)."""
        if episode < self.next_step:
            self.late += 1  # W&B refuses a step before the last one logged
            return
        self.pending[episode] = (overall, table_name, frame)

    def flush(self, final: bool = False) -> None:
        for episode in sorted(self.pending):
            if episode != self.next_step and not final:
                break
            self._log(episode, *self.pending.pop(episode))
            self.next_step = episode + 1

    def _log(self, episode: int, overall: Dict[str, Any], key: str, df: Any) -> None:
        import pandas as pd  # type: ignore[import-untyped, unused-ignore]

        row: Dict[str, Any] = dict(overall)
        if df is not None:
            prev = self.tables.get(key)
            table = df if prev is None else pd.concat([prev, df])
            self.tables[key] = table
            row[key] = self.wandb.Table(dataframe=table)
        self.run.log(row, step=episode)

    def summary(self, overall: Dict[str, Any]) -> None:
        """The experiment's summary, logged once after the episodes (as `run_parallel` logs
        its `get_overall_stats`), at the step after the last episode."""
        self.flush(final=True)
        # At a step of its own: W&B merges a log without a step into the last one.
        self.run.log(dict(overall), step=self.next_step)
        self.next_step += 1

    def close(self) -> None:
        self.flush(final=True)
        self.run.finish()

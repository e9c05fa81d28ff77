"""tbp.monty's file layouts (tbp-monty 0.55, `frameworks/loggers/monty_handlers.py`), rebuilt
from one episode's `stats` mapping: what `BasicCSVStatsHandler` and `DetailedJSONHandler`
write, byte for byte, without importing tbp.monty (which needs torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

# `BasicCSVStatsHandler.report_episode`'s front columns, with and without `most_likely_object`.
TOP_COLUMNS_EVIDENCE = [
    "primary_performance",
    "stepwise_performance",
    "num_steps",
    "rotation_error",
    "result",
    "most_likely_object",
    "primary_target_object",
    "stepwise_target_object",
    "highest_evidence",
    "time",
    "symmetry_evidence",
    "monty_steps",
    "monty_matching_steps",
    "individual_ts_performance",
    "individual_ts_reached_at_step",
    "primary_target_position",
    "primary_target_rotation_euler",
    "most_likely_rotation",
]
TOP_COLUMNS = [
    "primary_performance",
    "stepwise_performance",
    "num_steps",
    "rotation_error",
    "result",
    "primary_target_object",
    "stepwise_target_object",
    "time",
    "symmetry_evidence",
    "monty_steps",
    "monty_matching_steps",
    "primary_target_position",
    "primary_target_rotation_euler",
]


def csv_frame(stats: Dict[str, Any]) -> Any:
    """One episode's rows as `BasicCSVStatsHandler` builds them: `lm_stats_to_dataframe` (one
    row per `LM_*` key, `DataFrame.from_dict(orient="index")`, an `lm_id` column) with the
    front columns moved first. tbp.monty raises `KeyError` when a front column is missing;
    here a missing one is left out. None when the episode has no `LM_*` entry (tbp.monty
    raises there too: `pd.concat([])`)."""
    import pandas as pd  # type: ignore[import-untyped, unused-ignore]

    lms = {k: v for k, v in stats.items() if isinstance(k, str) and k.startswith("LM_")}
    if not lms:
        return None
    df = pd.concat([pd.DataFrame.from_dict(lms, orient="index")])
    df["lm_id"] = df.index
    top = TOP_COLUMNS_EVIDENCE if "most_likely_object" in df else TOP_COLUMNS
    for column in reversed(top):
        if column in df:
            df.insert(0, column, df.pop(column))
    return df


def csv_chunks(stats: Dict[str, Any]) -> Any:
    """(header, rows): the text `to_csv` writes for one episode with and without its header."""
    df = csv_frame(stats)
    if df is None:
        return None
    full = df.to_csv(None, header=True)
    body = df.to_csv(None, header=False)
    return full[: len(full) - len(body)], body


class BufferEncoder(json.JSONEncoder):
    """tbp.monty's `BufferEncoder` for what a decoded record holds: numpy arrays as lists,
    numpy scalars as Python ones."""

    def default(self, o: Any) -> Any:
        tolist = getattr(o, "tolist", None)
        if tolist is not None:
            return tolist()
        return json.JSONEncoder.default(self, o)


def json_record(episode: int, stats: Dict[str, Any]) -> str:
    """One `{"<episode>": stats}` object, as `DetailedJSONHandler` dumps it (no newline)."""
    return json.dumps({episode: stats}, cls=BufferEncoder)


def rename_existing(path: Path) -> None:
    """tbp.monty's `maybe_rename_existing_file`: an existing `x.csv` becomes `x_old.csv` (an
    existing `x_old.csv` is removed first)."""
    if not path.exists():
        return
    old = path.with_name(path.stem + "_old" + path.suffix)
    if old.exists():
        old.unlink()
    path.rename(old)


def write_episode_file(output_dir: Path, name: str, episode: int, stats: Dict[str, Any]) -> None:
    """`DetailedJSONHandler._save_per_episode`: `NAME/episode_%06d.json` (NAME:
    `detailed_run_stats`); renames an existing file, writes one object without a newline."""
    path = output_dir / name / f"episode_{episode:06d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    rename_existing(path)
    path.write_text(json_record(episode, stats))


__all__: List[str] = [
    "BufferEncoder",
    "csv_chunks",
    "csv_frame",
    "json_record",
    "rename_existing",
    "write_episode_file",
]


# `run_parallel.get_overall_stats`: (overall key, how, episode key), in its order.
_OVERALL = [
    ("overall/percent_correct", "percent", "episode/correct"),
    ("overall/percent_confused", "percent", "episode/confused"),
    ("overall/percent_correct_mlh", "percent", "episode/correct_mlh"),
    ("overall/percent_confused_mlh", "percent", "episode/confused_mlh"),
    ("overall/percent_no_match", "percent", "episode/no_match"),
    ("overall/percent_pose_time_out", "percent", "episode/pose_time_out"),
    ("overall/percent_time_out", "percent", "episode/time_out"),
    ("overall/percent_used_mlh_after_timeout", "percent", "episode/used_mlh_after_time_out"),
    ("overall/avg_prediction_error", "mean", "episode/avg_prediction_error"),
    ("overall/avg_rotation_error", "correct_mean", "episode/rotation_error"),
    ("overall/avg_num_lm_steps", "mean", "episode/lm_steps"),
    ("overall/avg_num_monty_steps", "mean", "episode/monty_steps"),
    ("overall/avg_num_monty_matching_steps", "mean", "episode/monty_matching_steps"),
    ("overall/run_time", "sum", "episode/run_time"),
    ("overall/avg_episode_run_time", "mean", "episode/run_time"),
    ("overall/num_episodes", "len", "episode/correct"),
    ("overall/avg_goal_attempts", "mean", "episode/goal_states_attempted"),
    ("overall/avg_goal_success", "mean", "episode/goal_state_success_rate"),
]


def experiment_summary(episodes: List[Dict[str, Any]]) -> Dict[str, float]:
    """tbp.monty's `run_parallel.get_overall_stats` over every episode's `episode/*` values
    (the records' `overall` mappings, in episode order): the keys whose inputs the episodes
    carry (tbp.monty raises on a missing one)."""
    import numpy as np

    def values(key: str) -> List[Any]:
        return [e[key] for e in episodes if key in e]

    out: Dict[str, float] = {}
    for name, how, key in _OVERALL:
        v = values(key)
        if not v:
            continue
        if how == "percent":
            out[name] = float(np.mean(v) * 100)
        elif how == "mean":
            out[name] = float(np.mean(v))
        elif how == "sum":
            out[name] = float(np.sum(v))
        elif how == "len":
            out[name] = len(v)
        else:  # the rotation error of the correct episodes
            pairs = [
                (e[key], e["episode/correct"])
                for e in episodes
                if key in e and "episode/correct" in e
            ]
            out[name] = float(np.mean([r for r, c in pairs if c == 1]))
    return out

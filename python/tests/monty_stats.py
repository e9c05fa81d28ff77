"""tbp.monty-shaped episode stats for the report tests (a producer child and the reference
import it), and the reference itself: tbp-monty 0.55's `BasicCSVStatsHandler.report_episode`
(with `lm_stats_to_dataframe` and `maybe_rename_existing_file`) and
`DetailedJSONHandler._save_all`, transcribed as they are (their module needs torch)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pandas as pd


def stats(episode: int, lms: int = 2) -> Dict[str, Any]:
    """One episode's `stats`: per LM arrays, strings, ints, floats and NaN, and the target."""
    out: Dict[str, Any] = {}
    for lm in range(lms):
        k = episode * 10 + lm
        out[f"LM_{lm}"] = {
            "primary_performance": ["correct", "confused", "no_match"][k % 3],
            "stepwise_performance": "correct_mlh" if k % 2 else "correct",
            "num_steps": 40 + k,
            "rotation_error": float("nan") if k % 2 else 0.125 * k,
            "result": f"mug_{k}",
            "most_likely_object": "mug" if k % 2 else "bowl",
            "primary_target_object": "mug",
            "stepwise_target_object": "mug",
            "highest_evidence": 12.5 + k / 3,
            "time": 0.1 + k,
            "symmetry_evidence": k % 4,
            "monty_steps": 100 + k,
            "monty_matching_steps": 90 + k,
            "individual_ts_performance": "time_out",
            "individual_ts_reached_at_step": -1 if k % 2 else 30 + k,
            "primary_target_position": np.array([0.0, 1.5, -0.1 * k]),
            "primary_target_rotation_euler": np.array([0, 90, 180 + k], dtype=np.int64),
            "most_likely_rotation": np.arange(9, dtype=np.float64).reshape(3, 3) / (k + 1),
            "extra_nan": float("nan"),
            "mean_objects_per_graph": 1.0 / 3 * k,
            "possible_matches": ["mug", "bowl"][: 1 + k % 2],
            "detected_location": np.arange(4, dtype=np.float32) * 0.1 * k,
        }
    out["target"] = {
        "object": "mug",
        "quat_rotation": np.array([1.0, 0.0, 0.0, 0.0]),
        "episode": episode,
    }
    return out


def overall(episode: int) -> Dict[str, Any]:
    """The episode's `{mode}_overall_stats` entry (what W&B's charts get)."""
    return {
        "overall/percent_correct": 100.0 * (episode + 1) / (episode + 2),
        "overall/num_episodes": episode + 1,
        "episode/correct": episode % 2,
        "episode/run_time": 0.5 + episode,
    }


TOP = [
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


def _maybe_rename_existing_file(filepath: Path) -> None:
    if not filepath.exists():
        return
    new_filepath = filepath.with_name(filepath.stem + "_old" + filepath.suffix)
    if new_filepath.exists():
        new_filepath.unlink()
    filepath.rename(new_filepath)


class ReferenceCSV:
    """`BasicCSVStatsHandler`, step by step (its `data["BASIC"]["train_stats"]` is
    `{episode: stats}`)."""

    def __init__(self) -> None:
        self.reports_per_file: Dict[Path, int] = {}

    def report_episode(self, stats_of_episode: Dict[Any, Any], output_dir: Path, mode: str) -> None:
        output_file = Path(output_dir) / f"{mode}_stats.csv"
        if output_file not in self.reports_per_file:
            self.reports_per_file[output_file] = 0
            _maybe_rename_existing_file(output_file)
        else:
            self.reports_per_file[output_file] += 1
        df_list = []
        for episode in stats_of_episode.values():
            lm_dict = {}
            for key in episode:
                if isinstance(key, str) and key.startswith("LM_"):
                    lm_dict[key] = episode[key]
            if len(lm_dict) > 0:
                df_list.append(pd.DataFrame.from_dict(lm_dict, orient="index"))
        dataframe = pd.concat(df_list)
        dataframe["lm_id"] = dataframe.index
        for c_key in reversed(TOP):
            dataframe.insert(0, c_key, dataframe.pop(c_key))
        header = self.reports_per_file[output_file] < 1
        dataframe.to_csv(output_file, mode="a", header=header)


class _Encoder(json.JSONEncoder):
    """tbp.monty's BufferEncoder for numpy values."""

    def default(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return obj.tolist()
        if isinstance(obj, np.generic):
            return obj.item()
        return json.JSONEncoder.default(self, obj)


def reference_json(output_dir: Path, episode: int, stats_: Dict[str, Any]) -> None:
    """`DetailedJSONHandler._save_all` for one episode (no DETAILED pool: the basic stats)."""
    with (Path(output_dir) / "detailed_run_stats.json").open("a") as f:
        json.dump({episode: stats_}, f, cls=_Encoder)
        f.write(os.linesep)

"""Layouts: how one per-episode record becomes files. `MontyLayout` (the default) is tbp.monty's;
`GenericLayout` takes any schema with an integer episode field."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .._snapbus import Event
from ..fields import columns
from . import _monty
from ._wandb import table_frame

#: The schema of the monty preset: tbp.monty's `TelemetryEvent(kind="EpisodeStats", ...)` logged
#: through `SnapbusHandler(schema_prefix="monty.")`.
MONTY_SCHEMA = "monty.EpisodeStats"

#: The fields that name the run, never written as data.
RUN_FIELDS = ("run", "run_started")


def field(payload: Any, name: str) -> Any:
    if isinstance(payload, dict):
        return payload.get(name)
    return getattr(payload, name, None)


class Episode:
    """One record read by a layout: its episode, mode and the mapping its files are made of."""

    __slots__ = ("episode", "mode", "payload", "stats")

    def __init__(self, episode: int, mode: str, stats: Dict[str, Any], payload: Any) -> None:
        self.episode = episode
        self.mode = mode
        self.stats = stats
        self.payload = payload


class MontyLayout:
    """tbp.monty's files from `monty.EpisodeStats` (docs/python.md: the contract)."""

    schema = MONTY_SCHEMA
    json_name = "detailed_run_stats"

    def read(self, event: Event, payload: Any) -> Episode:
        stats = field(payload, "stats")
        if not isinstance(stats, dict):
            raise ValueError(
                f"{event.schema.id}: field 'stats' is {type(stats).__name__}, not a mapping "
                "(the contract of monty.EpisodeStats: docs/python.md)"
            )
        mode = field(payload, "mode")
        if mode is None:
            raise ValueError(f"{event.schema.id}: no field 'mode' (train or eval)")
        return Episode(_episode(event, payload, "episode"), str(mode), stats, payload)

    def csv_name(self, ep: Episode) -> str:
        return f"{ep.mode}_stats.csv"

    def csv_chunks(self, ep: Episode) -> Optional[Tuple[str, str]]:
        return _monty.csv_chunks(ep.stats)  # type: ignore[no-any-return]

    def json_record(self, ep: Episode) -> Dict[str, Any]:
        record = dict(ep.stats)
        detailed = field(ep.payload, "detailed")
        if isinstance(detailed, dict):
            record.update(detailed)
        return record

    def wandb_row(self, ep: Episode) -> Tuple[Dict[str, Any], str, Any]:
        overall = field(ep.payload, "overall")
        return (
            dict(overall) if isinstance(overall, dict) else {},
            f"{ep.mode}_stats_table",
            table_frame(ep.stats),
        )


class GenericLayout:
    """Any schema with an integer episode field: one row per record, its columns the record's
    fields named as every sink names them (`snapbus.fields`: `pose.x`; arrays, lists and maps
    one cell each), without `run`/`run_started`. Files: `{mode}_episodes.csv` (`episodes.csv`
    when the record has no mode field), `episodes.json` (JSON Lines `{"<episode>": row}`); W&B:
    the row's numbers at `step=episode` and the `{mode}_episodes_table`."""

    json_name = "episodes"

    def __init__(
        self, schema: str, episode_field: str = "episode", mode_field: str = "mode"
    ) -> None:
        self.schema = schema
        self.episode_field = episode_field
        self.mode_field = mode_field

    def read(self, event: Event, payload: Any) -> Episode:
        row = {k: v for k, v in columns(payload, event.schema).items() if k not in RUN_FIELDS}
        mode = row.get(self.mode_field)
        return Episode(
            _episode(event, row, self.episode_field),
            "" if mode is None else str(mode),
            row,
            payload,
        )

    def _prefix(self, ep: Episode) -> str:
        return f"{ep.mode}_episodes" if ep.mode else "episodes"

    def csv_name(self, ep: Episode) -> str:
        return self._prefix(ep) + ".csv"

    def csv_chunks(self, ep: Episode) -> Optional[Tuple[str, str]]:
        import pandas as pd  # type: ignore[import-untyped, unused-ignore]

        df = pd.DataFrame([ep.stats])
        full = df.to_csv(None, index=False)
        body = df.to_csv(None, index=False, header=False)
        return full[: len(full) - len(body)], body

    def json_record(self, ep: Episode) -> Dict[str, Any]:
        return ep.stats

    def wandb_row(self, ep: Episode) -> Tuple[Dict[str, Any], str, Any]:
        import pandas as pd  # type: ignore[import-untyped, unused-ignore]

        numbers = {
            k: v
            for k, v in ep.stats.items()
            if isinstance(v, (int, float)) and k != self.episode_field
        }
        return numbers, self._prefix(ep) + "_table", pd.DataFrame([ep.stats])


def _episode(event: Event, payload: Any, name: str) -> int:
    value = field(payload, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"{event.schema.id}: no integer episode field {name!r} (got {value!r}; "
            "--episode-field names it)"
        )
    return value

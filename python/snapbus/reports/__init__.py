"""Per-episode reports from the bus: the files a lab's analysis tools read, written by a
consumer from one record per episode. The default is tbp.monty's layout (`monty.EpisodeStats`
records: `{mode}_stats.csv` as `BasicCSVStatsHandler` writes it, `detailed_run_stats.json` as
`DetailedJSONHandler`):

    python -m snapbus.reports --output-dir results/ --from oldest

The record's contract (docs/python.md, "tbp.monty's result files from the bus"): `episode`
(int, the global episode),
`mode` (`train`/`eval`), `stats` (the mapping tbp.monty's handlers receive for the episode:
`{"LM_0": {...}, "LM_1": {...}, "target": {...}}`), `run` (an id shared by the run's workers)
and `run_started` (Unix seconds); `detailed` (a mapping merged into the JSON record) is
optional.
"""

from ._cli import main
from ._layouts import MONTY_SCHEMA, GenericLayout, MontyLayout
from ._report import EpisodeReport, OrderedFile

__all__ = ["MONTY_SCHEMA", "EpisodeReport", "GenericLayout", "MontyLayout", "OrderedFile", "main"]

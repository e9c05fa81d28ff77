"""The per-episode report consumer: one record per episode (a mode, an episode number, a stats
mapping, a run) into files kept in episode order, one set per run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Container, Dict, List, Optional, Set, Tuple, Union

from .._snapbus import Event
from ..consumer import Consumer
from . import _monty
from ._layouts import Episode, GenericLayout, MontyLayout, field
from ._wandb import WandbSink


class OrderedFile:
    """One output file whose content is per-episode chunks in episode order (whatever order
    they arrive in): appended to while episodes come in order, rewritten (a temporary file
    renamed over it) when one arrives before an episode already written. The file is the
    first episode's header followed by every episode's rows, which is what appending episode
    by episode with "a header on the first write only" gives. An existing file is renamed
    `*_old` at the first write (tbp.monty's rule)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.chunks: Dict[int, Tuple[str, str]] = {}
        self.written: List[int] = []
        self.rewrite = False
        self.started = False

    def add(self, episode: int, header: str, rows: str) -> None:
        if episode in self.chunks or (self.written and episode < self.written[-1]):
            self.rewrite = True
        self.chunks[episode] = (header, rows)

    def write(self) -> None:
        """Brings the file up to date with the chunks received."""
        order = sorted(self.chunks)
        if not order or (order == self.written and not self.rewrite):
            return
        if not self.started:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _monty.rename_existing(self.path)
            self.started = True
        if self.written and not self.rewrite:
            new = order[len(self.written) :]
            with self.path.open("a") as f:
                f.write("".join(self.chunks[e][1] for e in new))
        else:
            text = self.chunks[order[0]][0] + "".join(self.chunks[e][1] for e in order)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)
        self.written = order
        self.rewrite = False


class _Run:
    """The files of one run."""

    def __init__(self, run: str, started: float, wandb: Optional[WandbSink]) -> None:
        self.run = run
        self.started = started
        self.files: Dict[str, OrderedFile] = {}
        self.episodes = 0
        self.wandb = wandb
        # Per mode, per episode: the record's `overall` mapping (for the experiment summary).
        self.overall: Dict[str, Dict[int, Dict[str, Any]]] = {}
        self.producers: Set[Tuple[int, int]] = set()


class EpisodeReport(Consumer):
    """Writes one record per episode into report files, tbp.monty's layout by default:
    `{mode}_stats.csv` (as `BasicCSVStatsHandler`), `detailed_run_stats.json` (JSON Lines,
    as `DetailedJSONHandler`) or, with `detailed_per_episode`, one
    `detailed_run_stats/episode_%06d.json` per episode; `detailed_episodes`: only those
    episodes' JSON (default all).

    Each record names its run (`run`: an id shared by the run's workers, `run_started`: its
    start, Unix seconds). Without `run` the producer's session tag is the run, else the
    producer itself (pid and start); without `run_started`, the earliest producer start seen
    for it. The newest run decides: records of an earlier run still in the ring are skipped
    (counted as `skipped`), and when a newer run starts its files replace the earlier run's,
    which become `*_old` as tbp.monty's second run into a directory does. `run`: only that
    run's records.

    `wandb_project`: also log each run to W&B in offline mode (`DIR/wandb/`), the record's
    `overall` mapping at `step=episode` and the `{mode}_stats_table`. Call `close` at the end
    (it logs what W&B still waits for and finishes the W&B run)."""

    kind = "episode-report"

    def __init__(
        self,
        output_dir: Union[str, Path],
        *,
        run: Optional[str] = None,
        detailed_per_episode: bool = False,
        detailed_episodes: Optional[Container[int]] = None,
        layout: Union[MontyLayout, GenericLayout, None] = None,
        wandb_project: Optional[str] = None,
    ) -> None:
        self.output_dir = Path(output_dir)
        self.only_run = run
        self.detailed_per_episode = detailed_per_episode
        self.detailed_episodes = detailed_episodes
        self.layout = layout or MontyLayout()
        self.wandb_project = wandb_project
        self.current: Optional[_Run] = None
        self.skipped = 0
        self.episodes = 0
        #: Records that do not follow the layout's contract, skipped.
        self.bad = 0
        self._told: Set[str] = set()
        self._producer_starts: Dict[str, float] = {}

    def _run_of(self, ev: Event, payload: Any) -> Tuple[str, float]:
        run = field(payload, "run")
        producer = ev.producer
        started = producer.started_nanos / 1e9
        if run is None:
            tag = producer.session_tag
            run = f"session:{tag}" if tag else f"pid:{producer.pid}@{producer.started_nanos}"
        run = str(run)
        given = field(payload, "run_started")
        if given is not None:
            return run, float(given)
        first = self._producer_starts.setdefault(run, started)
        if started < first:
            self._producer_starts[run] = first = started
        return run, first

    def on_event(self, event: Event) -> Any:
        payload = event.payload
        run, started = self._run_of(event, payload)
        if self.only_run is not None and run != self.only_run:
            self.skipped += 1
            return None
        cur = self.current
        if cur is None or (run != cur.run and started > cur.started):
            self.close()
            cur = self.current = self._start(run, started)
        elif run != cur.run:
            self.skipped += 1
            self.set_status("skipped", self.skipped)
            return None
        try:
            ep = self.layout.read(event, payload)
        except ValueError as e:
            # A record off the contract: counted and told once per schema, never fatal (a
            # supervised consumer restarted on it would meet it again in the ring).
            self.bad += 1
            self.set_status("bad", self.bad)
            if event.schema.id not in self._told:
                self._told.add(event.schema.id)
                print(f"snapbus reports: skipped: {e}", file=sys.stderr)
            return None
        self._add(cur, ep)
        producer = event.producer
        cur.producers.add((producer.pid, producer.started_nanos))
        overall = field(payload, "overall")
        if isinstance(overall, dict):
            cur.overall.setdefault(ep.mode, {})[ep.episode] = overall
        if cur.wandb is not None:
            cur.wandb.add(ep.episode, *self.layout.wandb_row(ep))
        return None

    def _start(self, run: str, started: float) -> _Run:
        sink = None
        if self.wandb_project is not None:
            sink = WandbSink(self.output_dir, self.wandb_project, run)
        return _Run(run, started, sink)

    def _add(self, cur: _Run, ep: Episode) -> None:
        layout = self.layout
        chunks = layout.csv_chunks(ep)
        if chunks is not None:
            self._file(cur, layout.csv_name(ep)).add(ep.episode, *chunks)
        wanted = self.detailed_episodes
        if wanted is None or ep.episode in wanted:
            record = layout.json_record(ep)
            if self.detailed_per_episode:
                _monty.write_episode_file(self.output_dir, layout.json_name, ep.episode, record)
            else:
                line = _monty.json_record(ep.episode, record) + os.linesep
                self._file(cur, layout.json_name + ".json").add(ep.episode, "", line)
        cur.episodes += 1
        self.episodes += 1

    def _file(self, cur: _Run, name: str) -> OrderedFile:
        f = cur.files.get(name)
        if f is None:
            f = cur.files[name] = OrderedFile(self.output_dir / name)
        return f

    def flush(self) -> None:
        cur = self.current
        if cur is None:
            return
        for f in cur.files.values():
            f.write()
        if cur.wandb is not None:
            cur.wandb.flush()
        self.set_status("episodes", cur.episodes)
        self.set_status("run", cur.run)

    def close(self) -> None:
        """Writes everything received; ends the run's W&B run (logging the episodes it still
        held back, in order)."""
        self.flush()
        cur = self.current
        if cur is None:
            return
        for mode, by_episode in sorted(cur.overall.items()):
            summary: Dict[str, Any] = _monty.experiment_summary(
                [by_episode[e] for e in sorted(by_episode)]
            )
            summary["overall/num_processes"] = len(cur.producers)
            path = self.output_dir / f"{mode}_overall_stats.json"
            _monty.rename_existing(path)
            path.write_text(json.dumps(summary, indent=2) + os.linesep)
            if cur.wandb is not None:
                cur.wandb.summary(summary)
        cur.overall = {}
        if cur.wandb is not None:
            cur.wandb.close()
            cur.wandb = None

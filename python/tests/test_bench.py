"""The Python rows of `compare` (benches/python/compare_py.py) run and report every row, with
its figure, against a real bus (quick mode; no assertion on speed: the figures go to
BENCHMARKS.md through `compare --python`).
"""

from __future__ import annotations

import json

from conftest import REPO, Bus

SCRIPT = REPO / "benches" / "python" / "compare_py.py"

ROWS = [
    "multiprocessing.Queue, pickled dataclasses",
    "logging QueueHandler",
    "snapbus, Python producer",
    "snapshot(), 5-field dataclass, level disabled",
    "snapshot(), 5-field dataclass, enabled",
    "snapshot() with a 4 KiB numpy field",
    "snapshot() with a 1 MiB numpy field ÷ numpy.copy of it",
    "snapshot() with a 4 KiB numpy field, 8 MiB lane",
    "snapshot() with a 1 MiB numpy field ÷ numpy.copy of it, 8 MiB lane",
    "snapbus Python → Python ÷ multiprocessing.Queue",
    "snapbus Python → Python ÷ QueueHandler/QueueListener",
    "snapshot(), disabled by the logger's level",
    *(
        f"{who}, {how}"
        for how in ("logger.info(event)", "handler.handle(record)")
        for who in (
            "SnapbusHandler, monty event",
            "monty's JsonFormatter → /dev/null, monty event",
            "SnapbusHandler ÷ monty's JSON lines",
        )
    ),
]


def test_every_python_row_is_measured(bus: Bus) -> None:
    p = bus.spawn_py([str(SCRIPT), "--quick"], env={"SNAPBUS_STRICT": "0"})
    out = p.wait(timeout_s=300)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("result ")]
    assert len(lines) == 1, (out.stdout, out.stderr)
    result = json.loads(lines[0][len("result ") :])
    rows = result["rows"]
    failed = [(r["row"], r["error"]) for r in rows if r["error"]]
    assert not failed, failed
    for want in ROWS:
        # The name, or the name and more after a space (not the 8 MiB-lane row, whose name
        # goes on after a comma).
        got = [r for r in rows if r["row"] == want or r["row"].startswith(want + " ")]
        assert len(got) == 1, (want, [r["row"] for r in rows])
        assert got[0]["value"] > 0, got[0]
    assert out.returncode == 0, out.stderr
    assert result["info"]["quick"] is True

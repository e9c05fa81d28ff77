"""The rerun bridge's command line: `python -m snapbus.rerun` (what `snapbus attach rerun`
and `snapbus rerun` run, and `snapbus export --format rrd`)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, Optional, Sequence

from ..consumer import _exit_reported, run
from ._bridge import Bridge, _Terminated
from ._setup import (
    DEFAULT_TIMELINES,
    DEFAULT_URL,
    RerunMissing,
    check_reachable,
    check_save_path,
    import_rerun,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m snapbus.rerun",
        description="Stream the bus (or a recording) into rerun.",
    )
    p.add_argument("--schema", action="append", default=[], metavar="GLOB")
    # Sinks: any of them, together (none: --spawn).
    p.add_argument("--connect", metavar="URL", nargs="?", const=DEFAULT_URL)
    p.add_argument("--spawn", action="store_true")
    p.add_argument("--save", metavar="FILE.rrd")
    p.add_argument("--timeline", action="append", default=[], metavar="FIELD")
    p.add_argument("--from", dest="start", default="latest", choices=["latest", "oldest"])
    p.add_argument("--bus", default=None)
    p.add_argument("--flush-every", type=float, default=0.2, metavar="SECONDS")
    p.add_argument("--from-recording", metavar="FILE.mcap")
    p.add_argument("--recording-name", default=None)
    p.add_argument("--check", action="store_true", help="check the arguments and rerun, then exit")
    return p


def _open_sink(rr: Any, ns: argparse.Namespace, name: str) -> Any:
    """A recording stream writing to every sink asked for (none: a spawned viewer)."""
    rec = rr.RecordingStream(name)
    sinks = []
    if ns.save:
        check_save_path(ns.save)
        sinks.append(rr.FileSink(ns.save))
    if ns.connect:
        check_reachable(ns.connect)
        sinks.append(rr.GrpcSink(ns.connect))
    if ns.spawn or not sinks:
        # A viewer on rerun's default port (an existing one is reused), then streamed to. The
        # SDK looks for the viewer on $PATH: the one of this wheel first (a supervised bridge
        # has the broker's $PATH, which need not name this venv).
        _viewer_on_path()
        rec.spawn(connect=False)
        try:
            check_reachable(DEFAULT_URL)
        except ConnectionError:
            raise ConnectionError(
                "the rerun viewer did not start, or stopped (no display? see above); on a "
                "machine without one use --save FILE.rrd, or --connect to a `rerun "
                "--serve-web` (its web viewer in a browser)"
            ) from None
        if ns.connect != DEFAULT_URL:
            sinks.append(rr.GrpcSink(DEFAULT_URL))
    rec.set_sinks(*sinks)
    return rec


def _viewer_on_path() -> None:
    """Puts the directory of this rerun-sdk's viewer binary first on $PATH."""
    try:
        import rerun_cli  # type: ignore[import-not-found, import-untyped, unused-ignore]

        where = os.path.dirname(os.path.abspath(rerun_cli.__file__))
    except ImportError:
        where = os.path.dirname(sys.executable)
    os.environ["PATH"] = where + os.pathsep + os.environ.get("PATH", "")


def _check(ns: argparse.Namespace) -> None:
    import_rerun()
    if ns.connect:
        check_reachable(ns.connect)
    if ns.save:
        existed = os.path.exists(ns.save)
        check_save_path(ns.save)
        if not existed:
            os.unlink(ns.save)
    if ns.from_recording and not os.path.isfile(ns.from_recording):
        raise FileNotFoundError(f"no recording {ns.from_recording}")


def _from_recording(bridge: Bridge, path: str, globs: Sequence[str]) -> int:
    """Feeds a recording's records (of `globs`) through the bridge; returns how many."""
    import fnmatch

    from ..recording import open_recording

    rec = open_recording(path)
    count = pending = 0
    for ev in rec:
        if globs and not any(fnmatch.fnmatchcase(ev.schema.id, g) for g in globs):
            continue
        bridge.on_event(ev)
        count += 1
        pending += len(ev.data)
        # Batches of at most 64 Ki records or 256 MiB of records, as a live bridge's flushes.
        if count % 65536 == 0 or pending >= 1 << 28:
            bridge.flush()
            pending = 0
    bridge.flush()
    lost = int(getattr(rec, "lost", 0) or 0)
    if lost:
        bridge.rec.log(
            "/snapbus",
            bridge.rr.TextLog(f"the recorder lost {lost} records", level="WARN"),
            static=True,
        )
    if not getattr(rec, "complete", True):
        why = getattr(rec, "error", "") or "cut short"
        bridge.rec.log(
            "/snapbus",
            bridge.rr.TextLog(f"the recording is incomplete: {why}", level="WARN"),
            static=True,
        )
    return count


def main(argv: Optional[Sequence[str]] = None) -> int:
    ns = parser().parse_args(argv)
    if ns.check:
        _check(ns)
        return 0
    rr = import_rerun()
    name = ns.recording_name or (
        os.path.basename(ns.from_recording) if ns.from_recording else "snapbus"
    )
    rec = _open_sink(rr, ns, name)
    bridge = Bridge(rec, ns.timeline or DEFAULT_TIMELINES, rr=rr)
    try:
        if ns.from_recording:
            count = _from_recording(bridge, ns.from_recording, ns.schema)
            print(f"snapbus rerun: {count} records of {ns.from_recording}", file=sys.stderr)
        else:

            def terminated(signum: int, frame: Any) -> None:
                # Never raised in the middle of a hook (a batch half-written): the bridge
                # stops after the record it is on, or at its next flush when idle.
                bridge.stopping = True

            signal.signal(signal.SIGTERM, terminated)
            signal.signal(signal.SIGINT, terminated)
            try:
                run(
                    bridge,
                    *ns.schema,
                    start=ns.start,
                    bus=ns.bus,
                    flush_every=ns.flush_every,
                )
            except _Terminated:
                pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        rec.flush(timeout_sec=30.0)
        rec.disconnect()
    if ns.from_recording and ns.schema and bridge.events == 0:
        if ns.save:
            os.unlink(ns.save)
        raise ValueError(f"no record of {ns.from_recording} matches --schema {' '.join(ns.schema)}")
    print(
        f"snapbus rerun: {bridge.events} records, {bridge.lost} lost",
        file=sys.stderr,
    )
    return 0


def _entry() -> int:
    return _exit_reported(main, "snapbus rerun", (RerunMissing, ValueError, OSError))

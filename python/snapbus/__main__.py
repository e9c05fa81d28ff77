"""`python -m snapbus run pkg.mod:Class [--glob G ...] [--start latest|oldest] [--bus B]`:
runs a `snapbus.Consumer` subclass as a process (also as a consumer supervised by the broker,
which it tells its exit code)."""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import signal
import sys
from typing import Any

from .consumer import Consumer, _exit_reported, run


class _Terminated(Exception):
    """SIGTERM (the broker stopping a supervised consumer): flush and exit 0."""


def _load(target: str) -> Any:
    """`pkg.mod:Class` or `path/to/script.py:Class`."""
    mod_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise SystemExit(f"snapbus run: expected MODULE:CLASS or SCRIPT.py:CLASS, not {target!r}")
    if mod_name.endswith(".py") or os.sep in mod_name:
        namespace = runpy.run_path(mod_name, run_name="__snapbus_consumer__")
        if attr not in namespace:
            raise SystemExit(f"snapbus run: {mod_name} defines no {attr!r}")
        return namespace[attr]
    sys.path.insert(0, os.getcwd())
    module = importlib.import_module(mod_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SystemExit(f"snapbus run: module {mod_name!r} has no {attr!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snapbus")
    cmds = parser.add_subparsers(dest="command", required=True)
    r = cmds.add_parser("run", help="run a snapbus.Consumer class")
    r.add_argument("target", help="MODULE:CLASS or SCRIPT.py:CLASS")
    r.add_argument("--glob", action="append", default=[], help="schema-id glob (repeatable)")
    r.add_argument("--start", default="latest", choices=["latest", "oldest"])
    r.add_argument("--bus", default=None)
    r.add_argument("--flush-every", type=float, default=1.0)
    r.add_argument("--until-end", action="store_true")
    parser.epilog = r.epilog = "Arguments after `--` are passed to the class's constructor."
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    ns = parser.parse_args(argv)
    cls = _load(ns.target)
    if not (isinstance(cls, type) and issubclass(cls, Consumer)):
        raise SystemExit(f"snapbus run: {ns.target} is not a snapbus.Consumer subclass")
    consumer = cls(*extra)

    def terminated(signum: int, frame: Any) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, terminated)
    try:
        run(
            consumer,
            *ns.glob,
            start=ns.start,
            bus=ns.bus,
            flush_every=ns.flush_every,
            until_end=ns.until_end,
        )
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(_exit_reported(main))

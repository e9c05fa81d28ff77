"""The rerun bridge's setup: the SDK it needs and the sinks' checks (before any record)."""

from __future__ import annotations

import os
import socket
import sys
import urllib.parse
from typing import Any, Tuple

__all__ = [
    "DEFAULT_TIMELINES",
    "DEFAULT_URL",
    "RERUN_PIN",
    "RERUN_SUPPORTED",
    "RerunMissing",
    "check_reachable",
    "check_save_path",
    "check_url",
    "import_rerun",
    "supported",
]

RERUN_PIN = "rerun-sdk==0.41.0"
"""The rerun SDK the bridge is written and tested against (CI)."""

RERUN_SUPPORTED = ((0, 36), (0, 41))
"""The oldest and newest rerun-sdk minor versions the bridge works with (both tested: the
floor with `SNAPBUS_RERUN_PIN=0.36.3`); outside them it warns."""

DEFAULT_TIMELINES = ("episode", "step", "epoch", "iteration")
"""Integer leaves with these names become sequence timelines (unless `--timeline`)."""

DEFAULT_URL = "rerun+http://127.0.0.1:9876/proxy"


class RerunMissing(RuntimeError):
    """rerun-sdk cannot be imported in this interpreter."""


def import_rerun() -> Any:
    """`import rerun`, or `RerunMissing` naming what to install into which interpreter."""
    try:
        import rerun  # type: ignore[import-not-found, unused-ignore]
    except ImportError as e:
        raise RerunMissing(
            f"the rerun bridge needs {RERUN_PIN} (Python >= 3.10, numpy >= 2), and "
            f"{sys.executable} (Python {sys.version.split()[0]}) cannot import rerun ({e}); "
            f"install it there: {sys.executable} -m pip install '{RERUN_PIN}', or pass "
            "--python PATH (or set $SNAPBUS_RERUN_PYTHON) to an interpreter that has it and "
            "snapbus"
        ) from None
    version = getattr(rerun, "__version__", "?")
    if not supported(version):
        (lo, hi) = RERUN_SUPPORTED
        print(
            f"snapbus rerun: warning: rerun-sdk {version} is installed; the bridge is tested "
            f"with {lo[0]}.{lo[1]} to {hi[0]}.{hi[1]} ({RERUN_PIN} in CI)",
            file=sys.stderr,
        )
    return rerun


def supported(version: str) -> bool:
    """Whether rerun-sdk `version` (`0.41.0`, `0.42.0a1`) is in `RERUN_SUPPORTED`."""
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    lo, hi = RERUN_SUPPORTED
    return lo <= (major, minor) <= hi


def check_url(url: str) -> Tuple[str, int]:
    """The host and port of a rerun gRPC URL (`rerun+http://HOST:PORT/proxy`); ValueError
    saying what is wrong."""
    parsed = urllib.parse.urlsplit(url)
    schemes = ("rerun", "rerun+http", "rerun+https")
    if parsed.scheme not in schemes:
        raise ValueError(
            f"bad rerun URL {url!r}: the scheme must be one of {', '.join(schemes)} "
            f"(e.g. {DEFAULT_URL})"
        )
    if parsed.path.rstrip("/") != "/proxy":
        raise ValueError(f"bad rerun URL {url!r}: the path must be /proxy (e.g. {DEFAULT_URL})")
    try:
        port = parsed.port
    except ValueError as e:
        raise ValueError(f"bad rerun URL {url!r}: {e}") from None
    if not parsed.hostname:
        raise ValueError(f"bad rerun URL {url!r}: no host (e.g. {DEFAULT_URL})")
    default_port = 443 if parsed.scheme == "rerun+https" else 9876
    return parsed.hostname, port if port is not None else default_port


def check_reachable(url: str, timeout_s: float = 3.0) -> None:
    """ConnectionError unless something listens at the URL's host and port."""
    host, port = check_url(url)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise ConnectionError(
            f"no rerun viewer or server at {url} ({e}); start one with `rerun` (a viewer) or "
            f"`rerun --serve-grpc --port {port}`"
        ) from None


def check_save_path(path: str) -> None:
    """OSError unless `path` can be written (it is created, and left empty)."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot save to {path}: it is a directory")
    try:
        with open(path, "ab"):
            pass
    except OSError as e:
        raise OSError(f"cannot save to {path}: {e.strerror or e}") from None

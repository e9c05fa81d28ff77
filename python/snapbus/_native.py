"""Loads the native half of snapbus built for this interpreter, as `snapbus._snapbus`.

The wheel carries four builds of it: `_py311/` on the stable ABI for CPython 3.11 and every
later version, and `_cp38/`, `_cp39/`, `_cp310/` on each older version's full API (the stable
ABI has no buffer protocol before 3.11). One wheel therefore installs on every CPython from 3.8
on, without Rust.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

VARIANT = "_py311" if sys.version_info >= (3, 11) else f"_cp3{sys.version_info[1]}"


def load() -> ModuleType:
    """Imports this interpreter's build and registers it as `snapbus._snapbus`."""
    name = f"snapbus.{VARIANT}._snapbus"
    try:
        native = importlib.import_module(name)
    except ImportError as e:
        where = Path(__file__).parent / VARIANT
        raise ImportError(
            f"snapbus: the native module for CPython {sys.version_info[0]}.{sys.version_info[1]}"
            f" is missing or broken in {where} ({e}); install the package with "
            "`pip install ./python` (or a wheel made by `pip wheel ./python`)"
        ) from e
    sys.modules["snapbus._snapbus"] = native
    setattr(sys.modules["snapbus"], "_snapbus", native)  # noqa: B010 (`snapbus._snapbus`)
    return native


NATIVE = load()

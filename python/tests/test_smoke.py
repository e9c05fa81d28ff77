"""The package imports and the native module is the one built from this tree."""

from __future__ import annotations

import snapbus._snapbus as native


def test_native_module_carries_the_workspace_version() -> None:
    assert native.__version__ == "0.1.0"

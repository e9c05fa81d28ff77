"""Exceptions of the read side."""

from __future__ import annotations


class BusNotRunning(ConnectionError):
    """No broker runs for the bus (start one with `snapbus up`); the message names the bus."""

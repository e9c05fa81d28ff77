"""PLACEHOLDER (skeleton): reading MCAP recordings and snapshots."""

Recording = open_recording = None

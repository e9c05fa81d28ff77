"""PLACEHOLDER (skeleton): SnapbusHandler, a logging.Handler emitting records as snapshots."""


class SnapbusHandler:
    pass

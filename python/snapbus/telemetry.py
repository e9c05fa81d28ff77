"""PLACEHOLDER (skeleton): telemetry handles and process-wide producer settings."""

TRACE, DEBUG, INFO, WARN, ERROR = 5, 10, 20, 30, 40
Telemetry = getTelemetry = get_telemetry = init = is_connected = None
sample_resources = shutdown = stats = wait_for_bus = None

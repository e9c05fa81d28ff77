"""PLACEHOLDER (skeleton): the Consumer base class and run()."""

STOP = Consumer = run = None

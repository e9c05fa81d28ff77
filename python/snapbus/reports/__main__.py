"""`python -m snapbus.reports`: the per-episode report consumer (see `snapbus.reports`)."""

import sys

from ._cli import _entry

if __name__ == "__main__":
    sys.exit(_entry())

"""`python -m snapbus.rerun`: the bridge's command line (see `snapbus.rerun`)."""

import sys

from ._cli import _entry

if __name__ == "__main__":
    sys.exit(_entry())

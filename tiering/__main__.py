"""``python -m tiering tier --once | --continuous`` (also ``fluss-lake tier`` through the entry point)."""

import sys

from tiering.cli import main

if __name__ == "__main__":
    sys.exit(main())

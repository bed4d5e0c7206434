"""``python -m serving serve ...`` (also ``fluss-lake serve`` through the entry point)."""

import sys

from serving.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""``fluss-lake ui``: the Dagster UI on the embedded default, registered through the ``fluss_lake.commands``
entry-point group (``ui = "assets.cli:register"``). ``python -m assets.cli ui`` runs the same command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``ui`` sub-command to the ``fluss-lake`` parser."""
    parser = subparsers.add_parser(
        "ui",
        help="start the Dagster UI with the Customer 360 demo ready to materialize (Ctrl-C stops it)",
        description="Start `dagster dev` on the assets code location. Tables live under --home (default "
        "$FLUSS_LAKE_HOME or ./.fluss-lake): the live store in live/, the Iceberg catalog in lake/, "
        "the Dagster instance in dagster/ (telemetry off).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=3000, help="port to listen on (default: 3000)")
    parser.add_argument("--home", type=Path, default=None, help="folder for the store, the lake and Dagster")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from assets.ui import run_ui

    return run_ui(host=args.host, port=args.port, home=args.home)


def main(argv: list[str] | None = None) -> int:
    """``python -m assets.cli ui ...`` without the installed ``fluss-lake`` entry point."""
    parser = argparse.ArgumentParser(prog="python -m assets.cli")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())

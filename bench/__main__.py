"""Run every benchmark: ``python -m bench [--quick] [--rows N] [--repeats K] [--only upsert,lookup]``.

Each module runs in turn in this process (JSON lines on stdout, tables on stderr); options other than
``--only`` are passed to every module.
"""

from __future__ import annotations

import argparse
import importlib
import sys

MODULES = ("upsert", "append", "lookup", "training", "delta_join", "lookup_join", "tiering")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", default=",".join(MODULES), help=f"comma list of {', '.join(MODULES)}")
    args, rest = parser.parse_known_args(argv)
    failed = []
    for name in [m.strip() for m in args.only.split(",") if m.strip()]:
        if name not in MODULES:
            parser.error(f"unknown benchmark {name!r}; choose from {', '.join(MODULES)}")
        print(f"\n### bench.{name} {' '.join(rest)}", file=sys.stderr, flush=True)
        try:
            importlib.import_module(f"bench.{name}").main(rest)
        except (Exception, SystemExit) as exc:  # keep going: report the others
            print(f"bench.{name} failed: {exc!r}", file=sys.stderr, flush=True)
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The Dagster layer's ``fluss-lake`` verbs, each registered through the ``fluss_lake.commands`` entry-point group
(``ui = "assets.cli:register"``, ``materialize = "assets.cli:register_materialize"``, ...). ``python -m assets.cli
VERB`` runs the same commands without the installed console script.

* ``ui``: the Dagster UI on a home (``--home``, else ``$FLUSS_LAKE_HOME``, else ``./.fluss-lake``);
* ``materialize``: run ``demo_pipeline`` (the UI's **Materialize all**) or another demo job on that home,
  ``--days N`` writing N days of event time in the one run;
* ``backfill``: build the training set of a range of days (``--from``/``--to``; default every day with data);
* ``dagster``: any ``dagster`` command with the home's instance (``DAGSTER_HOME``) and ``FLUSS_LAKE_HOME`` set.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["main", "register", "register_backfill", "register_dagster", "register_materialize"]

_HOME_HELP = (
    "home folder: store in live/, lake in lake/, Dagster in dagster/ (default: $FLUSS_LAKE_HOME or ./.fluss-lake)"
)


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
    parser.set_defaults(func=_run_ui)


def register_materialize(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``materialize`` sub-command."""
    from assets.runs import JOBS

    jobs = "; ".join(f"{name}: {what}" for name, what in JOBS.items())
    parser = subparsers.add_parser(
        "materialize",
        help="run the demo pipeline once on the home (the UI's 'Materialize all'); --days N writes N days",
        description="Run a job of the Customer 360 demo in this process, on the home's Dagster instance (the UI "
        f"shows the run). Jobs: {jobs}. Each run writes the next batch (one hour of event time) of every stream; "
        "--days N writes N days of batches in the one run. The training set is built by `fluss-lake backfill`.",
    )
    parser.add_argument("--home", default=None, help=_HOME_HELP)
    parser.add_argument("--job", default="demo_pipeline", choices=sorted(JOBS), help="job to run (demo_pipeline)")
    parser.add_argument(
        "--days", type=float, default=None, metavar="N", help="write N days of event time (default: one batch)"
    )
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="ASSET",
        help="run only this asset of the job, e.g. lake/payments (repeat; default: the whole job)",
    )
    parser.set_defaults(func=_run_materialize)


def register_backfill(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``backfill`` sub-command."""
    parser = subparsers.add_parser(
        "backfill",
        help="build the training set of a range of days on the home (default: every day the lake has data for)",
        description="Materialize training/fraud_training_set for the days --from..--to (YYYY-MM-DD, both "
        "included) in one run on the home's Dagster instance. The days are those the lake holds payments for: "
        "by default all of them; a day without payments is refused. Reads the lake, creates nothing when the "
        "home has none.",
    )
    parser.add_argument("--home", default=None, help=_HOME_HELP)
    parser.add_argument("--from", dest="start", default=None, metavar="DAY", help="first day (default: the first)")
    parser.add_argument("--to", dest="end", default=None, metavar="DAY", help="last day (default: the last)")
    parser.set_defaults(func=_run_backfill)


def register_dagster(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dagster`` sub-command: the ``dagster`` CLI with the home's instance."""
    parser = subparsers.add_parser(
        "dagster",
        help="run a dagster command with the home's instance, e.g. dagster asset list -m assets.definitions",
        description="Run `dagster ARGS...` with DAGSTER_HOME set to the home's instance (absolute, created with "
        "telemetry off) and FLUSS_LAKE_HOME to the home, as `fluss-lake ui` does; exits with dagster's code.",
    )
    parser.add_argument("--home", default=None, help=_HOME_HELP)
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the dagster command and options")
    parser.set_defaults(func=_run_dagster)


def _run_ui(args: argparse.Namespace) -> int:
    from assets.ui import run_ui

    return run_ui(host=args.host, port=args.port, home=args.home)


def _guarded(run: Callable[[], int]) -> int:
    """Bad input is one line on stderr and exit code 2."""
    from fluss_lake.exceptions import FlussLakeError

    try:
        return run()
    except FlussLakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _describe(key: str, meta: Mapping[str, Any]) -> str:
    """One line per materialized asset: what was written or tiered, and the size after."""
    parts = []
    if "batch" in meta:
        n = int(meta.get("batches", 1))
        last = int(meta["batch"])
        parts.append(f"batch {last}" if n == 1 else f"batches {last - n + 1}..{last}")
    for name, label in (("rows_written", "rows written"), ("rows_tiered", "rows tiered"), ("steps", "job step(s)")):
        if name in meta:
            parts.append(f"{_count(meta[name])} {label}")
    if "dagster/row_count" in meta:
        parts.append(f"{_count(meta['dagster/row_count'])} rows now")
    return f"  {key:<28} {', '.join(parts)}"


def _report(outcome: Any, *, details: bool = True) -> int:
    """What a run did (one line per asset, or one line for the run), its failures; 0 when all went well."""
    if details:
        for key, meta in outcome.materialized.items():
            print(_describe(key, meta))
    for failure in outcome.failures:
        print(f"  FAILED {failure}", file=sys.stderr)
    for check in outcome.failed_checks:
        print(f"  check failed: {check}", file=sys.stderr)
    if not outcome.ok:
        print(f"  the run's log: `fluss-lake ui`, Runs, {outcome.run_id}", file=sys.stderr)
    state = "succeeded" if outcome.success else "FAILED"
    if details or not outcome.success:
        print(f"run {outcome.run_id[:8]} {state} in {outcome.seconds:.1f} s", flush=True)
    else:
        live: Mapping[str, Any] = outcome.materialized.get("payments") or next(
            (m for m in outcome.materialized.values() if "event_window" in m), {}
        )
        window = f" ({live['event_window']})" if live else ""
        print(f"run {outcome.run_id[:8]} {state} in {outcome.seconds:.1f} s: {_describe('', live).strip()}{window}")
    return 0 if outcome.ok else 1


def _run_materialize(args: argparse.Namespace) -> int:
    def run() -> int:
        from assets.runs import batches_for_days, materialize, training_days
        from tiering.home import Home

        home = Home.resolve(args.home)
        span = ""
        if args.days is not None:
            span = f", {args.days:g} day(s) of event time = {batches_for_days(args.days)} batches, a run per day"
        print(f"fluss-lake materialize: job {args.job} on home {home}{span}", flush=True)
        outcomes = materialize(home, job=args.job, days=args.days, select=args.select)
        codes = [_report(o, details=o is outcomes[-1]) for o in outcomes]
        days = training_days(home)
        if days and outcomes[-1].success:
            print(f"the lake has payments on {_days(days)}: `fluss-lake backfill` builds their training set")
        return max(codes)

    return _guarded(run)


def _days(days: list[str]) -> str:
    return days[0] if len(days) == 1 else f"{days[0]} .. {days[-1]} ({len(days)} days)"


def _run_backfill(args: argparse.Namespace) -> int:
    def run() -> int:
        from assets.runs import backfill
        from tiering.home import Home

        home = Home.resolve(args.home)
        days, outcome = backfill(home, start=args.start, end=args.end)
        print(f"fluss-lake backfill: training/fraud_training_set for {_days(days)} on home {home}")
        meta = outcome.materialized.get("training/fraud_training_set", {})
        for day, rows in dict(meta.get("days", {})).items():
            print(f"  {day}  {rows:,} rows")
        if "location" in meta:
            print(f"  written to {meta['location']} (fraud rate {meta.get('run_fraud_rate')})")
        return _report(outcome, details=False) if not outcome.success else _done(outcome)

    return _guarded(run)


def _done(outcome: Any) -> int:
    print(f"run {outcome.run_id[:8]} succeeded in {outcome.seconds:.1f} s")
    return 0


def _run_dagster(args: argparse.Namespace) -> int:
    from assets.ui import prepare_home
    from tiering.home import HOME_ENV, Home

    if not args.args:
        print(
            "error: name a dagster command, e.g. fluss-lake dagster asset list -m assets.definitions", file=sys.stderr
        )
        return 2
    home = Home.resolve(args.home)
    dagster_home = prepare_home(home.root).resolve()
    env = {**os.environ, HOME_ENV: str(home.root), "DAGSTER_HOME": str(dagster_home)}
    return subprocess.call([sys.executable, "-m", "dagster", *args.args], env=env)


_VERBS = (register, register_materialize, register_backfill, register_dagster)


def main(argv: list[str] | None = None) -> int:
    """``python -m assets.cli VERB ...`` without the installed ``fluss-lake`` entry point."""
    parser = argparse.ArgumentParser(prog="python -m assets.cli")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in _VERBS:
        add(subparsers)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())

"""``fluss-lake tier --once | --continuous``: the tiering service on the command line, with a progress display.

(The core's ``fluss-lake`` command finds this verb through the ``fluss_lake.commands`` entry-point group;
``python -m tiering tier ...`` runs it too.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any, TextIO

from fluss_lake.exceptions import FlussLakeError, InvalidConfigError
from fluss_lake.jobs.shard import Shard
from tiering.home import existing_store, resolve_store

__all__ = ["main", "register", "run"]

#: What ``fluss-lake tier --help`` says.
_DESCRIPTION = (
    "Copy every lake-enabled table (table.datalake.enabled) of a store into Iceberg tables, exactly once: log "
    "tables are appended, primary-key tables keep their current rows plus a <table>__history changelog, and each "
    "commit carries the bucket offsets it tiered, so a stopped or killed run resumes where it left off. --once "
    "tiers what is there now; --continuous keeps the lake within each table's table.datalake.freshness. The store "
    "and lake are a home's (--home, else $FLUSS_LAKE_HOME, else ./.fluss-lake: what `fluss-lake ui` uses) unless "
    "--store names a store; a store that does not exist is an error, never created."
)


def register(subparsers: Any) -> None:
    """Add the ``tier`` sub-command to an argparse sub-parsers object."""
    parser = subparsers.add_parser(
        "tier", help="tier lake-enabled tables into Iceberg (once or continuously)", description=_DESCRIPTION
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="one round over every lake-enabled table, then exit")
    mode.add_argument(
        "--continuous",
        action="store_true",
        help="keep every table within its table.datalake.freshness until SIGINT/SIGTERM",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--home",
        help="home folder: the store <home>/live, the lake <home>/lake (default: $FLUSS_LAKE_HOME or ./.fluss-lake, "
        "the folder `fluss-lake ui` and `fluss-lake materialize` use)",
    )
    where.add_argument(
        "--store",
        help="live store folder or URL instead of a home (default: $FLUSS_LAKE_URL, else the home's store); "
        "its lake is <store>/_lake unless --catalog says otherwise",
    )
    parser.add_argument(
        "--storage-options",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="fsspec storage options of the live store, as JSON",
    )
    parser.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pyiceberg catalog property (repeat; default: the embedded lake, <home>/lake or <store>/_lake)",
    )
    parser.add_argument(
        "--table",
        action="append",
        default=None,
        metavar="DB.TABLE",
        help="tier only this table (repeat; default: every table with table.datalake.enabled)",
    )
    parser.add_argument(
        "--expire-partitions",
        action="store_true",
        help="also delete the lake data of partitions dropped live (default: the lake keeps it)",
    )
    parser.add_argument(
        "--remove-orphan-files",
        action="store_true",
        help="with --once: then delete lake files no snapshot references (left by killed rounds) "
        "that are older than --orphan-grace",
    )
    parser.add_argument(
        "--orphan-grace",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="keep unreferenced files younger than this (a round may still be writing them; default 3600)",
    )
    parser.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="tier only the buckets shard I of N owns (run one process per shard, I = 0 .. N-1; docs/SHARDS.md)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --continuous: stop after this many seconds",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run the ``tier`` command; returns the exit code (0 ok, 1 a table failed, 2 bad arguments)."""
    import fluss_lake as fl
    from tiering.lake import Lake

    out = out or sys.stdout
    if args.remove_orphan_files and not args.once:
        print("error: --remove-orphan-files runs with --once", file=sys.stderr)
        return 2
    try:
        catalog = _parse_properties(args.catalog)
        home, store = resolve_store(home=args.home, store=args.store)
        existing_store(store, home, doing="nothing to tier")
        conn = fl.connect(store, storage_options=args.storage_options)
        lake = Lake.for_home(home) if home is not None and catalog is None else Lake.for_connection(conn, catalog)
        shard = parse_shard(getattr(args, "shard", None))
    except FlussLakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _say(out, f"live store {conn.url} -> lake {lake!r}")
    empty = _nothing_to_tier(conn, args.table)
    if empty:
        _say(out, empty)
    if args.once:
        if empty:
            return 0
        code = _once(conn, lake, args.table, out, expire=args.expire_partitions, shard=shard)
        if code == 0 and args.remove_orphan_files:
            code = _orphans(conn, lake, args.table, args.orphan_grace, out)
        return code
    return _continuous(conn, lake, args.table, args.duration, out, expire=args.expire_partitions, shard=shard)


def parse_shard(text: str | None) -> Shard | None:
    """``"I/N"`` as :class:`~fluss_lake.jobs.Shard` (None: all buckets)."""
    if text is None:
        return None
    index, slash, count = text.partition("/")
    if not slash or not index.strip().isdigit() or not count.strip().isdigit():
        raise InvalidConfigError(f"--shard {text!r}: write it as I/N, e.g. 0/2 (shard 0 of 2)")
    return Shard(int(index), int(count))


def _nothing_to_tier(conn: Any, tables: list[str] | None) -> str | None:
    """A sentence when the store holds no lake-enabled table (None when there is something to tier)."""
    if tables:
        return None  # named tables: tier_once says if one is missing or not lake-enabled
    from tiering.service import _resolve

    if _resolve(conn, None):
        return None
    names = [f"{db}.{t}" for db in conn.list_databases() for t in conn.list_tables(db)]
    if not names:
        return f"nothing to tier: the store {conn.url} has no tables"
    return (
        f"nothing to tier: none of the {len(names)} table(s) of {conn.url} has table.datalake.enabled "
        "(set it with connection.alter_table(path, set_options={'table.datalake.enabled': 'true'}))"
    )


def _parse_properties(items: list[str]) -> dict[str, str] | None:
    if not items:
        return None
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            from fluss_lake.exceptions import InvalidConfigError

            raise InvalidConfigError(f"--catalog {item!r}: write KEY=VALUE, e.g. --catalog uri=sqlite:///lake.db")
        props[key] = value
    return props


def _say(out: TextIO, text: str) -> None:
    print(text, file=out, flush=True)


def _describe(report: Any) -> str:
    moved = {
        b: f"{report.start_offsets.get(b, 0)}->{o}"
        for b, o in report.end_offsets.items()
        if report.start_offsets.get(b, 0) != o
    }
    extra = f", history +{report.history_rows}" if report.kind == "primary-key" else ""
    skipped = f", SKIPPED expired offsets {dict(report.skipped_offsets)}" if report.skipped_offsets else ""
    state = "committed" if report.committed else "up to date"
    return (
        f"  {report.table!s:<30} {report.kind:<11} +{report.rows} rows{extra}, offsets {moved or '-'}, "
        f"{state} in {report.seconds:.2f} s{skipped}"
    )


def _once(
    conn: Any, lake: Any, tables: list[str] | None, out: TextIO, *, expire: bool = False, shard: Shard | None = None
) -> int:
    from tiering.service import tier_once

    started = time.perf_counter()
    count = [0]

    def progress(report: Any) -> None:
        count[0] += 1
        _say(out, _describe(report))

    try:
        reports = tier_once(conn, lake, tables=tables, on_report=progress, expire_partitions=expire, shard=shard)
    except FlussLakeError as exc:
        _say(out, f"error: {exc}")
        return 1
    rows = sum(r.rows for r in reports)
    _say(out, f"tiered {len(reports)} table(s), {rows} rows in {time.perf_counter() - started:.2f} s")
    return 0


def _orphans(conn: Any, lake: Any, tables: list[str] | None, grace: float, out: TextIO) -> int:
    from tiering.orphans import remove_orphan_files
    from tiering.service import _resolve

    try:
        for live in _resolve(conn, tables):
            for report in remove_orphan_files(lake, live.path, older_than_s=grace):
                _say(
                    out,
                    f"  {report.table:<30} removed {len(report.removed)} orphan file(s), kept "
                    f"{len(report.too_recent)} younger than {grace:g} s",
                )
    except FlussLakeError as exc:
        _say(out, f"error: {exc}")
        return 1
    return 0


def _continuous(
    conn: Any,
    lake: Any,
    tables: list[str] | None,
    duration: float | None,
    out: TextIO,
    *,
    expire: bool = False,
    shard: Shard | None = None,
) -> int:
    from tiering.service import TieringService

    failed = threading.Event()

    def progress(item: Any) -> None:
        if isinstance(item, Exception):
            failed.set()
            _say(out, f"  error: {item}")
        elif item.committed:
            _say(out, _describe(item))

    service = TieringService(conn, lake, tables=tables, on_report=progress, expire_partitions=expire, shard=shard)
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        service.start()
        _say(out, f"tiering continuously (pid {os.getpid()}); SIGINT or SIGTERM stops after the running round")
        deadline = time.monotonic() + duration if duration is not None else None
        next_status = time.monotonic() + 5
        while not stop.wait(0.2):
            if deadline is not None and time.monotonic() >= deadline:
                break
            if time.monotonic() >= next_status:
                next_status = time.monotonic() + 5
                _status(service, out)
    finally:
        service.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _status(service, out)
    _say(out, f"stopped cleanly after {service.rounds} round(s)")
    return 1 if failed.is_set() and service.last_errors else 0


def _status(service: Any, out: TextIO) -> None:
    try:
        lags = service.lag()
    except FlussLakeError as exc:
        _say(out, f"  lag unknown: {exc}")
        return
    for path, lag in sorted(lags.items(), key=lambda kv: str(kv[0])):
        _say(out, f"  lag {path!s:<30} {lag.total_offsets} offsets, {lag.seconds:.1f} s")


def main(argv: list[str] | None = None) -> int:
    """``python -m tiering tier ...`` (the same command as ``fluss-lake tier``)."""
    parser = argparse.ArgumentParser(prog="python -m tiering")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))

"""``fluss-lake check``: verify every stored object of a store, report damage by object, optionally repair.

Repair rebuilds damaged state (snapshots, segments, index files) from the log, and damaged or missing log objects
from the lake where tiering copied their records (the embedded lake ``<store>/_lake``, or ``--catalog``); what
neither holds stays reported. Exit status: 0 when nothing is left damaged, 1 when something is, 2 for bad arguments
or a store that does not exist.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, TextIO

import fluss_lake as fl
from fluss_lake import Damage
from fluss_lake.exceptions import FlussLakeError
from tiering.home import existing_store, resolve_store

__all__ = ["check", "register"]

_DESCRIPTION = (
    "Verify every stored object of a store (table metadata, log batches and segments, primary-key state snapshots "
    "with their segments and index files, job checkpoints): checksums, decoding, offsets without gaps. Damage is "
    "reported by object name with its table, bucket and offsets. With --repair, damaged state is rebuilt from the "
    "log, and damaged log objects from the lake where they were tiered. Exit status 0: nothing left damaged; 1: "
    "damage left; 2: bad arguments or no store."
)


def register(subparsers: Any) -> None:
    """Add the ``check`` sub-command to an argparse sub-parsers object."""
    parser = subparsers.add_parser(
        "check", help="verify stored objects, report damage, optionally repair", description=_DESCRIPTION
    )
    parser.add_argument(
        "--home", help="the home folder (default: $FLUSS_LAKE_HOME, else ./.fluss-lake): its live store"
    )
    parser.add_argument("--store", help="live store folder or URL (instead of a home's; default: $FLUSS_LAKE_URL)")
    parser.add_argument(
        "--storage-options",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="fsspec storage options of the live store, as JSON",
    )
    parser.add_argument(
        "--table",
        action="append",
        default=None,
        metavar="DB.TABLE",
        help="check only this table (repeat; default: every table and the jobs' checkpoints)",
    )
    parser.add_argument(
        "--repair", action="store_true", help="rebuild damaged state from the log and damaged log objects from the lake"
    )
    parser.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --repair: the lake's pyiceberg catalog property (repeat; default: <store>/_lake)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    catalog = dict(item.split("=", 1) for item in args.catalog) if args.catalog else None
    try:
        home, store = resolve_store(home=args.home, store=args.store)
        existing_store(store, home, doing="nothing to check")
        conn = fl.connect(store, storage_options=args.storage_options)
        return check(conn, tables=args.table, repair=args.repair, catalog_properties=catalog)
    except FlussLakeError as exc:
        print(f"fluss-lake check: {exc}", file=sys.stderr)
        return 2


def check(
    conn: fl.Connection,
    *,
    tables: list[str] | None = None,
    repair: bool = False,
    catalog_properties: dict[str, str] | None = None,
    out: TextIO | None = None,
) -> int:
    """Verify (and with `repair`, repair) the store of `conn`, print a report; returns the exit status."""
    out = out or sys.stdout
    reports = conn.verify(repair=repair, tables=tables)
    if repair:
        reports = _restore_from_lake(conn, reports, catalog_properties)
    for report in reports:
        print(report.summary(), file=out)
    left = sum(len(r.unrepaired) for r in reports)
    print(
        f"{sum(r.checked for r in reports)} objects checked: "
        + ("no damage" if not any(r.damage for r in reports) else f"{left} damaged object(s) left"),
        file=out,
    )
    return 1 if left else 0


def _restore_from_lake(
    conn: fl.Connection, reports: list[fl.IntegrityReport], catalog_properties: dict[str, str] | None
) -> list[fl.IntegrityReport]:
    """Restore the damaged log objects of each table from the lake, then check those tables again."""
    from tiering.lake import Lake
    from tiering.log_restore import restore_log_from_lake

    lake = Lake(catalog_properties) if catalog_properties else Lake.for_connection(conn)
    again = []
    for report in reports:
        if report.table.startswith(".") or any(d.kind == "metadata" for d in report.unrepaired):
            again.append(report)  # the jobs' checkpoints, or a table whose metadata cannot be read
            continue
        table = conn.get_table(report.table)
        # also when verify found nothing: a log that lost its newest batches looks whole, the lake knows better
        lake_enabled = table.info.options.get("table.datalake.enabled") == "true"
        restored = restore_log_from_lake(table, lake) if lake_enabled else []
        if not restored:
            again.append(report)
            continue
        after = table.verify(repair=True)
        left = {d.key for d in after.unrepaired}
        damage = tuple(d if d.key in left else dataclasses.replace(d, repaired=True) for d in report.damage)
        damage += tuple(d for d in after.damage if d.key not in {e.key for e in report.damage})
        damage += tuple(  # restored from the lake though verify saw nothing there (a lost newest batch)
            Damage(key, "missing (the lake had its records)", kind="log", repaired=True)
            for key in restored
            if key not in {d.key for d in damage}
        )
        again.append(fl.IntegrityReport(report.table, report.checked, report.unverified, damage))
    return again

"""Tiering live tables into Iceberg, exactly once, and reading the lake (union reads, Polars, DuckDB).

The lake is any pyiceberg catalog (:class:`Lake`; a sqlite catalog with a local warehouse beside the live store
by default). :func:`tier_once` runs one round over the tables with ``table.datalake.enabled``;
:class:`TieringService` keeps them within ``table.datalake.freshness``. Reads: :func:`read_lake`,
:func:`read_history` (the changelog of a primary-key table), :func:`union_read` (lake snapshot + live tail) and
:func:`register_duckdb`; :func:`compact_table` bounds the position deletes of a current-state table. Layout and
guarantees: ``docs/TIERING.md``.
"""

from tiering.committer import TableTieringReport, tier_table
from tiering.compaction import (
    CompactionPolicy,
    CompactionReport,
    compact_history,
    compact_table,
)
from tiering.duckdb_views import register_duckdb
from tiering.lake import Lake
from tiering.lake_snapshot import LakeSnapshot
from tiering.reads import read_history, read_lake, union_read
from tiering.service import TableLag, TieringService, table_lag, tier_once
from tiering.snapshots import lake_snapshots

__all__ = [
    "CompactionPolicy",
    "CompactionReport",
    "Lake",
    "LakeSnapshot",
    "TableLag",
    "TableTieringReport",
    "TieringService",
    "compact_history",
    "compact_table",
    "lake_snapshots",
    "read_history",
    "read_lake",
    "register_duckdb",
    "table_lag",
    "tier_once",
    "tier_table",
    "union_read",
]

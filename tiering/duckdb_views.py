"""DuckDB views over lake tables, union reads, histories and live tables that read nothing at registration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from fluss_lake.metadata.table_path import TablePath
from tiering.lazy_reads import scan_history, scan_lake, scan_union

if TYPE_CHECKING:
    from fluss_lake.connection import Connection
    from tiering.lake import Lake

__all__ = ["register_duckdb"]


def register_duckdb(
    con: Any,
    lake: Lake,
    connection: Connection | None = None,
    *,
    tables: Sequence[str | TablePath] | None = None,
    union: bool = True,
    live: bool = False,
) -> list[str]:
    """Register lake tables (union reads when `connection` is given and `union`) as DuckDB views ``db.table``,
    and primary-key histories as ``db."table__history"``; returns the view names.

    With `live` (and a `connection`) every live table gets a view too: ``db.table`` for a table the lake does
    not hold (its current rows, ``Table.to_lazy()``), and ``db."table$changelog"`` for each (its ``$changelog``).

    Registering reads no data: each view is a Polars LazyFrame that DuckDB collects on every query, handing it
    the query's columns and filters; it plans the lake files and reads the live log then (:mod:`tiering.lazy_reads`,
    ``Table.to_lazy``), so a view always shows the data as of the query. Lake data is read by Polars' Parquet
    scan, not DuckDB's iceberg extension: duckdb 2.0.1 cannot install that extension offline and the PyPI
    extension wheels only load into duckdb 1.5.5 (STACK-NOTES §4).

    Examples
    --------
    >>> import duckdb, tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.ev", schema={"v": "INT"}, options={"table.datalake.enabled": True})
    >>> _ = conn.get_table("d.ev").append([{"v": 1}, {"v": 2}])
    >>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
    >>> _ = conn.get_table("d.ev").append([{"v": 3}])
    >>> con = duckdb.connect(); register_duckdb(con, lake, conn)
    ['d.ev']
    >>> con.sql("select sum(v) from d.ev").fetchall()
    [(6,)]
    >>> _ = conn.get_table("d.ev").append([{"v": 4}])   # seen by the next query, no registering again
    >>> con.sql("select sum(v) from d.ev").fetchall()
    [(10,)]
    """
    never_tiered = lake._catalog is None and lake._local_catalog_missing()
    if tables is None:
        tables = (
            []  # nothing was ever tiered here: no lake views, and no empty catalog created
            if never_tiered
            else [
                TablePath(ns[0], name)
                for ns in lake.catalog.list_namespaces()
                for _, name in lake.catalog.list_tables(ns)
                if not name.endswith("__history")
            ]
        )
    frames: dict[tuple[str, str], pl.LazyFrame] = {}
    for path in map(TablePath.of, tables):
        if connection is not None and union:
            frames[path.database, path.table] = scan_union(connection.get_table(path), lake)
        else:
            frames[path.database, path.table] = scan_lake(lake, path)
        if lake.load(path, "history") is not None:
            frames[path.database, path.table + "__history"] = scan_history(lake, path)
    if live and connection is not None:
        for database in connection.list_databases():
            for name in connection.list_tables(database):
                table = connection.get_table(TablePath(database, name))
                frames.setdefault((database, name), table.to_lazy())
                frames[database, name + "$changelog"] = table.to_lazy(view="changelog")
    views = []
    for (database, name), frame in frames.items():
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{database}"')
        hidden = f"__fluss_lake_{database}_{name}"
        con.register(hidden, frame)
        con.execute(f'CREATE OR REPLACE VIEW "{database}"."{name}" AS SELECT * FROM "{hidden}"')
        views.append(f"{database}.{name}")
    return views

"""Lake reads that plan on each collect: Polars IO sources over lake tables, histories and union reads.

:func:`~tiering.reads.read_lake` and :func:`~tiering.reads.union_read` plan when called (the lake files, the live
tail's offsets). The sources here call them again on every collect, with the projection, predicate and row limit
Polars hands the source pushed into them (the lake part into Polars' Parquet scan: columns, row-group statistics;
``n_rows`` stops early), and stream the result in batches. A DuckDB view over one (:func:`register_duckdb`)
therefore always shows the table as of the query, and registering one reads no data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import polars as pl
from polars.io.plugins import register_io_source

from fluss_lake.exceptions import InvalidConfigError, TableNotExistError
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.scan import necessary_conditions
from tiering.reads import read_history, read_lake, union_read
from tiering.schema import BUCKET, OFFSET, TIMESTAMP

if TYPE_CHECKING:
    from fluss_lake.table import Table
    from tiering.lake import Lake

__all__ = ["scan_lake", "scan_history", "scan_union", "planned"]


def planned(
    build: Callable[[], pl.LazyFrame],
    schema: pl.Schema,
    *,
    name: str,
    build_columns: Callable[[list[str], pl.Expr | None], pl.LazyFrame] | None = None,
) -> pl.LazyFrame:
    """A LazyFrame of `schema` that calls `build()` on each collect and streams it with the pushed-down work.

    Columns `build()` has beyond `schema` (added to the lake since) are left out; a column it lacks is an error.
    `build_columns(names, predicate)`, if given, builds a frame of only those columns (for a projection it can push
    further), told the query's predicate (which it may use to read less; the predicate is applied after it anyway).
    """
    names = list(schema)

    def read(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        if n_rows == 0:
            return
        used = names
        if with_columns is not None:
            wanted = set(with_columns) | (set(predicate.meta.root_names()) if predicate is not None else set())
            used = [c for c in names if c in wanted]
        lazy = build().select(names) if build_columns is None else build_columns(used, predicate).select(used)
        if predicate is not None:
            lazy = lazy.filter(predicate)
        if with_columns is not None:
            lazy = lazy.select(with_columns)
        if n_rows is not None:
            lazy = lazy.head(n_rows)
        yield from lazy.collect_batches(chunk_size=batch_size)

    return register_io_source(read, schema=schema, explain_name=name, explain_detail="planned on each collect")


def _lake_schema(iceberg_table: Any) -> pl.Schema:
    import pyarrow as pa

    empty = pl.from_arrow(pa.schema(iceberg_table.schema().as_arrow()).empty_table())
    assert isinstance(empty, pl.DataFrame)
    return empty.schema


def scan_lake(lake: Lake, path: str | TablePath) -> pl.LazyFrame:
    """:func:`~tiering.reads.read_lake` of the lake's current snapshot at each collect.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"v": "INT"}, options={"table.datalake.enabled": True})
    >>> _ = conn.get_table("d.t").append([{"v": 1}])
    >>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
    >>> frame = scan_lake(lake, "d.t").select("v")
    >>> _ = conn.get_table("d.t").append([{"v": 2}]); _ = tiering.tier_once(conn, lake)
    >>> frame.collect()["v"].sort().to_list()   # planned when collected: the second round is in
    [1, 2]
    """
    path = TablePath.of(path)
    table = lake.load(path)
    if table is None:
        raise TableNotExistError(f"the lake has no table {path}; tier it first (tier_once)")
    return planned(lambda: read_lake(lake, path), _lake_schema(table), name=f"lake {path}")


def scan_history(lake: Lake, path: str | TablePath) -> pl.LazyFrame:
    """:func:`~tiering.reads.read_history` at each collect."""
    path = TablePath.of(path)
    schema = read_history(lake, path).collect_schema()  # plans the files once (metadata only), reads no rows
    return planned(lambda: read_history(lake, path), pl.Schema(schema), name=f"lake history {path}")


def scan_union(live: Table, lake: Lake, *, system_columns: bool = False, **options: Any) -> pl.LazyFrame:
    """:func:`~tiering.reads.union_read` (the latest lake snapshot + the live tail) at each collect.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"],
    ...                       options={"table.datalake.enabled": True})
    >>> t = conn.get_table("d.t"); _ = t.upsert([{"k": 1, "v": "a"}])
    >>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
    >>> frame = scan_union(t, lake)
    >>> _ = t.upsert([{"k": 1, "v": "new"}])        # after the frame was made, not tiered
    >>> frame.collect().to_dicts()
    [{'k': 1, 'v': 'new'}]
    """
    dtypes = dict(live.schema.polars_schema)
    if options.get("columns") is not None:
        unknown = [c for c in options["columns"] if c not in dtypes]
        if unknown:
            raise InvalidConfigError(f"unknown column(s) {unknown}; {live.path} has {list(dtypes)}")
        dtypes = {c: dtypes[c] for c in options["columns"]}
    if system_columns:
        dtypes.update({BUCKET: pl.Int32(), OFFSET: pl.Int64(), TIMESTAMP: pl.Datetime("us", "UTC")})
    names = list(live.schema.names)
    given = {k: v for k, v in options.items() if k != "columns"}

    def projected(used: list[str], predicate: pl.Expr | None) -> pl.LazyFrame:
        """Only these columns decoded from a log table's tail; what the predicate implies reaches both parts."""
        columns = [c for c in used if c in names] or names[:1]
        filters = necessary_conditions(predicate, columns) or None
        return union_read(live, lake, columns=columns, system_columns=system_columns, filters=filters, **given)

    return planned(
        lambda: union_read(live, lake, system_columns=system_columns, **options),
        pl.Schema(dtypes),
        name=f"union {live.path}",
        build_columns=projected,
    )

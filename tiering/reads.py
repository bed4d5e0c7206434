"""Reading the lake: lake tables and history as Polars LazyFrames, union reads, and DuckDB views.

A current-state table is written merge-on-read (Iceberg position-delete files) and lake tables only ever gain
columns: :func:`read_lake` plans the files and their delete files with pyiceberg and scans the data files with
Polars' native Parquet reader (lazy: projections and filters are pushed down; absent columns of older files read
as null), dropping each file's deleted positions by its own row index.

A union read is the latest lake snapshot plus the live log after its offsets (FLUSS-SEMANTICS §7.5): all rows
for a log table; for a primary-key table the lake's current state with the live changelog tail folded in (the
latest after-image replaces a row, ``-D`` removes it). Because the lake holds what the live log no longer
retains, the view stays complete after ``table.log.ttl`` removed old live data.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING

import polars as pl

from fluss_lake._utils.arguments import check_int
from fluss_lake.exceptions import TableNotExistError
from fluss_lake.log.filters import Condition, Filters, normalize_filters, to_expression
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.training.history import with_partition_name
from tiering.changes import apply_changes, fold_changes
from tiering.lake_scan import snapshot_frame
from tiering.lake_snapshot import LakeSnapshot
from tiering.log_reader import LiveOffsets, live_offsets, log_reader
from tiering.schema import BUCKET, OFFSET, SYSTEM_COLUMNS, TIMESTAMP
from tiering.snapshots import pinned_snapshot

if TYPE_CHECKING:
    from fluss_lake.table import Table
    from tiering.lake import Lake

__all__ = ["read_history", "read_lake", "union_read"]


def read_lake(
    lake: Lake, path: str | TablePath, *, snapshot_id: int | None = None, as_of: datetime | date | str | None = None
) -> pl.LazyFrame:
    """A lake table (a primary-key table's current state, a log table's rows) with its system columns.

    ``snapshot_id=`` reads one snapshot of the table (see :func:`~tiering.lake_snapshots`), ``as_of=`` the latest
    committed at or before a time (naive = UTC): a pinned read gives the same rows after any number of rounds.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"],
    ...                       options={"table.datalake.enabled": True})
    >>> _ = conn.get_table("d.t").upsert([{"k": 1, "v": "a"}, {"k": 2, "v": "b"}])
    >>> _ = conn.get_table("d.t").delete([{"k": 2}])
    >>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
    >>> read_lake(lake, "d.t").select("k", "v", "__offset").collect().to_dicts()
    [{'k': 1, 'v': 'a', '__offset': 0}]
    """
    check_int("snapshot_id", snapshot_id, minimum=None, optional=True, hint="a lake snapshot's id")
    table = lake.load(path)
    if table is None:
        raise TableNotExistError(f"the lake has no table {TablePath.of(path)}; tier it first (tier_once)")
    return snapshot_frame(lake, table, pinned_snapshot(table, snapshot_id=snapshot_id, as_of=as_of))


def read_history(
    lake: Lake, path: str | TablePath, *, snapshot_id: int | None = None, as_of: datetime | date | str | None = None
) -> pl.LazyFrame:
    """The changelog history of a primary-key table: live columns + ``__change_type`` (``+I -U +U -D``),
    ``__bucket``, ``__offset`` and ``__timestamp`` (commit time), one row per changelog record.

    ``snapshot_id=`` (a snapshot of the history table: ``lake_snapshots(lake, path, kind="history")``) or
    ``as_of=`` pin the read, as for :func:`read_lake`; a training set or ``state_as_of`` built on a pinned history
    is reproducible.

    A partitioned table's history also has ``__partition`` (the Fluss partition name, before ``__bucket``):
    with it the frame is a complete history frame for ``fluss_lake.training`` (offsets per partition and bucket).
    The partition columns are ordinary columns.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"],
    ...                       options={"table.datalake.enabled": True})
    >>> _ = conn.get_table("d.t").upsert([{"k": 1, "v": "a"}]); _ = conn.get_table("d.t").upsert([{"k": 1, "v": "b"}])
    >>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
    >>> read_history(lake, "d.t").sort("__offset").select("__change_type", "v").collect().rows()
    [('+I', 'a'), ('-U', 'a'), ('+U', 'b')]
    """
    return lake.history(path, snapshot_id=snapshot_id, as_of=as_of)


def union_read(
    live: Table,
    lake: Lake,
    *,
    columns: Sequence[str] | None = None,
    system_columns: bool = False,
    snapshot_id: int | None = None,
    as_of: datetime | date | str | None = None,
    filters: Filters | None = None,
) -> pl.LazyFrame:
    """The latest lake snapshot + the live log after its offsets: a complete, fresh view of `live`.

    Log tables: every row (the lake's, then the live tail). Primary-key tables: the current state. Columns have
    the live types; `system_columns` adds ``__bucket``, ``__offset`` and ``__timestamp`` (``-1`` / epoch - 1 ms
    for rows rebuilt from the live state).

    Pinned (``snapshot_id=`` or ``as_of=``, as for :func:`read_lake`): the table as it stood at that snapshot's
    tiered offsets, i.e. the snapshot's rows with the live types and no live tail (the tail moves; a pin does not).

    `filters` (``(column, op, value)`` conditions, or a list of such lists, as for ``Table.scan_log``) keeps the
    rows that match. They reach both parts: the lake scan (Parquet statistics) and the live tail, whose log batches
    their statistics rule out are not decoded. A primary-key table's tail is cut by its key conditions only (a
    change to another column must still replace or remove the lake's row); the rest apply after the fold.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"],
    ...                       options={"table.datalake.enabled": True})
    >>> t = conn.get_table("d.t"); _ = t.upsert([{"k": 1, "v": "a"}, {"k": 2, "v": "b"}])
    >>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
    >>> _ = t.upsert([{"k": 1, "v": "new"}]); _ = t.delete([{"k": 2}])    # not tiered yet
    >>> union_read(t, lake).collect().to_dicts()
    [{'k': 1, 'v': 'new'}]
    """
    names = list(columns) if columns is not None else list(live.schema.names)
    dtypes = live.schema.polars_schema
    keep = [*names, *SYSTEM_COLUMNS] if system_columns else names
    groups = normalize_filters(filters, dtypes)
    rows = to_expression(groups)
    if rows is None:
        return _union(live, lake, names, keep, snapshot_id, as_of)
    used = [*names, *(c for c in dict.fromkeys(c[0] for g in groups for c in g) if c not in names)]
    tail = groups if not live.is_primary_key_table else _on_columns(groups, set(live.schema.primary_key))
    frame = _union(
        live,
        lake,
        used,
        [*used, *SYSTEM_COLUMNS] if system_columns else used,
        snapshot_id,
        as_of,
        tail_filters=tail or None,
        lake_filter=rows,
    )
    return frame.filter(rows).select(keep)


def _union(
    live: Table,
    lake: Lake,
    names: list[str],
    keep: list[str],
    snapshot_id: int | None,
    as_of: datetime | date | str | None,
    *,
    tail_filters: list[list[Condition]] | None = None,
    lake_filter: pl.Expr | None = None,
) -> pl.LazyFrame:
    """:func:`union_read` of columns `names` (`keep`: with the system columns if asked); `tail_filters` cut the
    live tail's batches and rows, `lake_filter` the lake's rows (both only ever drop rows the caller drops too)."""
    dtypes = live.schema.polars_schema
    iceberg_table = lake.load(live.path)
    if snapshot_id is not None or as_of is not None:
        if iceberg_table is None:
            raise TableNotExistError(f"the lake has no table {live.path}; a pinned union read needs a tiered table")
        pinned = pinned_snapshot(iceberg_table, snapshot_id=snapshot_id, as_of=as_of)
        frame = _as_live(snapshot_frame(lake, iceberg_table, pinned), live)
        assert frame is not None
        return (frame if lake_filter is None else frame.filter(lake_filter)).select(keep)
    snap = LakeSnapshot.of_table(iceberg_table) if iceberg_table is not None else LakeSnapshot(None)
    if snap.table_id not in (None, live.info.table_id):
        snap = LakeSnapshot(None)  # the lake table belongs to an older incarnation: read live only
        iceberg_table = None
    now = live_offsets(live)
    end, earliest = now.end, now.earliest
    lake_rows = _as_live(
        snapshot_frame(lake, iceberg_table, snap.snapshot_id)
        if iceberg_table is not None and snap.snapshot_id is not None
        else None,
        live,
    )
    if lake_rows is not None and lake_filter is not None:
        lake_rows = lake_rows.filter(lake_filter)  # into the Parquet scan: row groups and rows skipped
    starts = {k: snap.start(k, now.ids.get(k[0])) for k in end}  # type: ignore[arg-type]
    if not live.is_primary_key_table:
        tail = _tail(now, {k: max(starts[k], earliest[k]) for k in end}, columns=names, filters=tail_filters)
        parts = [frame for frame in (lake_rows, _tail_rows(tail).lazy()) if frame is not None]
        return pl.concat([p.select(keep) for p in parts], how="vertical_relaxed")
    pk = list(live.schema.primary_key)
    expired = {k for k in end if starts[k] < earliest[k]}  # the lake is behind what the live log retains
    tail = _tail(now, {k: (end[k] if k in expired else starts[k]) for k in end}, filters=tail_filters)
    upserts, touched = fold_changes(tail, pk)
    current = (
        lake_rows
        if lake_rows is not None
        else pl.LazyFrame(schema={**dtypes, BUCKET: pl.Int32, OFFSET: pl.Int64, TIMESTAMP: pl.Datetime("us", "UTC")})
    )
    if expired:  # those buckets come from the live state, which is complete
        current = _without(current, expired, live)
    merged = apply_changes(current.select(*dtypes, *SYSTEM_COLUMNS), _tail_rows(upserts).lazy(), touched.lazy(), pk)
    if expired:
        merged = pl.concat([merged, _live_state(now, expired)], how="vertical_relaxed")
    return merged.select(keep)


def _on_columns(groups: list[list[Condition]], columns: set[str]) -> list[list[Condition]]:
    """The DNF weakened to conditions on `columns` (each AND-group keeps those; ``[]`` if a group keeps none):
    every row matching `groups` still matches it."""
    kept = [[c for c in g if c[0] in columns] for g in groups]
    return [] if any(not g for g in kept) else kept


def _tail(
    now: LiveOffsets,
    starts: dict[tuple[str | None, int], int],
    columns: Sequence[str] | None = None,
    filters: list[list[Condition]] | None = None,
) -> pl.DataFrame:
    """The live log from `starts` to the ends of every partition and bucket (only `columns` decoded, if given;
    batches `filters` rule out skipped and its rows kept)."""
    frames = [
        log_reader(handle).scan_log(
            start_offsets=now.of(name, starts), end_offsets=now.of(name, now.end), columns=columns, filters=filters
        )
        for name, handle in now.handles.items()
    ]
    if not frames:
        return pl.DataFrame(
            schema={
                "_bucket": pl.Int32,
                "_offset": pl.Int64,
                "_change_type": pl.String,
                "_commit_timestamp": pl.Datetime("ms", "UTC"),
            }
        )
    return pl.concat(frames, how="diagonal_relaxed")


def _without(current: pl.LazyFrame, keys: set[tuple[str | None, int]], live: Table) -> pl.LazyFrame:
    """Lake rows outside some (partition, bucket)s."""
    if not live.is_partitioned:
        return current.filter(~pl.col(BUCKET).is_in(sorted(b for _, b in keys)))
    named = with_partition_name(current, live.partition_keys, live.schema.polars_schema, column="__pname")
    drop = pl.LazyFrame(
        {"__pname": [p for p, _ in keys], BUCKET: [b for _, b in keys]}, schema={"__pname": pl.String, BUCKET: pl.Int32}
    )
    return named.join(drop, on=["__pname", BUCKET], how="anti").drop("__pname")


def _as_live(frame: pl.LazyFrame | None, live: Table) -> pl.LazyFrame | None:
    """Lake rows with the live column types (columns added live but not tiered yet read as null)."""
    if frame is None:
        return None
    have = frame.collect_schema().names()
    cols = [pl.col(c).cast(t) if c in have else pl.lit(None, t).alias(c) for c, t in live.schema.polars_schema.items()]
    return frame.select(*cols, pl.col(BUCKET), pl.col(OFFSET), pl.col(TIMESTAMP))


def _tail_rows(log: pl.DataFrame) -> pl.DataFrame:
    """Live log rows with the lake's system column names and types."""
    return (
        log.drop("_change_type")
        .rename({"_bucket": BUCKET, "_offset": OFFSET, "_commit_timestamp": TIMESTAMP})
        .with_columns(pl.col(TIMESTAMP).cast(pl.Datetime("us", "UTC")))
    )


def _live_state(now: LiveOffsets, keys: set[tuple[str | None, int]]) -> pl.LazyFrame:
    """Current rows of some buckets from the live state (their un-tiered log expired)."""
    frames = []
    for name, b in sorted(keys, key=lambda k: (k[0] or "", k[1])):
        frames.append(
            now.handles[name]
            .bucket_state(b)
            .rows.with_columns(
                pl.lit(b, pl.Int32).alias(BUCKET),
                pl.lit(-1, pl.Int64).alias(OFFSET),
                pl.lit(-1000, pl.Int64).cast(pl.Datetime("us", "UTC")).alias(TIMESTAMP),
            )
        )
    return pl.concat(frames, how="vertical_relaxed").lazy()

"""The history shape: a primary-key table's full changelog as one frame, from the lake and/or the live log.

A *history frame* has the table's columns plus four system columns (the tiering service writes the lake's
companion history table in exactly this shape):

=================  ==========================  ===============================================================
``__change_type``  String                      ``+I`` insert, ``-U`` update-before, ``+U`` update-after,
                                               ``-D`` delete (Fluss's ``ChangeType`` short strings)
``__bucket``       Int32                       the bucket the key lives in
``__offset``       Int64                       the record's dense log offset within its bucket
``__timestamp``    Datetime("us", "UTC")       commit timestamp of the record's write batch
=================  ==========================  ===============================================================

A key always lives in one bucket, and a bucket's commit timestamps never decrease with its offsets (a writer
stamps a batch no earlier than the batch before it), so ordering by ``(__timestamp, __bucket, __offset)``
replays every key's changes in log order. That order is *the* order of this package.

A partitioned table's history frame also has ``__partition`` (String, Fluss's partition name: values joined by
``$``), because its buckets and offsets are per partition. The partition columns are part of the primary key,
so a key still lives in one (partition, bucket) and the order above still replays each key in log order;
offsets are keyed by ``(partition name, bucket)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Final, Literal, Protocol, TypeAlias, runtime_checkable

import polars as pl
from polars.io.plugins import register_io_source

from fluss_lake.exceptions import (
    IncompleteHistoryError,
    InvalidConfigError,
    SchemaMismatchError,
    UnsupportedOperationError,
)
from fluss_lake.metadata.partition import with_partition_names
from fluss_lake.table import Table

__all__ = [
    "BUCKET",
    "CHANGE_TYPE",
    "HISTORY_TIME_DTYPE",
    "OFFSET",
    "PARTITION",
    "SYSTEM_COLUMNS",
    "TIMESTAMP",
    "VALUE_CHANGES",
    "ChangeType",
    "LakeHistories",
    "LakeLike",
    "check_history",
    "history_of",
    "history_source",
    "pinned_history",
    "with_partition_name",
]

CHANGE_TYPE: Final = "__change_type"
BUCKET: Final = "__bucket"
OFFSET: Final = "__offset"
TIMESTAMP: Final = "__timestamp"
SYSTEM_COLUMNS: Final = (CHANGE_TYPE, BUCKET, OFFSET, TIMESTAMP)
HISTORY_TIME_DTYPE: Final = pl.Datetime("us", "UTC")
ORDER: Final = (TIMESTAMP, BUCKET, OFFSET)

ChangeType = Literal["+I", "-U", "+U", "-D"]
#: The change types that carry the key's value from then on (``-U`` is a before-image: never a value).
VALUE_CHANGES: Final = ("+I", "+U", "-D")

_FROM_CHANGELOG = {"insert": "+I", "update_before": "-U", "update_after": "+U", "delete": "-D"}
PARTITION: Final = "__partition"  # partitioned tables only: offsets are keyed by (partition name, bucket)
#: Every system column a history frame may carry (never a feature or a state column).
ALL_SYSTEM_COLUMNS: Final = (*SYSTEM_COLUMNS, PARTITION)


def check_history(schema: Mapping[str, pl.DataType], *, what: str, needed: tuple[str, ...] = ()) -> None:
    """Raise SchemaMismatchError if a history frame lacks a system column or one of `needed`."""
    missing = [c for c in (*SYSTEM_COLUMNS, *needed) if c not in schema]
    if missing:
        raise SchemaMismatchError(
            f"{what}: the history frame lacks column(s) {missing}; a history frame has the table's columns plus "
            f"{list(SYSTEM_COLUMNS)} (build one with fluss_lake.training.history_of(table) or take the lake's "
            f"history table)"
        )
    if not isinstance(schema[TIMESTAMP], pl.Datetime):
        raise SchemaMismatchError(f"{what}: {TIMESTAMP} is {schema[TIMESTAMP]}, expected a Datetime (UTC commit time)")


def time_expr(column: str | pl.Expr, dtype: pl.DataType, *, unit: str, what: str) -> pl.Expr:
    """`column` as a UTC Datetime in `unit`; naive datetimes and dates count as UTC."""
    expr = pl.col(column) if isinstance(column, str) else column
    if dtype == pl.Datetime(unit, "UTC"):  # type: ignore[arg-type]
        return expr  # already UTC in `unit`: no pass over the column
    if isinstance(dtype, pl.Datetime):
        expr = expr.dt.replace_time_zone("UTC") if dtype.time_zone is None else expr.dt.convert_time_zone("UTC")
        return expr.cast(pl.Datetime(unit, "UTC"))  # type: ignore[arg-type]
    if dtype == pl.Date:
        return expr.cast(pl.Datetime(unit)).dt.replace_time_zone("UTC")  # type: ignore[arg-type]
    raise SchemaMismatchError(f"{what} is {dtype}; it must be a Datetime or Date column (naive values count as UTC)")


def time_unit(*dtypes: pl.DataType) -> str:
    """The unit every time is compared in: ``ns`` if any input has nanoseconds (no loss), else ``us``."""
    return "ns" if any(isinstance(d, pl.Datetime) and d.time_unit == "ns" for d in dtypes) else "us"


def as_utc(value: datetime | date | str, *, what: str) -> datetime:
    """A Python time as an aware UTC datetime (naive = UTC; ISO strings accepted)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise SchemaMismatchError(f"{what}={value!r} is not an ISO timestamp") from None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    raise SchemaMismatchError(f"{what}={value!r}: pass a datetime (naive counts as UTC), a date or an ISO string")


def with_partition_name(
    frame: pl.LazyFrame, partition_keys: Sequence[str], dtypes: Mapping[str, pl.DataType], *, column: str = PARTITION
) -> pl.LazyFrame:
    """`frame` with a String column `column` holding each row's Fluss partition name (work per partition).

    Examples
    --------
    >>> frame = pl.LazyFrame({"day": ["20260101", "20260102"], "eu": [True, False], "v": [1, 2]})
    >>> with_partition_name(frame, ["day", "eu"], frame.collect_schema()).collect()["__partition"].to_list()
    ['20260101$true', '20260102$false']
    """
    return with_partition_names(frame, partition_keys, dtypes, column=column)


def _live_changelog(table: Table, start_offsets: Mapping | None) -> pl.DataFrame:
    """The live changelog from `start_offsets` in the history shape (``__partition`` on a partitioned table)."""
    log = table.changelog(with_bucket=True, start_offsets=start_offsets)
    partition = [pl.col("_partition").cast(pl.String).alias(PARTITION)] if table.is_partitioned else []
    return log.select(
        *table.schema.names,
        pl.col("_change_type")
        .cast(pl.String)
        .replace_strict(_FROM_CHANGELOG, return_dtype=pl.String)
        .alias(CHANGE_TYPE),
        *partition,
        pl.col("_bucket").cast(pl.Int32).alias(BUCKET),
        pl.col("_log_offset").cast(pl.Int64).alias(OFFSET),
        pl.col("_commit_timestamp").cast(HISTORY_TIME_DTYPE).alias(TIMESTAMP),
    )


@runtime_checkable
class LakeHistories(Protocol):
    """A lake that reads a primary-key table's tiered history, optionally pinned to one of its snapshots.

    :class:`tiering.Lake` is one (its :meth:`~tiering.Lake.history`): the training functions take it as ``lake=``
    without importing the lake layer, which lets them pin a read to a snapshot id or a time.
    """

    def history(
        self, path: str, *, snapshot_id: int | None = None, as_of: datetime | date | str | None = None
    ) -> pl.LazyFrame:
        """The history frame of table `path` (``database.table``) at a snapshot (default: the current one)."""
        ...


#: What ``lake=`` takes: the lake's history frame of the table, or a lake to read it from.
LakeLike: TypeAlias = pl.LazyFrame | pl.DataFrame | LakeHistories


def pinned_history(
    table: Table, lake: LakeHistories, *, snapshot_id: int | None = None, as_of: datetime | date | str | None = None
) -> pl.LazyFrame:
    """The lake's history of `table` as one snapshot of its history table holds it (by id, or the latest committed
    at or before `as_of`), checked against the table; no live tail, so it reads the same rows whatever comes later."""
    _check_table(table)
    if snapshot_id is not None and as_of is not None:
        raise InvalidConfigError("pin to a snapshot id or to a time, not both (an id already names one point in time)")
    return _lake_frame(table, lake.history(str(table.path), snapshot_id=snapshot_id, as_of=as_of))


def history_of(table: Table, *, lake: LakeLike | None = None) -> pl.LazyFrame:
    """A primary-key table's full history: the lake's history frame (if given) plus the live log after it.

    `lake` is the lake's history frame of the table (``tiering.read_history(lake, path)``) or the lake itself
    (a :class:`LakeHistories`, such as ``tiering.Lake``: its current snapshot is read).

    Each bucket's live tail starts right after the highest ``__offset`` the lake holds for that bucket (at the
    bucket's first offset without a lake). If the live log no longer reaches back that far (``table.log.ttl``
    expired it before it was tiered), the history would silently miss changes, so this raises
    :class:`~fluss_lake.IncompleteHistoryError`.

    A partitioned table's frame has ``__partition`` too, and its buckets are ``(partition name, bucket)``; a
    lake frame without ``__partition`` gets it from its partition columns. Lake records of a partition that was
    dropped live stay in the history (Fluss writes no deletes when a partition is dropped); a partition created
    again under the same name continues after the lake records committed since its creation.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.training import history_of
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"])
    >>> t = conn.get_table("d.t")
    >>> _ = t.upsert([{"k": 1, "v": "a"}]); _ = t.delete([{"k": 1}])
    >>> history_of(t).collect()["__change_type"].to_list()
    ['+I', '-D']
    """
    _check_table(table)
    partitioned = table.is_partitioned
    earliest = table.earliest_offsets()
    if lake is None:
        gaps = {b: e for b, e in earliest.items() if e > 0}
        if gaps:
            raise IncompleteHistoryError(
                f"{table.path}: the live log of bucket(s) {sorted(gaps)} starts at offset(s) {gaps}, not 0 "
                "(table.log.ttl expired older changes); pass the tiered lake history as lake= so the history is "
                "complete"
            )
        return _live_changelog(table, None).lazy()
    lake = _lake_frame(table, lake)
    schema = lake.collect_schema()
    if partitioned:  # lake records of an older incarnation of a partition name do not count for its offsets
        created = pl.LazyFrame(
            {
                PARTITION: [p.name for p in table.list_partitions()],
                "__created": [p.created_ms for p in table.list_partitions()],
            },
            schema={PARTITION: pl.String, "__created": pl.Int64},
        )
        current = lake.join(created, on=PARTITION, how="inner").filter(
            pl.col(TIMESTAMP).cast(HISTORY_TIME_DTYPE).dt.epoch("ms") >= pl.col("__created")
        )
        ends = current.group_by(PARTITION, BUCKET).agg(pl.col(OFFSET).max() + 1).collect()
        lake_end = {(p, b): o for p, b, o in ends.select(PARTITION, BUCKET, OFFSET).iter_rows()}
    else:
        ends = lake.group_by(BUCKET).agg(pl.col(OFFSET).max() + 1).collect()
        lake_end = dict(zip(ends[BUCKET].to_list(), ends[OFFSET].to_list(), strict=True))
    start = {b: int(lake_end.get(b, 0)) for b in earliest}
    gaps = {b: (start[b], earliest[b]) for b in start if earliest[b] > start[b]}
    if gaps:
        raise IncompleteHistoryError(
            f"{table.path}: the lake history ends before the live log starts in bucket(s) {gaps} "
            "((lake next offset, live earliest offset)); the log expired before it was tiered. Tier more often "
            "than table.log.ttl, or raise the TTL"
        )
    live = _live_changelog(table, start).lazy()
    return pl.concat([_lake_part(table, lake, schema), live], how="diagonal_relaxed").select(_columns(table))


def _check_table(table: Table) -> None:
    """A history is that of a whole primary-key table."""
    if not table.is_primary_key_table:
        raise UnsupportedOperationError(
            f"{table.path} is a log table; history (and training sets, state as of a time) need a primary-key table"
        )
    if table.partition_info is not None:
        raise UnsupportedOperationError(
            f"history_of takes the whole table {table.path}, not the handle of partition "
            f"{table.partition_name!r}; filter the frame on __partition instead"
        )


def _columns(table: Table) -> list[str]:
    """The columns of a table's history frame, in order."""
    partition = [PARTITION] if table.is_partitioned else []
    return [*table.schema.names, CHANGE_TYPE, *partition, BUCKET, OFFSET, TIMESTAMP]


def _live_schema(table: Table) -> pl.Schema:
    """The schema of the live part of a table's history frame (what :func:`_live_changelog` gives)."""
    partition = {PARTITION: pl.String()} if table.is_partitioned else {}
    return pl.Schema(
        {
            **table.schema.polars_schema,
            CHANGE_TYPE: pl.String(),
            **partition,
            BUCKET: pl.Int32(),
            OFFSET: pl.Int64(),
            TIMESTAMP: HISTORY_TIME_DTYPE,
        }
    )


def _lake_frame(table: Table, lake: LakeLike) -> pl.LazyFrame:
    """The lake's history frame, checked against the table, with ``__partition`` on a partitioned table (lazy)."""
    lake = lake.history(str(table.path)) if isinstance(lake, LakeHistories) else lake.lazy()
    schema = lake.collect_schema()
    check_history(schema, what=f"lake history of {table.path}")
    partitioned = table.is_partitioned
    if partitioned and PARTITION not in schema:
        missing = [k for k in table.partition_keys if k not in schema]
        if missing:
            raise SchemaMismatchError(
                f"lake history of {table.path} lacks partition column(s) {missing} and "
                f"{PARTITION}; pass the lake's history table (tiering.read_history)"
            )
        lake = with_partition_name(lake, table.partition_keys, schema)
    elif not partitioned and PARTITION in schema:
        raise SchemaMismatchError(
            f"{table.path} is not partitioned but the lake history has {PARTITION}; is it the history of another table?"
        )
    return lake


def _lake_part(table: Table, lake: pl.LazyFrame, schema: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    """The lake frame's history columns with the system columns in their history dtypes (lazy)."""
    return lake.select([c for c in _columns(table) if c in schema]).with_columns(
        pl.col(TIMESTAMP).cast(HISTORY_TIME_DTYPE),
        pl.col(BUCKET).cast(pl.Int32),
        pl.col(OFFSET).cast(pl.Int64),
        pl.col(CHANGE_TYPE).cast(pl.String),
    )


def history_source(table: Table, *, lake: LakeLike | None = None) -> pl.LazyFrame:
    """:func:`history_of`, read only when the frame is collected (the live tail as of then); nothing is read now.

    What :meth:`FeatureView.from_table <fluss_lake.training.FeatureView.from_table>` holds: a view costs nothing
    until a training set reads it, so the same views serve online features (which read only current state).
    Projections reach the lake frame; :class:`~fluss_lake.IncompleteHistoryError` is raised when collected.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"])
    >>> t = conn.get_table("d.t")
    >>> history = history_source(t)   # nothing read yet
    >>> _ = t.upsert([{"k": 1, "v": "a"}])
    >>> history.collect()["v"].to_list()
    ['a']
    """
    _check_table(table)
    live = _live_schema(table)
    if lake is None:
        schema = live
    else:
        lake = _lake_frame(table, lake)
        parts = [_lake_part(table, lake, lake.collect_schema()), pl.LazyFrame(schema=live)]
        schema = pl.concat(parts, how="diagonal_relaxed").select(_columns(table)).collect_schema()
    lake_frame = lake

    def read(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, _batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        frame = history_of(table, lake=lake_frame)
        if predicate is not None:
            frame = frame.filter(predicate)
        if with_columns is not None:
            frame = frame.select(with_columns)
        if n_rows is not None:
            frame = frame.head(n_rows)
        yield frame.collect()

    return register_io_source(read, schema=schema, explain_name=f"history of {table.path}")

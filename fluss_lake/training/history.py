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
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Final, Literal

import polars as pl

from fluss_lake.exceptions import (
    IncompleteHistoryError,
    SchemaMismatchError,
    UnsupportedOperationError,
)

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = [
    "BUCKET",
    "CHANGE_TYPE",
    "HISTORY_TIME_DTYPE",
    "OFFSET",
    "SYSTEM_COLUMNS",
    "TIMESTAMP",
    "VALUE_CHANGES",
    "ChangeType",
    "check_history",
    "history_of",
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
_PARTITION = "__partition"  # reserved for partitioned tables: bucket offsets are keyed by (partition, bucket)


def check_history(schema: Mapping[str, pl.DataType], *, what: str, needed: tuple[str, ...] = ()) -> None:
    """Raise SchemaMismatchError if a history frame lacks a system column or one of `needed`."""
    missing = [c for c in (*SYSTEM_COLUMNS, *needed) if c not in schema]
    if missing:
        raise SchemaMismatchError(
            f"{what}: the history frame lacks column(s) {missing}; a history frame has the table's columns plus "
            f"{list(SYSTEM_COLUMNS)} (build one with fluss_lake.training.history_of(table) or take the lake's "
            f"history table)")
    if not isinstance(schema[TIMESTAMP], pl.Datetime):
        raise SchemaMismatchError(f"{what}: {TIMESTAMP} is {schema[TIMESTAMP]}, expected a Datetime (UTC commit time)")


def time_expr(column: str | pl.Expr, dtype: pl.DataType, *, unit: str, what: str) -> pl.Expr:
    """`column` as a UTC Datetime in `unit`; naive datetimes and dates count as UTC."""
    expr = pl.col(column) if isinstance(column, str) else column
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


def _live_changelog(table: Table, start_offsets: Mapping[int, int] | None) -> pl.DataFrame:
    """The live changelog from `start_offsets` in the history shape."""
    log = table.changelog(with_bucket=True, start_offsets=start_offsets)
    return log.select(
        *table.schema.names,
        pl.col("_change_type").cast(pl.String).replace_strict(_FROM_CHANGELOG, return_dtype=pl.String).alias(CHANGE_TYPE),
        pl.col("_bucket").cast(pl.Int32).alias(BUCKET),
        pl.col("_log_offset").cast(pl.Int64).alias(OFFSET),
        pl.col("_commit_timestamp").cast(HISTORY_TIME_DTYPE).alias(TIMESTAMP),
    )


def history_of(table: Table, *, lake: pl.LazyFrame | pl.DataFrame | None = None) -> pl.LazyFrame:
    """A primary-key table's full history: the lake's history frame (if given) plus the live log after it.

    Each bucket's live tail starts right after the highest ``__offset`` the lake holds for that bucket (at the
    bucket's first offset without a lake). If the live log no longer reaches back that far (``table.log.ttl``
    expired it before it was tiered), the history would silently miss changes, so this raises
    :class:`~fluss_lake.IncompleteHistoryError`.

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
    if not table.is_primary_key_table:
        raise UnsupportedOperationError(f"{table.path} is a log table; history (and training sets, state as of a "
                                        "time) need a primary-key table")
    earliest = table.earliest_offsets()
    if lake is None:
        gaps = {b: e for b, e in earliest.items() if e > 0}
        if gaps:
            raise IncompleteHistoryError(
                f"{table.path}: the live log of bucket(s) {sorted(gaps)} starts at offset(s) {gaps}, not 0 "
                "(table.log.ttl expired older changes); pass the tiered lake history as lake= so the history is "
                "complete")
        return _live_changelog(table, None).lazy()
    lake = lake.lazy()
    schema = lake.collect_schema()
    check_history(schema, what=f"lake history of {table.path}")
    if _PARTITION in schema:
        raise UnsupportedOperationError(f"{table.path}: partitioned lake history is not supported yet")
    ends = lake.group_by(BUCKET).agg(pl.col(OFFSET).max() + 1).collect()
    lake_end = dict(zip(ends[BUCKET].to_list(), ends[OFFSET].to_list(), strict=True))
    start = {b: int(lake_end.get(b, 0)) for b in range(table.bucket_num)}
    gaps = {b: (start[b], earliest[b]) for b in start if earliest[b] > start[b]}
    if gaps:
        raise IncompleteHistoryError(
            f"{table.path}: the lake history ends before the live log starts in bucket(s) {gaps} "
            "((lake next offset, live earliest offset)); the log expired before it was tiered. Tier more often "
            "than table.log.ttl, or raise the TTL")
    live = _live_changelog(table, start).lazy()
    columns = [*table.schema.names, *SYSTEM_COLUMNS]
    lake_part = lake.select([c for c in columns if c in schema]).with_columns(
        pl.col(TIMESTAMP).cast(HISTORY_TIME_DTYPE), pl.col(BUCKET).cast(pl.Int32), pl.col(OFFSET).cast(pl.Int64),
        pl.col(CHANGE_TYPE).cast(pl.String))
    return pl.concat([lake_part, live], how="diagonal_relaxed").select(columns)

"""The ``$changelog`` and ``$binlog`` virtual tables, spelled as Fluss spells them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from fluss_lake.changelog.log_scanner import per_partition
from fluss_lake.exceptions import CorruptedDataError, UnsupportedOperationError
from fluss_lake.log.log_reads import read_buckets
from fluss_lake.log.log_source import LogSource
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.table_runtime import TableRuntime

__all__ = ["changelog", "binlog", "changelog_view", "binlog_view"]


def changelog(runtime: TableRuntime, partition: PartitionInfo | None, **options: Any) -> pl.DataFrame:
    """The ``$changelog`` view of a handle (every partition, with ``_partition`` first, on a whole table)."""
    if partition is None and runtime.is_partitioned:
        return per_partition(runtime, changelog_view, **options)
    return changelog_view(runtime.tablets(partition), **options)


def binlog(runtime: TableRuntime, partition: PartitionInfo | None, **options: Any) -> pl.DataFrame:
    """The ``$binlog`` view of a handle of a primary-key table (per partition as :func:`changelog`)."""
    if not runtime.info.is_primary_key_table:
        raise UnsupportedOperationError(
            f"$binlog needs a primary-key table; {runtime.info.path} is a log table (use changelog())"
        )
    if partition is None and runtime.is_partitioned:
        return per_partition(runtime, binlog_view, **options)
    return binlog_view(runtime.tablets(partition), **options)


CHANGELOG_NAMES = {"+A": "insert", "+I": "insert", "-U": "update_before", "+U": "update_after", "-D": "delete"}


def changelog_view(
    source: LogSource,
    *,
    start_offsets: Mapping[int, int] | None = None,
    end_offsets: Mapping[int, int] | None = None,
    start_timestamp: int | None = None,
    with_bucket: bool = False,
) -> pl.DataFrame:
    """``_change_type`` (insert/update_before/update_after/delete), ``_log_offset``, ``_commit_timestamp``, columns.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"])
    >>> t = conn.get_table("d.t")
    >>> _ = t.upsert([{"k": 1, "v": "a"}]); _ = t.upsert([{"k": 1, "v": "b"}])
    >>> t.changelog()["_change_type"].to_list()
    ['insert', 'update_before', 'update_after']
    """
    raw = read_buckets(source, start_offsets=start_offsets, end_offsets=end_offsets, start_timestamp=start_timestamp)
    view = raw.select(
        pl.col("_change_type").cast(pl.String).replace_strict(CHANGELOG_NAMES).alias("_change_type"),
        pl.col("_offset").alias("_log_offset"),
        pl.col("_commit_timestamp"),
        *source.schema.names,
        *([pl.col("_bucket")] if with_bucket else []),
    )
    return view


def binlog_view(
    source: LogSource,
    *,
    start_offsets: Mapping[int, int] | None = None,
    end_offsets: Mapping[int, int] | None = None,
    start_timestamp: int | None = None,
    with_bucket: bool = False,
) -> pl.DataFrame:
    """``_change_type`` (insert/update/delete), ``_log_offset``, ``_commit_timestamp``, ``before``, ``after``.

    A ``-U`` and the ``+U`` after it become one ``update`` row carrying the ``-U``'s offset and timestamp
    (Fluss's ``BinlogRowConverter``); a ``+U`` without its ``-U`` (a WAL changelog image) is an error.
    """
    raw = read_buckets(source, start_offsets=start_offsets, end_offsets=end_offsets, start_timestamp=start_timestamp)
    names = list(source.schema.names)
    row = pl.struct(names)
    frame = raw.with_columns(pl.col("_change_type").cast(pl.String).alias("ct"), row.alias("__row"))
    frame = frame.with_columns(
        pl.col("ct").shift(-1).over("_bucket").alias("next_ct"),
        pl.col("__row").shift(-1).over("_bucket").alias("next_row"),
        pl.col("ct").shift(1).over("_bucket").alias("prev_ct"),
    )
    orphan = frame.filter((pl.col("ct") == "+U") & (pl.col("prev_ct") != "-U").fill_null(True))
    broken = frame.filter((pl.col("ct") == "-U") & (pl.col("next_ct") != "+U").fill_null(True))
    if orphan.height or broken.height:
        raise CorruptedDataError(
            "$binlog needs -U/+U pairs; this table's changelog has unpaired update "
            "records (table.changelog.image='WAL' drops -U), read changelog() instead"
        )
    null_row = pl.lit(None, dtype=frame.schema["__row"])
    out = frame.filter(pl.col("ct") != "+U").select(
        pl.when(pl.col("ct") == "-D")
        .then(pl.lit("delete"))
        .when(pl.col("ct") == "-U")
        .then(pl.lit("update"))
        .otherwise(pl.lit("insert"))
        .alias("_change_type"),
        pl.col("_offset").alias("_log_offset"),
        pl.col("_commit_timestamp"),
        pl.when(pl.col("ct").is_in(["-U", "-D"])).then(pl.col("__row")).otherwise(null_row).alias("before"),
        pl.when(pl.col("ct") == "-U")
        .then(pl.col("next_row"))
        .when(pl.col("ct") == "-D")
        .then(null_row)
        .otherwise(pl.col("__row"))
        .alias("after"),
        *([pl.col("_bucket")] if with_bucket else []),
    )
    return out

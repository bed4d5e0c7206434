"""The ``$changelog`` and ``$binlog`` virtual tables, spelled as Fluss spells them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import polars as pl

from fluss_lake.exceptions import CorruptDataError, UnsupportedOperationError

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["changelog_view", "binlog_view"]

_CHANGELOG_NAMES = {"+A": "insert", "+I": "insert", "-U": "update_before", "+U": "update_after", "-D": "delete"}


def changelog_view(table: "Table", *, start_offsets: Mapping[int, int] | None = None,
                   end_offsets: Mapping[int, int] | None = None, start_timestamp: int | None = None,
                   with_bucket: bool = False) -> pl.DataFrame:
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
    raw = table.scan_log(start_offsets=start_offsets, end_offsets=end_offsets, start_timestamp=start_timestamp)
    view = raw.select(
        pl.col("_change_type").cast(pl.String).replace_strict(_CHANGELOG_NAMES).alias("_change_type"),
        pl.col("_offset").alias("_log_offset"),
        pl.col("_commit_timestamp"),
        *table.schema.names,
        *([pl.col("_bucket")] if with_bucket else []),
    )
    return view


def binlog_view(table: "Table", *, start_offsets: Mapping[int, int] | None = None,
                end_offsets: Mapping[int, int] | None = None, start_timestamp: int | None = None,
                with_bucket: bool = False) -> pl.DataFrame:
    """``_change_type`` (insert/update/delete), ``_log_offset``, ``_commit_timestamp``, ``before``, ``after``.

    A ``-U`` and the ``+U`` after it become one ``update`` row carrying the ``-U``'s offset and timestamp
    (Fluss's ``BinlogRowConverter``); a ``+U`` without its ``-U`` (a WAL changelog image) is an error.
    """
    if not table.is_primary_key_table:
        raise UnsupportedOperationError(f"$binlog needs a primary-key table; {table.path} is a log table "
                                        "(use changelog())")
    raw = table.scan_log(start_offsets=start_offsets, end_offsets=end_offsets, start_timestamp=start_timestamp)
    names = list(table.schema.names)
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
        raise CorruptDataError(f"{table.path}: $binlog needs -U/+U pairs; this table's changelog has unpaired update "
                               "records (table.changelog.image='WAL' drops -U), read changelog() instead")
    null_row = pl.lit(None, dtype=frame.schema["__row"])
    out = frame.filter(pl.col("ct") != "+U").select(
        pl.when(pl.col("ct") == "-D").then(pl.lit("delete")).when(pl.col("ct") == "-U").then(pl.lit("update"))
        .otherwise(pl.lit("insert")).alias("_change_type"),
        pl.col("_offset").alias("_log_offset"),
        pl.col("_commit_timestamp"),
        pl.when(pl.col("ct").is_in(["-U", "-D"])).then(pl.col("__row")).otherwise(null_row).alias("before"),
        pl.when(pl.col("ct") == "-U").then(pl.col("next_row")).when(pl.col("ct") == "-D").then(null_row)
        .otherwise(pl.col("__row")).alias("after"),
        *([pl.col("_bucket")] if with_bucket else []),
    )
    return out

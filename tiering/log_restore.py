"""Restore damaged or missing live log objects from the lake, where their records were tiered.

The live log is the truth for a table's state, and the lake holds a copy of every record tiering took: a log
table's lake table has each record, a primary-key table's history table each changelog record, both with their
bucket, offset and commit time. When a log object is damaged (its checksum fails) or gone from the middle of a
bucket, the records of its offsets are rebuilt from that copy, as batches with the same offsets and commit times,
and put in its place. Offsets the lake does not cover (not tiered yet) cannot be restored: they stay reported.

Examples
--------
>>> import os, glob, tempfile, fluss_lake as fl, tiering
>>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
>>> _ = conn.create_table("d.t", schema={"id": "BIGINT"}, options={"table.datalake.enabled": True})
>>> for i in range(3):
...     _ = conn.get_table("d.t").append([{"id": i}])
>>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
>>> os.unlink(sorted(glob.glob(f"{conn.url}/d/t/*/log/b00000/*.arrow"))[1])  # the batch of offset 1
>>> conn.get_table("d.t").verify().ok
False
>>> restore_log_from_lake(conn.get_table("d.t"), lake)
['d/t/...']
>>> sorted(fl.connect(conn.url).get_table("d.t").scan_log()["id"].to_list())
[0, 1, 2]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl

from fluss_lake.catalog import data_prefix
from fluss_lake.io import layout
from fluss_lake.log.log_batch import CHANGE_TYPE_COLUMN, encode_batch
from fluss_lake.log.log_tablet import LogTablet
from fluss_lake.table import Table
from fluss_lake.training.history import with_partition_name
from tiering.lake import Lake
from tiering.lake_scan import partition_columns, snapshot_frame
from tiering.lake_snapshot import LakeSnapshot
from tiering.schema import BUCKET, CHANGE_TYPE, OFFSET, TIMESTAMP, LakeKind

__all__ = ["restore_log_from_lake"]

_CODES = {"+A": 0, "+I": 1, "-U": 2, "+U": 3, "-D": 4}
_WRITER = "lake-restore"


def restore_log_from_lake(live: Table, lake: Lake) -> list[str]:
    """Rebuild every damaged or missing log object of `live` (all partitions) that the lake covers; returns the keys
    of the objects restored (checked afterwards: a restored bucket verifies clean)."""
    kind: LakeKind = "history" if live.is_primary_key_table else "log"
    iceberg = lake.load(live.path, kind)
    if iceberg is None:
        return []
    snapshot = LakeSnapshot.of_table(iceberg)
    restored: list[str] = []
    tables = live.partition_tables() if live.is_partitioned else [live]
    rows: pl.DataFrame | None = None
    for table in tables:
        info, partition = table.info, table.partition_info
        name = partition.name if partition is not None else None
        prefix = data_prefix(info, partition)
        for bucket in range(info.bucket_num):
            log = LogTablet(
                live.connection.store, layout.log_prefix(prefix, bucket), bucket, checksums_required=info.checksums
            )
            check = log.verify()
            tiered = snapshot.offset(bucket, name)
            live_end = max((end for _, end, _ in check.spans), default=0)
            if not check.damage and tiered <= live_end:
                continue
            for start, end in _missing(check.spans, tiered):
                if end > tiered:
                    continue  # not all in the lake: the damage stands
                if rows is None:
                    rows = _lake_rows(lake, iceberg)
                part = rows.filter(
                    (pl.col(BUCKET) == bucket)
                    & pl.col(OFFSET).is_between(start, end - 1)
                    & (pl.col("__partition") == name if name is not None else pl.lit(True))
                ).sort(OFFSET)
                for base, batch, commit_ts in _batches(part, start, end):
                    data = encode_batch(
                        rows=_live_rows(batch, table, kind),
                        base_offset=base,
                        commit_ts=commit_ts,
                        schema_id=info.schema.schema_id,
                        writer_id=_WRITER,
                        compression=info.log_compression[0],
                        compression_level=info.log_compression[1],
                    )
                    restored.append(log.restore_batch(base, data))
    return restored


def _missing(spans: tuple[tuple[int, int, str], ...], tiered: int) -> Iterator[tuple[int, int]]:
    """Offset ranges ``[start, end)`` to rebuild: unreadable batches (up to the next batch) and gaps."""
    for position, (base, end, _) in enumerate(spans):
        following = spans[position + 1][0] if position + 1 < len(spans) else None
        if end < 0:  # unreadable: it covered up to the next batch (or, as the newest, what the lake took)
            yield base, following if following is not None else max(tiered, base + 1)
        elif following is not None and following > end:
            yield end, following
        elif following is None and tiered > end:  # the newest batches are gone but the lake has them
            yield end, tiered
    if not spans and tiered > 0:
        yield 0, tiered


def _lake_rows(lake: Lake, iceberg: Any) -> pl.DataFrame:
    """Every row of the lake table with its partition name (``__partition``, null when unpartitioned)."""
    frame = snapshot_frame(lake, iceberg)
    keys = partition_columns(iceberg)
    if keys:
        frame = with_partition_name(frame, keys, frame.collect_schema())
    else:
        frame = frame.with_columns(pl.lit(None, pl.String).alias("__partition"))
    return frame.collect()


def _batches(rows: pl.DataFrame, start: int, end: int) -> Iterator[tuple[int, pl.DataFrame, int]]:
    """Batches ``(base offset, rows, commit time ms)`` covering ``[start, end)``: one per run of consecutive records
    committed at the same time; an offset without a record (an empty batch: a write that changed nothing) is a
    batch of its own."""
    runs = (
        rows.select(
            pl.col(OFFSET),
            pl.col(TIMESTAMP).dt.epoch("ms").alias("__ms"),
            pl.struct(pl.col(TIMESTAMP), pl.col(OFFSET) - pl.int_range(pl.len())).rle_id().alias("__run"),
        )
        .group_by("__run", maintain_order=True)
        .agg(pl.col(OFFSET).first().alias("base"), pl.len().alias("n"), pl.col("__ms").first().alias("ms"))
        .rows()
    )
    offset, position, last_ms = start, 0, runs[0][3] if runs else 0
    for _, base, count, ms in runs:
        while offset < base:  # offsets without records: empty batches
            yield offset, rows.clear(), last_ms
            offset += 1
        yield base, rows.slice(position, count), ms
        offset, position, last_ms = base + count, position + count, ms
    while offset < end:
        yield offset, rows.clear(), last_ms
        offset += 1


def _live_rows(batch: pl.DataFrame, table: Table, kind: str) -> pl.DataFrame:
    """Lake rows in the live log's layout: change type codes (primary-key tables), then the live columns, cast."""
    schema = table.schema.polars_schema
    columns = [pl.col(name).cast(dtype) for name, dtype in schema.items()]
    if kind == "history":
        code = pl.col(CHANGE_TYPE).replace_strict(_CODES, return_dtype=pl.Int8).alias(CHANGE_TYPE_COLUMN)
        return batch.select(code, *columns)
    return batch.select(*columns)

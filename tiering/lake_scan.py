"""Scanning lake tables' snapshots into Polars LazyFrames (what :mod:`tiering.reads` and :class:`~tiering.Lake` read).

`lake` is a :class:`~tiering.Lake` (its storage options and state index); typed loosely so that the lake itself
can use these scans without an import loop.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from fluss_lake.training.history import PARTITION as PARTITION_NAME
from fluss_lake.training.history import with_partition_name
from tiering.schema import BUCKET, CHANGE_TYPE, vector_dtypes
from tiering.state_index import state_index

__all__ = ["history_frame", "partition_columns", "snapshot_frame"]

_POS = "__fluss_lake_pos"


def snapshot_frame(lake: Any, iceberg_table: Any, snapshot_id: int | None = None) -> pl.LazyFrame:
    """A lazy scan of one snapshot of a lake table (default: the current one), position deletes applied."""
    import pyarrow as pa

    pinned = iceberg_table.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    schemas = {s.schema_id: s for s in iceberg_table.metadata.schemas}
    ice_schema = schemas.get(pinned.schema_id) if pinned is not None and pinned.schema_id is not None else None
    lake_schema = pa.schema((ice_schema or iceberg_table.schema()).as_arrow())
    empty = pl.from_arrow(lake_schema.empty_table())
    assert isinstance(empty, pl.DataFrame)
    schema = empty.schema
    vectors = vector_dtypes(lake_schema, schema)  # Iceberg lists that were fixed-length (vectors) live
    if vectors:
        return _scan_files(lake, iceberg_table, snapshot_id, schema).with_columns(
            [pl.col(name).cast(dtype) for name, dtype in vectors.items()]
        )
    return _scan_files(lake, iceberg_table, snapshot_id, schema)


def _scan_files(lake: Any, iceberg_table: Any, snapshot_id: int | None, schema: pl.Schema) -> pl.LazyFrame:
    """:func:`snapshot_frame` with the Polars schema of the lake table's files."""
    if snapshot_id is None and iceberg_table.current_snapshot() is None:
        return pl.LazyFrame(schema=schema)
    tasks = list(iceberg_table.scan(snapshot_id=snapshot_id).plan_files())
    if not tasks:
        return pl.LazyFrame(schema=schema)
    options: dict[str, Any] = {
        "schema": schema,
        "missing_columns": "insert",
        "hive_partitioning": False,
        "glob": False,
        "storage_options": lake.storage_options() or None,
    }
    plain = [t.file.file_path for t in tasks if not t.delete_files]
    frames = [pl.scan_parquet(plain, **options)] if plain else []
    with_deletes = [t for t in tasks if t.delete_files]
    if with_deletes:  # merge-on-read: drop the deleted positions of each file (its own row index)
        delete_files = list({d.file_path: d for t in with_deletes for d in t.delete_files}.values())
        deleted = state_index(lake).deleted(iceberg_table.io, delete_files)
        by_path = {path: rows["pos"] for (path,), rows in deleted.partition_by("file_path", as_dict=True).items()}
        for task in with_deletes:
            positions = by_path.get(task.file.file_path)
            frame = pl.scan_parquet(task.file.file_path, row_index_name=_POS, **options)
            if positions is not None:
                frame = frame.filter(~pl.col(_POS).is_in(positions.implode()))
            frames.append(frame.drop(_POS))
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


def history_frame(lake: Any, table: Any, snapshot_id: int | None = None) -> pl.LazyFrame:
    """The history frame of a loaded lake history table (``__partition`` added for a partitioned one)."""
    frame = snapshot_frame(lake, table, snapshot_id)
    keys = partition_columns(table)
    if not keys:
        return frame
    named = with_partition_name(frame, keys, frame.collect_schema())
    order = [c for c in frame.collect_schema().names() if c != BUCKET]
    at = order.index(CHANGE_TYPE) + 1
    return named.select(*order[:at], PARTITION_NAME, BUCKET, *order[at:])


def partition_columns(iceberg_table: Any) -> list[str]:
    """The live partition columns of a lake table (its identity partition fields before ``__bucket``)."""
    schema = iceberg_table.schema()
    names = [schema.find_field(f.source_id).name for f in iceberg_table.spec().fields]
    return [n for n in names if n != BUCKET]

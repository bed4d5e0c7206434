"""The writes of a tiering plan: the live rows it reads, and what goes into each lake table inside its commit.

A :class:`LakeWrite` is built before the commit from the rows the plan selected, and applied inside the commit's
transaction with the snapshot summary entries (the new offsets): :func:`append_write` for log and history
tables, :class:`MergeWrite` for a primary-key table's current state (merge-on-read: position deletes for the
old rows of changed or deleted keys, new data files for the after-images, and the files of buckets rebuilt from
the live state replaced wholesale).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl
import pyarrow as pa

from tiering.changes import fold_changes
from tiering.lake_snapshot import BucketKey as Key
from tiering.log_reader import LiveOffsets
from tiering.schema import BUCKET, OFFSET, PARTITION, TIMESTAMP, conform, file_key, lake_arrow_schema, to_lake_rows
from tiering.state_index import state_index

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

    from fluss_lake.metadata.schema import Schema
    from tiering.lake import Lake

__all__ = ["LakeWrite", "MergeWrite", "append_write", "bootstrap_rows", "rows_since"]


class LakeWrite(Protocol):
    """Adds a plan's rows to a lake table inside a transaction, with `props` in the new snapshot's summary."""

    def __call__(self, tx: Any, props: dict[str, str]) -> None: ...


def append_write(rows: pl.DataFrame, target: pa.Schema) -> LakeWrite:
    """Append live log rows (log and history tables)."""

    def write(tx: Any, props: dict[str, str]) -> None:
        tx.append(to_lake_rows(rows, target), snapshot_properties=props)

    return write


def rows_since(log: pl.DataFrame, starts: Mapping[Key, int]) -> pl.DataFrame:
    """Rows at or after each (partition, bucket)'s start offset."""
    if not log.height:
        return log
    keys = pl.DataFrame(
        {PARTITION: [k[0] for k in starts], "_bucket": [k[1] for k in starts], "__start": list(starts.values())},
        schema={PARTITION: pl.String, "_bucket": log.schema["_bucket"], "__start": pl.Int64},
    )
    return (
        log.join(keys, on=[PARTITION, "_bucket"], how="left", nulls_equal=True, maintain_order="left")
        .filter(pl.col("_offset") >= pl.col("__start").fill_null(0))
        .drop("__start")
    )


def bootstrap_rows(now: LiveOffsets, keys: frozenset[Key]) -> tuple[pl.DataFrame | None, dict[Key, int]]:
    """Current rows of buckets whose log expired before tiering, from the live state, with the state's offset."""
    if not keys:
        return None, {}
    frames, offsets = [], {}
    for name, b in sorted(keys, key=lambda k: (k[0] or "", k[1])):
        state = now.handles[name].bucket_state(b)
        offsets[(name, b)] = state.offset
        frames.append(
            state.rows.with_columns(
                pl.lit(b, pl.Int32).alias(BUCKET),
                pl.lit(-1, pl.Int64).alias(OFFSET),
                pl.lit(-1, pl.Int64).cast(pl.Datetime("ms", "UTC")).alias(TIMESTAMP),
            )
        )
    return pl.concat(frames, how="vertical_relaxed"), offsets


class MergeWrite:
    """The folded changes of a round applied merge-on-read to a current-state table, in ONE snapshot.

    Built before the commit: the changes are folded per key, and the lake rows they replace are found from the key
    columns only (:mod:`tiering.state_index`); buckets rebuilt from the live state (`base`, the `rebuilt` keys)
    replace their files wholesale. Applying it writes the new data files and the position-delete files.
    """

    def __init__(
        self,
        lake: Lake,
        main: IcebergTable,
        schema: Schema,
        partition_keys: tuple[str, ...],
        log: pl.DataFrame,
        base: pl.DataFrame | None,
        rebuilt: frozenset[Key],
    ) -> None:
        pk = list(schema.primary_key)
        target = lake_arrow_schema(schema, "primary-key")
        upserts, touched = fold_changes(log, pk) if log.height else (log, log.select(pk))
        upserts = to_lake_rows(upserts, target) if upserts.height else target.empty_table()
        touched = _as_lake_types(touched, target, pk)
        touched_keys: set[Key] = set(log.select(PARTITION, "_bucket").unique().iter_rows()) if log.height else set()
        tasks = _partition_tasks(main, schema, partition_keys, touched_keys | rebuilt)
        dropped = [t for t, key in tasks if key in rebuilt]  # replaced wholesale by the live state
        candidates = [t for t, key in tasks if key not in rebuilt]
        hits = state_index(lake).live_positions(main, candidates, touched, pk)
        parts = [conform(base, target)] if base is not None and base.height else []
        parts = [t for t in (*parts, upserts) if t.num_rows]
        files = {t.file.file_path: t.file for t in candidates}
        per_partition: dict[Any, list[pa.Table]] = {}
        for (path,), positions in hits.partition_by("file_path", as_dict=True).items() if hits.height else ():
            per_partition.setdefault(files[path].partition, []).append(positions.to_arrow())
        self.main = main
        self.rows = pa.concat_tables(parts).cast(target) if parts else target.empty_table()
        self.removed = {f.file_path: f for t in dropped for f in (t.file, *t.delete_files)}
        self.deletes = [
            (partition, _folder(frames[0]["file_path"][0].as_py()), pa.concat_tables(frames))
            for partition, frames in per_partition.items()
        ]
        self.files_rewritten = len(dropped)
        self.position_deletes = hits.height
        self.delete_files = 0  # position-delete files written (known once applied)

    def __call__(self, tx: Any, props: dict[str, str]) -> None:
        from pyiceberg.io.pyarrow import _dataframe_to_data_files

        from tiering import deletes

        main = self.main
        with deletes.RowDelta(tx, main.io, snapshot_properties=props) as delta:
            for data_file in self.removed.values():
                delta.delete_data_file(data_file)
            if self.rows.num_rows:
                for data_file in _dataframe_to_data_files(
                    table_metadata=tx.table_metadata, df=self.rows, io=main.io, write_uuid=delta.commit_uuid
                ):
                    delta.append_data_file(data_file)
            written = deletes.write_position_deletes(main.io, tx.table_metadata.default_spec_id, self.deletes)
            self.delete_files = len(written)
            for delete_file in written:
                delta.add_delete_file(delete_file)

    def stats(self) -> dict[str, int]:
        """Report fields: data files replaced, old rows deleted by position, delete files written."""
        return {
            "files_rewritten": self.files_rewritten,
            "position_deletes": self.position_deletes,
            "delete_files": self.delete_files,
        }


def _folder(path: str) -> str:
    """The folder of a data file (its partition's folder): delete files go beside the data they delete from."""
    return path.rsplit("/", 1)[0]


def _as_lake_types(keys: pl.DataFrame, target: pa.Schema, pk: list[str]) -> pl.DataFrame:
    """Key columns cast to the lake's types (TINYINT keys are int in Iceberg), so joins with lake rows line up."""
    frame = pl.from_arrow(keys.to_arrow().cast(pa.schema([target.field(k).with_nullable(True) for k in pk])))
    assert isinstance(frame, pl.DataFrame)
    return frame


def _partition_tasks(
    main: IcebergTable, schema: Schema, partition_keys: tuple[str, ...], keys: set[Key]
) -> list[tuple[Any, Key]]:
    """Scan tasks (data file + its delete files) of the given (partition, bucket)s, from the manifests alone."""
    from pyiceberg.expressions import In

    if main.current_snapshot() is None or not keys:
        return []
    # pyiceberg's In takes (term, literals) in __new__; mypy checks the call against its pydantic fields instead
    scan = main.scan(row_filter=In(BUCKET, sorted({b for _, b in keys})))  # type: ignore[call-arg, arg-type]
    found = []
    for task in scan.plan_files():  # manifests give each file's partition: keep the touched partitions' files
        key = file_key(main, task.file, schema, partition_keys)
        if key in keys:
            found.append((task, key))
    return found

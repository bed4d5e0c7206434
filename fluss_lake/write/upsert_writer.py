"""Upserts and deletes for primary-key tables: validated on call, merged and committed per bucket on flush."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import (
    DeletionDisabledError,
    InvalidPartialUpdateError,
    SchemaMismatchError,
    UnsupportedOperationError,
)
from fluss_lake.kv.kv_tablet import ChangeImage
from fluss_lake.kv.merge import MergeMode, create_row_merger
from fluss_lake.log.log_batch import BatchHeader
from fluss_lake.metadata.conform import conform, to_frame
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet
from fluss_lake.write.batching_writer import BatchingWriter

__all__ = ["UpsertWriter"]

_OP = "__is_delete"


class UpsertWriter(BatchingWriter):
    """Writes upserts and deletes of one kind (full rows, or a fixed set of target columns).

    All calls between two flushes form one write batch per bucket, merged in call order; once
    `buffer_rows` rows are waiting they are sent as a batch without waiting for ``flush``.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("crm")
    >>> _ = conn.create_table("crm.c360", schema={"id": "INT", "email": "STRING", "visits": "INT"},
    ...                       primary_key=["id"])
    >>> t = conn.get_table("crm.c360")
    >>> _ = t.upsert([{"id": 1, "email": "a@x"}], target_columns=["id", "email"])
    >>> _ = t.upsert([{"id": 1, "visits": 3}], target_columns=["id", "visits"])
    >>> t.to_polars().to_dicts()
    [{'id': 1, 'email': 'a@x', 'visits': 3}]

    On a table with an auto-increment column (``auto-increment.fields``) rows leave that column out (or null):
    a new key gets the next value, an existing key keeps its value.

    >>> _ = conn.create_table("crm.ids", schema={"email": "STRING", "uid": "BIGINT"}, primary_key=["email"],
    ...                       options={"auto-increment.fields": "uid"})
    >>> ids = conn.get_table("crm.ids")
    >>> _ = ids.upsert([{"email": "a@x"}, {"email": "b@x"}]); _ = ids.upsert([{"email": "a@x"}])
    >>> ids.to_polars().sort("uid").to_dicts()
    [{'email': 'a@x', 'uid': 1}, {'email': 'b@x', 'uid': 2}]
    """

    def __init__(
        self,
        runtime: TableRuntime,
        partition: PartitionInfo | None = None,
        *,
        target_columns: Sequence[str] | None = None,
        merge_mode: MergeMode = "default",
        buffer_rows: int = 1_000_000,
        skip_unchanged: bool = False,
    ) -> None:
        if not runtime.info.is_primary_key_table:
            raise UnsupportedOperationError(
                f"{runtime.info.path} is a log table: write it with append() (new_append() for a buffering writer); "
                "upserts and deletes need a primary key"
            )
        super().__init__(runtime, partition, buffer_rows=buffer_rows)
        spec = runtime.merge_spec
        self.target_columns = tuple(target_columns) if target_columns is not None else None
        self.auto_increment = auto = runtime.info.auto_increment_column
        if auto is not None:
            if self.target_columns is not None and auto in self.target_columns:
                raise InvalidPartialUpdateError(
                    f"explicitly specifying values for the auto-increment column {auto!r} is not allowed; leave it "
                    "out of target_columns (a new key gets the next value, an existing key keeps its own)"
                )
            # Its values are assigned, never written: a partial update need not fill it (Fluss checks the
            # nullability of every other non-key column only).
            spec = dataclasses.replace(spec, nullable={**spec.nullable, auto: True})
        self.merger = create_row_merger(spec, target_columns=self.target_columns, merge_mode=merge_mode)
        self.merge_mode = merge_mode
        self.skip_unchanged = skip_unchanged
        partial = self.target_columns is not None and set(self.target_columns) != set(spec.columns)
        self.partial = partial
        wal = runtime.info.options.get(opt.CHANGELOG_IMAGE, "full") == "wal"
        # Fluss skips reading the old row (and writes inserts as +U) only for full-row writes of the default engine
        # on tables without an auto-increment column, whose inserts need their value.
        self.image = ChangeImage(
            wal=wal, inserts_as_updates=wal and spec.merge_engine is None and not partial and auto is None
        )

    def upsert(self, data: Any) -> None:
        """Validate and buffer upserts (raises before buffering anything if they do not fit)."""
        schema = self.runtime.schema
        frame = to_frame(data, schema)
        auto = self.auto_increment
        if auto is not None and auto in frame.columns:
            given = frame.height - frame.get_column(auto).null_count()
            if given:
                raise SchemaMismatchError(
                    f"{given} row(s) give a value for the auto-increment column {auto!r}; explicitly specifying "
                    "values for it is not allowed: drop the column (new keys get the next value, existing keys "
                    "keep theirs)"
                )
            frame = frame.drop(auto)
        if self.partial:
            assert self.target_columns is not None
            frame = frame.select(
                [c for c in frame.columns if c in self.target_columns]
                + [c for c in frame.columns if c not in schema.names]
            )
            required: Sequence[str] = self.target_columns
        else:
            required = [c for c in schema.names if c != auto]
        frame = conform(
            frame,
            schema,
            required=required,
            key_columns=schema.primary_key,
            not_null_checked=[]
            if self.partial
            else [c.name for c in schema.columns if not c.nullable and c.name != auto],
        )
        if frame.height:
            self._buffer_frame(frame.with_columns(pl.lit(False).alias(_OP)))

    def delete(self, keys: Any) -> None:
        """Validate and buffer deletes by primary key (other columns are ignored)."""
        schema = self.runtime.schema
        if self.merge_mode == "default" and self.runtime.merge_spec.delete_behavior == "disable":
            raise DeletionDisabledError(
                f"{self.runtime.info.path} has {opt.DELETE_BEHAVIOR}='disable'; deletes are "
                "rejected (set it to 'allow' or 'ignore' when creating the table)"
            )
        frame = to_frame(keys, schema)
        frame = conform(
            frame.select(
                [c for c in frame.columns if c in schema.primary_key]
                + [c for c in frame.columns if c not in schema.names]
            ),
            schema,
            required=schema.primary_key,
            key_columns=schema.primary_key,
        )
        if frame.height:
            self._buffer_frame(frame.with_columns(pl.lit(True).alias(_OP)))

    def _buckets(self, frame: pl.DataFrame) -> np.ndarray:
        """Bucket of every row: the hash of its bucket key."""
        return self.runtime.buckets_of(frame)

    def _commit(self, target: TabletSet, bucket: int, rows: pl.DataFrame, seq: int) -> BatchHeader:
        """Merge one bucket's batch against its state and commit the changelog."""
        is_delete = np.asarray(rows.get_column(_OP).to_numpy(), dtype=bool)
        return target.kv_tablet(bucket).write(
            rows[[c for c in rows.columns if c != _OP]],  # drop() without a Polars query
            is_delete,
            self.merger,
            self.image,
            writer_id=self.writer_id,
            batch_seq=seq,
            skip_unchanged=self.skip_unchanged,
        )

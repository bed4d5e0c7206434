"""State as of a time: a primary-key table's full contents at a past commit timestamp or log offsets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

import polars as pl

from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.table import Table
from fluss_lake.training.history import (
    ALL_SYSTEM_COLUMNS,
    BUCKET,
    CHANGE_TYPE,
    OFFSET,
    ORDER,
    PARTITION,
    TIMESTAMP,
    VALUE_CHANGES,
    LakeHistories,
    LakeLike,
    as_utc,
    check_history,
    history_of,
    pinned_history,
    time_expr,
    time_unit,
)

__all__ = ["state_as_of"]


def state_as_of(
    history: pl.LazyFrame | pl.DataFrame | Table,
    *,
    primary_key: Sequence[str] | None = None,
    timestamp: datetime | date | str | None = None,
    offsets: Mapping[int, int] | None = None,
    lake: LakeLike | None = None,
    snapshot_id: int | None = None,
    snapshot_as_of: datetime | date | str | None = None,
) -> pl.LazyFrame:
    """Every live row of a primary-key table as it stood at `timestamp` or at the log `offsets`.

    Parameters
    ----------
    history
        A history frame (see :mod:`fluss_lake.training.history`), or a live primary-key ``Table``, whose
        history is `lake` plus the live log after it (:func:`~fluss_lake.training.history_of`).
    primary_key
        The key columns (taken from the table when `history` is a ``Table``).
    timestamp
        The state after every change committed at or before this time (naive = UTC).
    offsets
        The state after every change below these per-bucket end offsets (exclusive, like Fluss's end offsets
        and a lake snapshot's bucket offsets); a bucket left out is read to its end. A partitioned history
        (with ``__partition``) takes ``(partition name, bucket)`` keys, like ``Table.end_offsets()``.
        Neither: the latest state. Both: changes must satisfy both.
    lake
        Only with a ``Table``: its tiered lake history (a frame), or the lake (``tiering.Lake``) to read it from.
    snapshot_id, snapshot_as_of
        Only with a ``Table`` and ``lake=`` a lake: read the history as tiered in this snapshot of the lake's
        history table (``tiering.lake_snapshots(lake, path, kind="history")`` lists them), or in the latest one
        committed at or before this time, and nothing after it (no live tail): the same rows however much is
        tiered or written later, so a backfill can be reproduced.

    Returns a LazyFrame of the table's columns sorted by the primary key.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"])
    >>> t = conn.get_table("d.t")
    >>> _ = t.upsert([{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]); _ = t.upsert([{"k": 1, "v": "c"}])
    >>> state_as_of(t, offsets={0: 2}).collect().to_dicts()
    [{'k': 1, 'v': 'a'}, {'k': 2, 'v': 'b'}]
    """
    pinned = snapshot_id is not None or snapshot_as_of is not None
    if pinned and not (isinstance(history, Table) and isinstance(lake, LakeHistories)):
        raise InvalidConfigError(
            "snapshot_id= and snapshot_as_of= pin a lake read: pass the live Table and lake=<a tiering.Lake> "
            "(or read the pinned frame yourself with tiering.read_history(lake, path, snapshot_id=...))"
        )
    if isinstance(history, Table):
        primary_key = history.schema.primary_key if primary_key is None else primary_key
        if pinned:
            assert isinstance(lake, LakeHistories)
            history = pinned_history(history, lake, snapshot_id=snapshot_id, as_of=snapshot_as_of)
        else:
            history = history_of(history, lake=lake)
    elif lake is not None:
        raise InvalidConfigError("lake= goes with a live Table; with a history frame, concatenate it yourself")
    if not isinstance(history, pl.LazyFrame | pl.DataFrame):
        raise InvalidConfigError(
            f"history must be a history frame or a primary-key Table, got {type(history).__name__}"
        )
    if not primary_key:
        raise InvalidConfigError("state_as_of needs primary_key= (the key columns of the history frame)")
    primary_key = [primary_key] if isinstance(primary_key, str) else list(primary_key)
    lazy = history.lazy()
    schema = lazy.collect_schema()
    check_history(schema, what="state_as_of", needed=tuple(primary_key))
    changes = lazy.filter(pl.col(CHANGE_TYPE).is_in(VALUE_CHANGES))
    if timestamp is not None:
        cut = as_utc(timestamp, what="timestamp")
        commit = time_expr(TIMESTAMP, schema[TIMESTAMP], unit=time_unit(schema[TIMESTAMP]), what=TIMESTAMP)
        changes = changes.filter(commit <= cut)
    if offsets is not None:
        partitioned = PARTITION in schema

        def whole(x: object) -> bool:  # a bool is an int to Python, but no offset or bucket
            return isinstance(x, int) and not isinstance(x, bool)

        if partitioned:  # (partition name, bucket) keys, as a partitioned table's end_offsets()
            bad = {
                b: o
                for b, o in offsets.items()
                if not (isinstance(b, tuple) and len(b) == 2 and isinstance(b[0], str) and whole(b[1]))
                or not whole(o)
                or o < 0
            }
        else:
            bad = {b: o for b, o in offsets.items() if not whole(b) or not whole(o) or o < 0}
        if bad:
            what = "(partition name, bucket) pairs" if partitioned else "bucket numbers"
            raise InvalidConfigError(f"offsets must map {what} to whole non-negative end offsets, got {bad}")
        on = [PARTITION, BUCKET] if partitioned else [BUCKET]
        keys: list[Any] = list(offsets)
        data = {PARTITION: [k[0] for k in keys], BUCKET: [k[1] for k in keys]} if partitioned else {BUCKET: keys}
        ends = pl.LazyFrame(
            {**data, "__end": list(offsets.values())}, schema={**{c: schema[c] for c in on}, "__end": pl.Int64}
        )
        changes = (
            changes.join(ends, on=on, how="left")
            .filter(pl.col("__end").is_null() | (pl.col(OFFSET) < pl.col("__end")))
            .drop("__end")
        )
    columns = [c for c in schema if c not in ALL_SYSTEM_COLUMNS]
    latest = changes.sort(*ORDER).unique(subset=primary_key, keep="last", maintain_order=True)
    return latest.filter(pl.col(CHANGE_TYPE) != "-D").select(columns).sort(primary_key)

"""Batched primary-key lookups and bucket-key prefix lookups against the current state.

A lookup first catches up with the bucket's log (one probe for the next offset), so it sees every write
committed before it started, from any process. A primary-key lookuper made with ``insert_if_not_exists`` inserts
the keys it misses and returns their new rows (:mod:`fluss_lake.lookup.insert_if_not_exists`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from fluss_lake import options as opt
from fluss_lake.exceptions import InvalidConfigError, UnsupportedOperationError
from fluss_lake.keys import point_key
from fluss_lake.keys.bucketing import buckets_of, split_by_bucket
from fluss_lake.keys.index_hash import index_hashes, prefix_ranges
from fluss_lake.kv.kv_store import OFFSET_COLUMN
from fluss_lake.kv.kv_tablet import KvTablet
from fluss_lake.kv.state_reader import arrow_series, lookup_buckets
from fluss_lake.lookup.insert_if_not_exists import KeyInserter, check_insertable
from fluss_lake.metadata.conform import conform, to_frame
from fluss_lake.metadata.descriptor import TableInfo
from fluss_lake.metadata.partition import PartitionInfo, partition_name_of, partition_names
from fluss_lake.metadata.schema import Schema
from fluss_lake.runtime.maintenance import maybe_maintain
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet

__all__ = ["Lookuper", "PrefixLookuper"]


def _key_frame(schema: Schema, keys: Any, columns: Sequence[str]) -> pl.DataFrame:
    """Validated key columns (types cast, no nulls) in the given order."""
    frame = to_frame(keys, schema)
    if frame.width == len(columns) and _exact_keys(frame, schema.polars_schema, columns):
        return frame if tuple(frame.columns) == tuple(columns) else frame.select(columns)
    extra = [c for c in frame.columns if c not in columns]
    if extra:
        raise InvalidConfigError(f"lookup keys may only hold {list(columns)}; drop {extra}")
    return conform(frame, schema, required=columns, key_columns=columns).select(columns)


def _exact_keys(frame: pl.DataFrame, dtypes: Any, columns: Sequence[str]) -> bool:
    """Whether `frame` holds exactly `columns` with the table's dtypes and no nulls (nothing to conform). Dates and
    timestamps always go through conform(), which refuses values outside years 1 to 9999 as writes do."""
    schema = frame.schema
    for name in columns:
        dtype = schema.get(name)
        if dtype is None or dtype != dtypes[name] or isinstance(dtype, pl.Date | pl.Datetime):
            return False
        if frame.get_column(name).null_count():
            return False
    return True


def _with_keys(rows: pl.DataFrame, keys: pl.DataFrame, found: np.ndarray | None) -> pl.DataFrame:
    """`rows` with the key columns taken from `keys` (set even where absent), plus ``_found`` if given; in place
    (`rows` is the lookup's own frame), so no frame is built per call."""
    names = rows.columns
    for name in keys.columns:
        if name in names:
            rows.replace_column(names.index(name), keys.get_column(name))
    if found is not None:
        rows.insert_column(rows.width, arrow_series("_found", pa.array(found)))  # pl.Series of numpy: ~20 us
    return rows


#: System columns a lookup adds with ``with_offsets=True``.
_OFFSET_SCHEMA = {"_bucket": pl.Int32, "_offset": pl.Int64}


def _with_offsets(rows: pl.DataFrame, bucket: int) -> pl.DataFrame:
    """Rows of one bucket with the store's offset column as ``_bucket``, ``_offset`` (last)."""
    offsets = rows.drop_in_place(OFFSET_COLUMN).alias("_offset")  # eager, in place: `rows` is this call's own
    return rows.hstack([pl.Series("_bucket", np.full(rows.height, bucket, dtype=np.int32)), offsets])


def _equal_at(values: pl.Series, keys: pl.Series, at: np.ndarray) -> np.ndarray:
    """``values == keys[at]`` with nulls unequal, as a numpy mask (integers without nulls compared in numpy)."""
    if values.dtype.is_integer() and values.dtype == keys.dtype and not values.null_count() and not keys.null_count():
        return np.asarray(values.to_numpy() == keys.to_numpy()[at], dtype=bool)
    return (values == keys[at]).fill_null(False).to_numpy()


def _bucket_positions(buckets: np.ndarray) -> dict[int, np.ndarray | None]:
    """Positions of the keys of each bucket, in key order (None: every key is in that one bucket)."""
    if buckets.size == 0:
        return {}
    counts = np.bincount(buckets)
    present = np.flatnonzero(counts).tolist()
    if len(present) == 1:
        return {present[0]: None}
    order = np.argsort(buckets, kind="stable")
    sizes = counts.tolist()
    ends = np.cumsum(counts).tolist()
    return {b: order[ends[b] - sizes[b] : ends[b]] for b in present}


def _by_partition(
    runtime: TableRuntime, keys: pl.DataFrame, *, create: bool = False
) -> list[tuple[TabletSet | None, pl.DataFrame, np.ndarray]]:
    """Key rows grouped by partition (work per distinct partition): the partition's tablets (None if it does not
    exist; with `create`, missing partitions are created first, all before any key is inserted), its keys, and
    their positions in `keys`."""
    existing = runtime.existing()
    info = runtime.info
    names = (  # values are checked before inserting creates any partition
        partition_names(keys, info.partition_keys, runtime.merge_spec.dtypes, check=True)
        if create
        else runtime.partition_names(keys)
    )
    indexed = keys.with_columns(pl.Series("__pos", np.arange(keys.height)), names.alias("__partition"))
    parts = indexed.partition_by("__partition", as_dict=True, maintain_order=True)
    if create:
        missing = [str(name) for (name,) in parts if name not in existing]
        existing.update(runtime.partition_tablets(missing, what="keys to insert"))
    groups = []
    for (name,), part in parts.items():
        groups.append((existing.get(name), part.drop("__pos", "__partition"), part.get_column("__pos").to_numpy()))
    return groups


def _probe(
    tablet: KvTablet,
    keys: pl.DataFrame,
    info: TableInfo,
    with_offsets: bool,
    inserter: KeyInserter | None,
) -> tuple[np.ndarray, pl.DataFrame]:
    """Found mask and rows of one bucket's keys, read after catching up with its log (missing keys inserted first
    when there is an inserter)."""
    hashes = index_hashes(keys, info.schema.primary_key, info.prefix_key)
    with tablet.lock:
        tablet.catch_up()
        found, rows = tablet.kv.lookup(hashes, keys, with_offsets=with_offsets)
        if inserter is not None and not found.all():
            found, rows = inserter.insert(tablet, hashes, keys, found, rows, with_offsets=with_offsets)
    return found, rows


def _lookup_gathered(
    tablets: TabletSet, frame: pl.DataFrame, by_bucket: dict[int, np.ndarray | None], with_offsets: bool
) -> tuple[np.ndarray, pl.DataFrame] | None:
    """Keys of several buckets probed bucket by bucket and gathered into key order at once (see
    :func:`~fluss_lake.kv.state_reader.lookup_buckets`), under every involved bucket's lock (taken in bucket order,
    so concurrent lookups cannot deadlock); None: look up bucket by bucket instead."""
    info = tablets.info
    hashes = index_hashes(frame, info.schema.primary_key, info.prefix_key)
    buckets = sorted(by_bucket)
    with ExitStack() as held:
        readers = []
        for bucket in buckets:
            tablet = tablets.kv_tablet(bucket)
            held.enter_context(tablet.lock)
            tablet.catch_up()
            readers.append(tablet.kv)
        where = [by_bucket[b] for b in buckets]
        return lookup_buckets(
            readers,
            [w if w is not None else np.arange(frame.height) for w in where],
            hashes,
            frame,
            with_offsets=with_offsets,
        )


def _lookup_in(
    tablets: TabletSet,
    frame: pl.DataFrame,
    with_found: bool,
    with_offsets: bool,
    inserter: KeyInserter | None = None,
) -> pl.DataFrame:
    """Validated keys of one unpartitioned table or partition, looked up bucket by bucket, in key order."""
    info = tablets.info
    if info.bucket_num == 1:  # the common single-bucket case: no split, already in key order
        found, rows = _probe(tablets.kv_tablet(0), frame, info, with_offsets, inserter)
        out = _with_keys(rows, frame, found if with_found else None)
        return _with_offsets(out, 0) if with_offsets else out
    n = frame.height
    buckets = buckets_of(info, frame)
    by_bucket = _bucket_positions(buckets)
    if inserter is None and len(by_bucket) > 1:
        gathered = _lookup_gathered(tablets, frame, by_bucket, with_offsets)
        if gathered is not None:
            found, rows = gathered
            out = _with_keys(rows, frame, found if with_found else None)
            if not with_offsets:
                return out
            offsets = out.drop_in_place(OFFSET_COLUMN).alias("_offset")  # eager, in place: this call's own frame
            return out.hstack([pl.Series("_bucket", buckets.astype(np.int32, copy=False)), offsets])
    results: list[pl.DataFrame] = []
    positions: list[np.ndarray] = []
    for bucket, where in by_bucket.items():
        keys_part = frame if where is None else frame[where]
        found, rows = _probe(tablets.kv_tablet(bucket), keys_part, info, with_offsets, inserter)
        part = _with_keys(rows, keys_part, found)
        results.append(_with_offsets(part, bucket) if with_offsets else part)
        positions.append(np.arange(n) if where is None else where)
    if not results:
        out = pl.DataFrame(
            schema={**info.schema.polars_schema, "_found": pl.Boolean, **(_OFFSET_SCHEMA if with_offsets else {})}
        )
    elif len(results) == 1:  # one bucket: already in key order
        out = results[0]
    else:
        stacked = pl.concat(results, how="vertical")
        order = np.argsort(np.concatenate(positions), kind="stable")
        out = stacked[order]
    if not with_found:
        out.drop_in_place("_found")  # in place: an eager drop() plans and collects a query
    return out


class Lookuper:
    """Look up current rows by full primary key, many keys per call.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.users", schema={"id": "INT", "name": "STRING"}, primary_key=["id"], bucket_num=3)
    >>> users = conn.get_table("d.users")
    >>> _ = users.upsert([{"id": i, "name": f"u{i}"} for i in range(10)])
    >>> users.new_lookup().lookup([{"id": 7}, {"id": 42}, {"id": 1}])["name"].to_list()
    ['u7', None, 'u1']

    With ``insert_if_not_exists=True`` a missing key is inserted (other columns null, the auto-increment column
    numbered) and its new row returned: a dictionary table from string ids to dense integers.

    >>> _ = conn.create_table("d.ids", schema={"name": "STRING", "uid": "INT"}, primary_key=["name"],
    ...                       options={"auto-increment.fields": "uid"})
    >>> ids = conn.get_table("d.ids").new_lookup(insert_if_not_exists=True)
    >>> ids.lookup([{"name": "ann"}, {"name": "bob"}, {"name": "ann"}])["uid"].to_list()
    [1, 2, 1]
    """

    def __init__(
        self, runtime: TableRuntime, partition: PartitionInfo | None = None, *, insert_if_not_exists: bool = False
    ) -> None:
        if not runtime.info.is_primary_key_table:
            raise UnsupportedOperationError(f"{runtime.info.path} is a log table; lookups need a primary key")
        if insert_if_not_exists:
            check_insertable(runtime.info)  # refused now, not at the first miss
        self.runtime = runtime
        self.partition = partition
        self.insert_if_not_exists = insert_if_not_exists
        self._partitioned = partition is None and runtime.is_partitioned
        self._plan: _PointPlan | None = None

    def lookup(self, keys: Any, *, with_found: bool = False, with_offsets: bool = False) -> pl.DataFrame:
        """Rows for `keys` (aligned with them; value columns null where the key is absent).

        With `with_found`, a Boolean ``_found`` column tells absent keys from rows whose values are null. With
        `with_offsets`, ``_bucket`` and ``_offset`` columns (last) give each row's bucket and the changelog offset
        of its last change (null where the key is absent, or for rows stored before offsets were kept): a row
        whose offset a changelog reader has not reached yet is a change that reader will still see.

        A lookuper made with ``insert_if_not_exists`` first inserts every absent key (creating missing partitions
        as writes do), so every row is found.
        """
        runtime = self.runtime
        frame = _key_frame(runtime.schema, keys, runtime.schema.primary_key)
        if frame.height == 1 and not with_offsets and not self.insert_if_not_exists and self._flat():
            return self._one(frame, with_found)  # a request per key (a served feature): the point path
        inserter = KeyInserter(runtime) if self.insert_if_not_exists else None
        if self._partitioned:
            out = self._lookup_partitioned(frame, with_found, with_offsets, inserter)
        else:
            out = _lookup_in(runtime.tablets(self.partition), frame, with_found, with_offsets, inserter)
        if inserter is not None and inserter.inserted:
            maybe_maintain(runtime)
        return out

    def _flat(self) -> bool:
        """Whether every column is flat (a nested value does not survive building a frame from Python rows)."""
        return not any(dtype.is_nested() for dtype in self.runtime.schema.polars_schema.values())

    def _one(self, frame: pl.DataFrame, with_found: bool) -> pl.DataFrame:
        """One validated key through :meth:`_lookup_one`, as the one-row frame the batched path gives."""
        key = frame.row(0, named=True)
        row = self._lookup_one(key)
        schema = self.runtime.schema.polars_schema
        out = pl.from_dicts([row if row is not None else key], schema=schema)  # absent: value columns null
        if with_found:
            out.insert_column(out.width, pl.Series("_found", [row is not None], pl.Boolean))
        return out

    def _lookup_partitioned(
        self, frame: pl.DataFrame, with_found: bool, with_offsets: bool, inserter: KeyInserter | None
    ) -> pl.DataFrame:
        """Keys of a partitioned table: each partition's keys looked up in that partition, then put back in order."""
        schema = self.runtime.schema
        results, positions = [], []
        system = _OFFSET_SCHEMA if with_offsets else {}
        for tablets, keys, pos in _by_partition(self.runtime, frame, create=inserter is not None):
            if tablets is None:  # the partition does not exist: no key of it is present
                rows = keys.with_columns(
                    [pl.lit(None, dtype=dt).alias(c) for c, dt in schema.polars_schema.items() if c not in keys.columns]
                ).select(schema.names)
                rows = rows.with_columns(
                    pl.lit(False).alias("_found"), *[pl.lit(None, dtype=dt).alias(c) for c, dt in system.items()]
                )
            else:
                rows = _lookup_in(tablets, keys, True, with_offsets, inserter)
            results.append(rows)
            positions.append(pos)
        if not results:
            out = pl.DataFrame(schema={**schema.polars_schema, "_found": pl.Boolean, **system})
        else:
            out = pl.concat(results, how="vertical")[np.argsort(np.concatenate(positions), kind="stable")]
        if not with_found:
            out.drop_in_place("_found")
        return out

    def lookup_one(self, key: Any) -> dict | None:
        """The current row of one primary key (a dict of key columns), or None: the low-latency path.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.u", schema={"id": "BIGINT", "name": "STRING"}, primary_key=["id"])
        >>> users = conn.get_table("d.u"); _ = users.upsert([{"id": 1, "name": "ann"}])
        >>> users.new_lookup().lookup_one({"id": 1}), users.new_lookup().lookup_one({"id": 2})
        ({'id': 1, 'name': 'ann'}, None)
        """
        row = self._lookup_one(key)
        if row is None and self.insert_if_not_exists:  # a miss writes: the batch path inserts and reads it back
            return self.lookup([key]).row(0, named=True)
        return row

    def _lookup_one(self, key: Any) -> dict | None:
        """:meth:`lookup_one` without inserting."""
        runtime = self.runtime
        plan = self._plan
        if plan is None or plan.info is not runtime.info:  # per-table facts, recomputed after a schema change
            plan = self._plan = _PointPlan.of(runtime.info)
        if not isinstance(key, dict) or key.keys() != plan.key_set:
            raise InvalidConfigError(f"lookup_one takes a dict of exactly the primary-key columns {list(plan.pk)}")
        if self._partitioned:
            name = partition_name_of(key, runtime.info.partition_keys, runtime.merge_spec.dtypes)
            tablets = runtime.cached_tablets(name) or runtime.existing().get(name)
            if tablets is None:
                return None
        else:
            tablets = runtime.tablets(self.partition)
        full = point_key.encode_key([key[c] for c in plan.pk], plan.pk_dtypes)
        bucket_bytes = (
            full if plan.bucket_is_pk else point_key.encode_key([key[c] for c in plan.bucket_keys], plan.bucket_dtypes)
        )
        if full is None or bucket_bytes is None or plan.iceberg:  # other key types: the vectorized path
            frame = _key_frame(runtime.schema, [key], plan.pk)
            row = _lookup_in(tablets, frame, True, False).row(0, named=True)
            return {k: v for k, v in row.items() if k != "_found"} if row["_found"] else None
        bucket = point_key.fluss_bucket(bucket_bytes, plan.bucket_num) if plan.bucket_num > 1 else 0
        tablet = tablets.kv_tablet(bucket)
        hash_value = point_key.index_hash(full, bucket_bytes if plan.prefix else None)
        with tablet.lock:
            tablet.catch_up()
            return tablet.kv.get_one(hash_value, key)


@dataclass(frozen=True, slots=True)
class _PointPlan:
    """What a single-key lookup needs to know about its table, computed once per table version."""

    info: TableInfo
    pk: tuple[str, ...]
    key_set: frozenset[str]
    pk_dtypes: tuple[pl.DataType, ...]
    bucket_keys: tuple[str, ...]
    bucket_dtypes: tuple[pl.DataType, ...]
    bucket_is_pk: bool
    bucket_num: int
    prefix: bool
    iceberg: bool

    @classmethod
    def of(cls, info: TableInfo) -> _PointPlan:
        dtypes = {c.name: c.dtype for c in info.schema.columns}
        pk, bucket_keys = tuple(info.schema.primary_key), tuple(info.bucket_keys)
        return cls(
            info,
            pk,
            frozenset(pk),
            tuple(dtypes[c] for c in pk),
            bucket_keys,
            tuple(dtypes[c] for c in bucket_keys),
            bucket_keys == pk,
            info.bucket_num,
            bool(info.prefix_key),
            info.options.get(opt.DATALAKE_FORMAT) == "iceberg",
        )


class PrefixLookuper:
    """Look up every current row sharing a bucket-key prefix of the primary key (Fluss prefix lookup)."""

    def __init__(
        self, runtime: TableRuntime, partition: PartitionInfo | None = None, columns: Sequence[str] | None = None
    ) -> None:
        info = runtime.info
        if not info.is_primary_key_table:
            raise UnsupportedOperationError(f"{info.path} is a log table; prefix lookups need a primary key")
        prefix = info.prefix_key
        self._partitioned = partition is None and runtime.is_partitioned
        wanted = (*info.partition_keys, *prefix) if self._partitioned else prefix
        if not prefix:
            raise UnsupportedOperationError(
                f"{info.path}: prefix lookup needs a bucket key that is a strict leading prefix of the primary key "
                f"{list(info.schema.primary_key)} (bucket key is {list(info.bucket_keys)}); use lookup() "
                "for full keys"
            )
        if columns is not None and tuple(columns) != wanted:
            raise InvalidConfigError(
                f"prefix lookup columns must be {list(wanted)}, in order (the partition keys, then the bucket key)"
                if info.partition_keys
                else f"prefix lookup columns must equal the bucket key {list(prefix)}, in order"
            )
        self.runtime = runtime
        self.partition = partition
        self.prefix = prefix
        self.columns = wanted

    def lookup(self, keys: Any, *, with_offsets: bool = False) -> pl.DataFrame:
        """All rows whose prefix equals one of `keys`, grouped in key order (a ``_key_index`` column says which);
        `with_offsets` adds ``_bucket`` and ``_offset`` as :meth:`Lookuper.lookup` does."""
        runtime = self.runtime
        frame = _key_frame(runtime.schema, keys, self.columns)
        empty: dict[str, Any] = {
            **runtime.schema.polars_schema,
            "_key_index": pl.Int64,
            **(_OFFSET_SCHEMA if with_offsets else {}),
        }
        if self._partitioned:
            parts = []
            for tablets, part_keys, pos in _by_partition(runtime, frame):
                if tablets is not None:
                    rows = self._lookup_in(tablets, part_keys.select(self.prefix), empty, with_offsets)
                    parts.append(rows.with_columns(pl.Series("_key_index", pos)[rows.get_column("_key_index")]))
            if not parts:
                return pl.DataFrame(schema=empty)
            return pl.concat(parts, how="vertical").sort("_key_index", maintain_order=True)
        return self._lookup_in(runtime.tablets(self.partition), frame, empty, with_offsets)

    def _lookup_in(self, tablets: TabletSet, frame: pl.DataFrame, empty: dict, with_offsets: bool) -> pl.DataFrame:
        """Prefix keys of one unpartitioned table or partition, probed bucket by bucket (frames are built from
        their columns, filtered and ordered in numpy: no Polars query per bucket)."""
        indexed = pl.DataFrame([*frame.get_columns(), pl.Series("__pos", np.arange(frame.height))])
        parts = []
        for bucket, part in split_by_bucket(indexed, buckets_of(tablets.info, frame)).items():
            tablet = tablets.kv_tablet(bucket)
            probe = pl.DataFrame([c for c in part.get_columns() if c.name != "__pos"])
            lo, hi = prefix_ranges(probe, self.prefix)
            with tablet.lock:
                tablet.catch_up()
                rows = tablet.kv.range_rows(lo, hi, with_offsets=with_offsets)
            if rows.height == 0:
                continue
            if with_offsets:
                rows = _with_offsets(rows, bucket)
            probes = rows.get_column("__probe").to_numpy()
            probe_pos = part.get_column("__pos").to_numpy()[probes]
            same = np.ones(rows.height, dtype=bool)
            for column in self.prefix:  # 32-bit prefix hashes may collide: compare the real values
                same &= _equal_at(rows.get_column(column), probe.get_column(column), probes)
            key_index = pl.Series("_key_index", probe_pos)
            picked = pl.DataFrame([key_index if name == "_key_index" else rows.get_column(name) for name in empty])
            parts.append(picked if same.all() else picked[np.flatnonzero(same)])
        if not parts:
            return pl.DataFrame(schema=empty)
        merged = pl.concat(parts, how="vertical")
        return merged[np.argsort(merged.get_column("_key_index").to_numpy(), kind="stable")]  # key order, stable

"""A table's runtime in one process: its tablets per partition and bucket, and the facts every stage needs.

The write, lookup and changelog stages take a runtime (never the ``Table`` facade): it buckets rows, names each
row's partition, hands out the tablets of one partition or fans out over every partition that exists now, and
keeps the merge spec and compression of the current metadata. Handles of one table (the whole table and its
partitions' handles) share one runtime, so a bucket is opened once per process.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from fluss_lake.exceptions import InvalidPartitionError, PartitionNotExistError, UnsupportedOperationError
from fluss_lake.keys.bucketing import buckets_of
from fluss_lake.kv.merge import MergeSpec
from fluss_lake.metadata.auto_partition import AutoPartitionStrategy
from fluss_lake.metadata.descriptor import TableInfo
from fluss_lake.metadata.partition import PartitionInfo, partition_names, spec_of
from fluss_lake.metadata.schema import Schema
from fluss_lake.runtime.context import RuntimeContext
from fluss_lake.runtime.tablet_set import TabletSet

__all__ = ["TableRuntime", "PartitionKey"]

T = TypeVar("T")
#: A bucket of a whole partitioned table: (partition name, bucket).
PartitionKey = tuple[str, int]


class TableRuntime:
    """The live parts of one table in this process (shared by its handles)."""

    def __init__(self, context: RuntimeContext, info: TableInfo) -> None:
        self.context = context
        self.writer_id = uuid.uuid4().hex
        self.info = info
        self._merge_spec: MergeSpec | None = None
        self._unpartitioned: TabletSet | None = None
        self._partitions: dict[str, TabletSet] = {}
        self._lock = threading.Lock()
        self._round_robin = -1
        self.last_maintenance_ms: int | None = None

    # ------------------------------------------------------------ metadata
    def reload(self, info: TableInfo) -> None:
        """Adopt new metadata (after ALTER): every open tablet picks up the new schema."""
        self.info = info
        self._merge_spec = None
        for tablets in self.open_tablet_sets():
            tablets.reload(info)

    @property
    def schema(self) -> Schema:
        """The current schema."""
        return self.info.schema

    @property
    def is_partitioned(self) -> bool:
        """Whether the table has partition keys."""
        return bool(self.info.partition_keys)

    @property
    def merge_spec(self) -> MergeSpec:
        """What the merge engines need to know about this table (rebuilt after ALTER)."""
        if self._merge_spec is None:
            self._merge_spec = MergeSpec.of(self.info)
        return self._merge_spec

    def buckets_of(self, frame: pl.DataFrame) -> npt.NDArray[np.int32]:
        """Bucket of every row by its bucket key."""
        return buckets_of(self.info, frame)

    def next_round_robin_bucket(self) -> int:
        """The next bucket for a key-less batch under ``client.writer.bucket.no-key-assigner=round_robin``."""
        if self._round_robin < 0:
            self._round_robin = random.randrange(self.info.bucket_num)
        else:
            self._round_robin = (self._round_robin + 1) % self.info.bucket_num
        return self._round_robin

    def partition_names(self, frame: pl.DataFrame) -> pl.Series:
        """The partition name of every row of `frame` (which holds the partition columns)."""
        return partition_names(frame, self.info.partition_keys, self.merge_spec.dtypes)

    def check_alive(self) -> None:
        """Raise TableNotExistError if the table was dropped (or re-created) since it was opened."""
        self.context.catalog.check_table_alive(self.info)

    # ------------------------------------------------------------ tablets
    def tablets(self, partition: PartitionInfo | None = None) -> TabletSet:
        """The tablets of the unpartitioned table (None) or of one partition (opened on first use)."""
        if partition is None:
            if self.is_partitioned:
                raise UnsupportedOperationError(
                    f"{self.info.path} is partitioned: per-bucket operations work on one partition; use "
                    "table.partition('<name>') (list_partitions() names them) or partition_tables()"
                )
            if self._unpartitioned is None:
                self._unpartitioned = TabletSet(self.context, self.info, None, writer_id=self.writer_id)
            return self._unpartitioned
        with self._lock:
            cached = self._partitions.get(partition.name)
            if cached is None or cached.partition != partition:  # new, or dropped and created anew
                cached = self._partitions[partition.name] = TabletSet(
                    self.context, self.info, partition, writer_id=self.writer_id
                )
            return cached

    def cached_tablets(self, name: str) -> TabletSet | None:
        """The tablets of partition `name` if this process has them open (no listing)."""
        return self._partitions.get(name)

    def forget(self, name: str) -> None:
        """Drop the open tablets of a partition that was dropped."""
        with self._lock:
            self._partitions.pop(name, None)

    def open_tablet_sets(self) -> list[TabletSet]:
        """Every tablet set this process opened."""
        opened = list(self._partitions.values())
        return [*opened, self._unpartitioned] if self._unpartitioned is not None else opened

    # ------------------------------------------------------------ partitions
    def list_partitions(self) -> list[PartitionInfo]:
        """The table's partitions (name, spec, id), sorted by name."""
        return self.context.catalog.list_partitions(self.info)

    def get_partition(self, spec: str | Mapping[str, object]) -> PartitionInfo:
        """One existing partition by name or spec."""
        return self.context.catalog.get_partition(self.info, spec)

    def create_partition(
        self, spec: str | Mapping[str, object], *, ignore_if_exists: bool = False, now_ms: int | None = None
    ) -> PartitionInfo:
        """Create a partition (rejects values past auto-partition retention)."""
        return self.context.catalog.create_partition(self.info, spec, ignore_if_exists=ignore_if_exists, now_ms=now_ms)

    def drop_partition(self, spec: str | Mapping[str, object], *, ignore_if_not_exists: bool = False) -> None:
        """Drop a partition with its log and state (no delete records)."""
        try:
            partition = self.get_partition(spec)
        except PartitionNotExistError:
            if ignore_if_not_exists:
                return
            raise
        self.context.catalog.drop_partition(self.info, partition)
        self.forget(partition.name)

    def partition_tablets(self, names: Sequence[str], *, what: str = "rows") -> dict[str, TabletSet]:
        """The tablets of the named partitions, creating the missing ones (Fluss's dynamic partition creation)
        only after every check passed, so a refused call creates none. `what` names the caller's data in errors
        ("rows for partition(s) ... are past the retention")."""
        info = self.info
        handles: dict[str, TabletSet] = {}
        missing: list[str] = []
        for name in names:
            cached = self.cached_tablets(name)
            if cached is not None:
                handles[name] = cached
                continue
            try:
                handles[name] = self.tablets(self.get_partition(name))
            except PartitionNotExistError:
                missing.append(name)
        if missing:
            context = self.context
            if not context.dynamic_partition_creation:
                raise PartitionNotExistError(
                    f"partition(s) {missing} of {info.path} do not exist and dynamic partition "
                    "creation is off; create_partition() them first (nothing was written)"
                )
            strategy = AutoPartitionStrategy.from_options(info.options, info.partition_keys, self.merge_spec.dtypes)
            now = context.clock()
            if strategy is not None and strategy.enabled:
                expired = [
                    n for n in missing if strategy.is_expired(spec_of(info.partition_keys, n)[strategy.key], now)
                ]
                if expired:
                    raise InvalidPartitionError(
                        f"{what} for partition(s) {expired} of {info.path} are past the "
                        f"auto-partition retention (values below {strategy.cutoff(now)!r} are "
                        "dropped); nothing was written"
                    )
            for name in missing:
                handles[name] = self.tablets(self.create_partition(name, ignore_if_exists=True))
        return handles

    def existing(self) -> dict[str, TabletSet]:
        """The tablets of every partition that exists now (one listing), by name."""
        return {p.name: self.tablets(p) for p in self.list_partitions()}

    def scope(self, partition: PartitionInfo | None) -> list[TabletSet]:
        """The fan-out over partitions: the tablets a handle covers (the unpartitioned table, one partition, or
        every partition of a partitioned table's whole-table handle)."""
        if partition is not None or not self.is_partitioned:
            return [self.tablets(partition)]
        return list(self.existing().values())

    def keyed(self, partition: PartitionInfo | None, per_bucket: Callable[[TabletSet], Mapping[int, T]]) -> dict:
        """``per_bucket`` of each tablet set of the scope, keyed by bucket, or by ``(partition name, bucket)`` on a
        whole partitioned table (the keys of offsets everywhere)."""
        if partition is not None or not self.is_partitioned:
            return dict(per_bucket(self.tablets(partition)))
        return {(t.name, b): v for t in self.scope(None) for b, v in per_bucket(t).items()}

    def __repr__(self) -> str:
        return f"<TableRuntime {self.info.path}>"

"""A table's maintenance: log TTL, auto-partitioning, state compaction, log compaction and snapshots.

Writers call :func:`maybe_maintain` after each flush, so retention needs no separate service: it applies
``table.log.ttl`` and ``table.auto-partition.*`` at most every ten minutes of the table clock per process (Fluss's
coordinator checks every ten minutes). The ``Table`` verbs of the same names call the other functions directly.
"""

from __future__ import annotations

from fluss_lake import options as opt
from fluss_lake.exceptions import UnsupportedOperationError
from fluss_lake.metadata.auto_partition import AutoPartitionStrategy
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet

__all__ = ["maybe_maintain", "auto_partition", "expire_log", "compact_state", "compact_log", "snapshot"]

_CHECK_EVERY_MS = 600_000


def maybe_maintain(runtime: TableRuntime) -> None:
    """Apply log TTL and auto-partitioning if this process last did so over ten minutes ago."""
    options = runtime.info.options
    auto = options.get(opt.AUTO_PARTITION_ENABLED) == "true"
    if opt.LOG_TTL not in options and not auto:
        return
    now = runtime.context.clock()
    last = runtime.last_maintenance_ms
    if last is None or now - last >= _CHECK_EVERY_MS:
        runtime.last_maintenance_ms = now
        if auto:
            auto_partition(runtime, now_ms=now)
        if opt.LOG_TTL in options:
            expire_log(runtime, None, now_ms=now)


def auto_partition(runtime: TableRuntime, *, now_ms: int | None = None) -> tuple[list[str], list[str]]:
    """Pre-create upcoming partitions and drop those past retention; returns the names created and dropped."""
    info = runtime.info
    strategy = AutoPartitionStrategy.from_options(info.options, info.partition_keys, runtime.merge_spec.dtypes)
    if strategy is None or not strategy.enabled:
        return [], []
    now = runtime.context.clock() if now_ms is None else now_ms
    existing = {p.name: p for p in runtime.list_partitions()}
    dropped = [name for name, p in existing.items() if strategy.is_expired(p.spec[strategy.key], now)]
    for name in dropped:
        runtime.drop_partition(name, ignore_if_not_exists=True)
    created = []
    for value in strategy.precreate_values(now):
        if value not in existing:
            runtime.create_partition({strategy.key: value}, ignore_if_exists=True, now_ms=now)
            created.append(value)
    return created, dropped


def expire_log(runtime: TableRuntime, partition: PartitionInfo | None, *, now_ms: int | None = None) -> dict:
    """Delete whole log batches older than ``table.log.ttl``; returns each bucket's earliest offset.

    A primary-key bucket snapshots its state first and keeps every batch the snapshot does not cover, so expiry
    bounds the changelog only, never the state. A non-positive TTL disables expiry.
    """
    ttl = opt.parse_duration_ms(opt.LOG_TTL, runtime.info.options.get(opt.LOG_TTL, "7 d"))
    now = runtime.context.clock() if now_ms is None else now_ms

    def expire(tablets: TabletSet) -> dict[int, int]:
        earliest = {}
        for bucket in range(tablets.bucket_num):
            if ttl <= 0:
                earliest[bucket] = tablets.log_tablet(bucket).earliest_offset
                continue
            covered = tablets.kv_tablet(bucket).snapshot() if tablets.info.is_primary_key_table else None
            earliest[bucket] = tablets.log_tablet(bucket).expire(now - ttl, covered_until=covered)
        return earliest

    return runtime.keyed(partition, expire)


def compact_state(runtime: TableRuntime, partition: PartitionInfo | None) -> None:
    """Fully compact every bucket's state now (``table.kv.ttl`` takes effect here), then snapshot it."""
    if not runtime.info.is_primary_key_table:
        raise UnsupportedOperationError(f"{runtime.info.path} is a log table; it has no primary-key state")
    for tablets in runtime.scope(partition):
        for bucket in range(tablets.bucket_num):
            tablets.kv_tablet(bucket).compact()


def compact_log(
    runtime: TableRuntime, partition: PartitionInfo | None, *, now_ms: int | None = None, target_rows: int = 1_000_000
) -> int:
    """Merge runs of small committed log batches older than the grace period; returns how many were merged."""
    now = runtime.context.clock() if now_ms is None else now_ms
    grace = runtime.context.grace_ms(runtime.info)
    codec = runtime.info.log_compression[0]
    moved = 0
    for tablets in runtime.scope(partition):
        for bucket in range(tablets.bucket_num):
            moved += tablets.log_tablet(bucket).compact(
                now_ms=now, grace_ms=grace, target_rows=target_rows, compression=codec
            )
    return moved


def snapshot(runtime: TableRuntime, partition: PartitionInfo | None) -> dict:
    """Snapshot the state of every bucket now; returns the offset each snapshot replays from."""
    return runtime.keyed(partition, lambda t: {b: t.kv_tablet(b).snapshot() for b in range(t.bucket_num)})

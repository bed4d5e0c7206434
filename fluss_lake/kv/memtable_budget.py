"""One memtable budget for the whole process, shared by every KV store (like RocksDB's write-buffer manager).

Each bucket's store keeps its newest after-images in memory (its memtable) until they are written as a file
segment. Without a shared budget every store of every table may fill its own memtable, so memory grows with the
number of buckets a process touches. The budget caps the bytes all memtables of the process hold together: when
a write takes the total over the limit, the largest memtables are flushed (written as file segments, which the
OS may page out) until the total is back under it. Flushing early loses nothing: the changelog is the durable
copy of memtable rows, and a flushed segment holds exactly the rows the memtable held.

Examples
--------
>>> from fluss_lake.kv import memtable_budget
>>> old = memtable_budget.limit_bytes()
>>> memtable_budget.set_limit_bytes(8 << 20)  # 8 MiB for all memtables of this process
>>> memtable_budget.limit_bytes()
8388608
>>> memtable_budget.set_limit_bytes(old)
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol

from fluss_lake.exceptions import InvalidConfigError

__all__ = [
    "DEFAULT_LIMIT_BYTES",
    "MIN_SHARE_LIMIT_BYTES",
    "MemtableOwner",
    "for_share",
    "limit_bytes",
    "set_limit_bytes",
    "total_bytes",
]


class MemtableOwner(Protocol):
    """What the budget needs of a store (:class:`~fluss_lake.kv.kv_store.KvStore`): its memtable's size, its lock
    and a way to flush the memtable."""

    @property
    def memtable_bytes(self) -> int:
        """Bytes the store's memtable holds (as last accounted)."""
        ...

    @property
    def lock(self) -> threading.RLock:
        """The lock guarding the store's segments."""
        ...

    def flush_memtable(self) -> None:
        """Write the memtable as a file segment."""
        ...


#: Default budget: 16 MiB of memtables for the whole process (about 250k rows of a 6-column table).
DEFAULT_LIMIT_BYTES = 16 << 20

#: The smallest budget :func:`for_share` scales a process's budget down to (smaller memtables flush more, smaller
#: segments, more compaction).
MIN_SHARE_LIMIT_BYTES = 4 << 20

_limit = DEFAULT_LIMIT_BYTES
_stores: weakref.WeakSet[MemtableOwner] = weakref.WeakSet()
_registry_lock = threading.Lock()


def limit_bytes() -> int:
    """The process-wide memtable budget in bytes."""
    return _limit


def set_limit_bytes(limit: int) -> None:
    """Set the process-wide memtable budget (bytes, > 0); takes effect on the next write of any store."""
    global _limit
    if limit <= 0:
        raise InvalidConfigError(f"memtable budget {limit} bytes: must be positive")
    _limit = int(limit)


def for_share(share: float, *, base: int | None = None) -> int:
    """The budget for a process doing `share` (0 < share <= 1) of a job's work, e.g. a shard owning half of its
    inputs' buckets: `base` (default: the current limit) times `share`, at least ``MIN_SHARE_LIMIT_BYTES`` and at
    most `base`. Such a process writes that share of the rows, so its memtables flush after as many rows each as
    the whole job's would in one process, and its memory follows what it owns.

    >>> from fluss_lake.kv import memtable_budget
    >>> memtable_budget.for_share(0.5, base=16 << 20) >> 20, memtable_budget.for_share(0.1, base=16 << 20) >> 20
    (8, 4)
    >>> memtable_budget.for_share(1.0, base=2 << 20) >> 20
    2
    """
    base = _limit if base is None else base
    if not 0 < share <= 1:
        raise InvalidConfigError(f"memtable budget share {share!r}: must be in (0, 1] (the fraction of the work)")
    if base <= 0:
        raise InvalidConfigError(f"memtable budget {base} bytes: must be positive")
    return int(min(base, max(MIN_SHARE_LIMIT_BYTES, round(base * share))))


def register(store: MemtableOwner) -> None:
    """Count a store's memtable against the budget (held weakly: a dropped store leaves the budget)."""
    with _registry_lock:
        _stores.add(store)


#: How long the budget waits for another store's lock before skipping that store.
_LOCK_WAIT = 0.2


def _registered() -> list[MemtableOwner]:
    with _registry_lock:
        return list(_stores)


def total_bytes() -> int:
    """Bytes held by the memtables of every store of the process (as last accounted by each store)."""
    return sum(store.memtable_bytes for store in _registered())


def enforce(writer: MemtableOwner) -> None:
    """After `writer` added rows (its own lock held): flush the largest memtables while the total is over the
    budget.

    Another store is flushed only if its lock can be taken within ``_LOCK_WAIT`` seconds (the background
    compactor holds a store's lock only to pick a run and to put its result in place; a store a writer keeps
    busy longer is skipped, so this never deadlocks); if none can, the writer flushes its own memtable.
    """
    stores = _registered()
    total = sum(store.memtable_bytes for store in stores)
    if total <= _limit:
        return
    for store in sorted(stores, key=lambda s: s.memtable_bytes, reverse=True):
        if total <= _limit:
            return
        size = store.memtable_bytes
        if size == 0:
            break
        if store is writer:
            store.flush_memtable()
        elif store.lock.acquire(timeout=_LOCK_WAIT):
            try:
                store.flush_memtable()
            finally:
                store.lock.release()
        else:
            continue
        total -= size
    if total > _limit and writer.memtable_bytes:
        writer.flush_memtable()

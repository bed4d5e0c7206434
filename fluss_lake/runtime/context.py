"""What the tablets of every table of one connection share: the catalog (with its store and clock) and the
process-local settings of a connection."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fluss_lake.catalog import Catalog
from fluss_lake.io.store import ObjectStore

__all__ = ["RuntimeContext"]


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    """A connection's catalog and settings, as the runtime of each of its tables sees them."""

    catalog: Catalog
    #: where primary-key state segments of this process live (a cache of the store's on S3)
    local_dir: str
    #: take a state snapshot once this many log offsets were applied since the last one
    snapshot_every: int = 1_000_000
    #: log compaction merges only batches older than this; writers with older views re-list first
    log_compaction_grace_ms: int = 600_000
    #: create missing partitions when rows for them are written
    dynamic_partition_creation: bool = True

    @property
    def store(self) -> ObjectStore:
        """The object store every table of the connection lives in."""
        return self.catalog.store

    @property
    def clock(self) -> Callable[[], int]:
        """Epoch-millisecond clock of commit timestamps."""
        return self.catalog.clock

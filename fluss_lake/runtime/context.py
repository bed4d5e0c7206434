"""What the tablets of every table of one connection share: the catalog (with its store and clock) and the
process-local settings of a connection."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fluss_lake.catalog import Catalog
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.io.store import ObjectStore
from fluss_lake.metadata.descriptor import TableInfo

__all__ = ["DEFAULT_GRACE_MS", "RuntimeContext"]

#: The log compaction grace of tables created without one (and of tables of earlier versions).
DEFAULT_GRACE_MS = 600_000


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    """A connection's catalog and settings, as the runtime of each of its tables sees them."""

    catalog: Catalog
    #: where primary-key state segments of this process live (a cache of the store's on S3)
    local_dir: str
    #: take a state snapshot once this many log offsets were applied since the last one
    snapshot_every: int = 1_000_000
    #: log compaction merges only batches older than this; writers with older views re-list first. Recorded in each
    #: table this connection creates; None: every table's own value (600000 ms for tables that never recorded one)
    log_compaction_grace_ms: int | None = None
    #: create missing partitions when rows for them are written
    dynamic_partition_creation: bool = True

    @property
    def store(self) -> ObjectStore:
        """The object store every table of the connection lives in."""
        return self.catalog.store

    def grace_ms(self, info: TableInfo) -> int:
        """The log compaction grace of a table: the one its metadata records (every process must use the same, or
        readers stop seeing batches compacted sooner than they expect); a connection asking for another is refused."""
        recorded = info.log_compaction_grace_ms
        if recorded is None:
            return DEFAULT_GRACE_MS if self.log_compaction_grace_ms is None else self.log_compaction_grace_ms
        if self.log_compaction_grace_ms is not None and self.log_compaction_grace_ms != recorded:
            raise InvalidConfigError(
                f"table {info.path} compacts its log with a grace of {recorded} ms (recorded when it was created) "
                f"but this connection asks for {self.log_compaction_grace_ms} ms; every process must use the "
                "table's value: leave log_compaction_grace_ms unset in connect() (or pass the same value)"
            )
        return recorded

    @property
    def clock(self) -> Callable[[], int]:
        """Epoch-millisecond clock of commit timestamps."""
        return self.catalog.clock

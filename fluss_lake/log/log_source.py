"""What a bounded read of a table's log needs: the table's schema, its buckets, and each bucket's log.

The runtime's tablet sets implement it (a primary-key bucket's log is then read under its state's lock), and so
does tiering's reader, which reads a primary-key table's changelog without opening its state: both through this
protocol and :func:`fluss_lake.log.log_reads.read_buckets`, nothing private.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from fluss_lake.log.log_tablet import LogTablet
from fluss_lake.metadata.schema import Schema

__all__ = ["LogSource"]


@runtime_checkable
class LogSource(Protocol):
    """The logs of an unpartitioned table or of one partition, bucket by bucket."""

    @property
    def schema(self) -> Schema:
        """The table's current schema (older batches are padded to it)."""
        ...

    @property
    def bucket_num(self) -> int:
        """Number of buckets."""
        ...

    def log_tablet(self, bucket: int) -> LogTablet:
        """The log of one bucket."""
        ...

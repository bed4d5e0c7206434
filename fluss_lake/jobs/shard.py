"""Shards: a job (or a tiering service) split into ``count`` parts, each owning a disjoint set of the
(partition, bucket) pairs of the changelogs it reads.

The assignment is a pure function of (partition name, bucket, count), the same in every process and on every
machine (no Python ``hash()`` of strings, which is salted per process): an unpartitioned bucket ``b`` belongs to
shard ``b % count`` (bucket-major round robin), a bucket of partition ``p`` to ``(crc32(p) + b) % count``, so the
buckets of one partition spread over the shards and the partitions start at different shards. See
``docs/SHARDS.md``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from fluss_lake._utils.arguments import check_int
from fluss_lake.exceptions import InvalidConfigError

__all__ = ["Shard", "owner"]


def owner(partition: str | None, bucket: int, count: int) -> int:
    """The index of the shard (of `count`) owning `bucket` of `partition` (None: an unpartitioned table)."""
    if partition is None:
        return bucket % count
    return (zlib.crc32(partition.encode()) + bucket) % count


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`: owns the (partition, bucket) pairs :func:`owner` assigns to it.

    Examples
    --------
    >>> from fluss_lake.jobs import Shard
    >>> [s.owns(None, 5) for s in Shard.all(2)]
    [False, True]
    >>> sum(s.owns("2026-01-01", 3) for s in Shard.all(3))
    1
    >>> Shard(2, 2)
    Traceback (most recent call last):
    ...
    fluss_lake.exceptions.InvalidConfigError: Shard(index=2, count=2): index must be in [0, 2) (one of 0 .. 1)
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        check_int("Shard(count)", self.count, minimum=1, hint="the number of shards the job is split into")
        check_int("Shard(index)", self.index, minimum=0, hint="this shard's number, 0 .. count-1")
        if self.index >= self.count:
            raise InvalidConfigError(
                f"Shard(index={self.index}, count={self.count}): index must be in [0, {self.count}) "
                f"(one of 0 .. {self.count - 1})"
            )

    def owns(self, partition: str | None, bucket: int) -> bool:
        """Whether this shard reads `bucket` of `partition` (None: an unpartitioned table)."""
        if type(bucket) is not int:  # the common case costs one type check
            bucket = check_int("bucket", bucket, minimum=0, hint="a bucket number")
        elif bucket < 0:
            check_int("bucket", bucket, minimum=0, hint="a bucket number")
        return owner(partition, bucket, self.count) == self.index

    def share(self, bucket_num: int | None = None) -> float:
        """The fraction of a table's buckets this shard owns: of the `bucket_num` buckets of an unpartitioned table,
        or (None) on average over a partitioned table's partitions, whose buckets start at different shards:
        ``1 / count``.

        >>> from fluss_lake.jobs import Shard
        >>> [Shard(i, 3).share(4) for i in range(3)], Shard(0, 2).share()
        ([0.5, 0.25, 0.25], 0.5)
        """
        if bucket_num is None:
            return 1.0 / self.count
        bucket_num = check_int("bucket_num", bucket_num, minimum=1, hint="a table's bucket count")
        return sum(owner(None, b, self.count) == self.index for b in range(bucket_num)) / bucket_num

    @classmethod
    def all(cls, count: int) -> list[Shard]:
        """Every shard of a job split into `count`: ``[Shard(0, count), ..., Shard(count - 1, count)]``."""
        count = check_int("count", count, minimum=1, hint="the number of shards")
        return [cls(i, count) for i in range(count)]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

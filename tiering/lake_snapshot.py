"""The tiering progress a lake snapshot carries: end offsets per (partition, bucket), in the snapshot summary.

The offsets are written as compact JSON under ``fluss-offsets`` in the summary of the very Iceberg snapshot that
adds the data, so the data and the progress are one atomic commit. A partitioned table's entry also names
the id of each partition incarnation (``partitions``): a partition dropped and created again under the same name
starts at offset 0, and its old offsets do not apply to it. ``fluss-tiered-at`` records the live clock
(epoch ms) at which the round read the log ends: the lake then holds everything committed live before it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fluss_lake.exceptions import LakeTableMismatchError

__all__ = ["OFFSETS_PROPERTY", "TABLE_ID_PROPERTY", "TIERED_AT_PROPERTY", "BucketKey", "LakeSnapshot"]

OFFSETS_PROPERTY = "fluss-offsets"
TIERED_AT_PROPERTY = "fluss-tiered-at"
TABLE_ID_PROPERTY = "fluss.table-id"

#: (partition name or None, bucket)
BucketKey = tuple[str | None, int]


@dataclass(frozen=True, slots=True)
class LakeSnapshot:
    """One lake snapshot's id and tiered end offsets (the next live offset to tier, per bucket).

    Examples
    --------
    >>> snap = LakeSnapshot(7, {(None, 0): 12, (None, 1): 3}, table_id="t1", tiered_at_ms=1000)
    >>> snap.summary_properties()["fluss-offsets"]
    '{"table_id":"t1","offsets":[[null,0,12],[null,1,3]]}'
    >>> LakeSnapshot.from_summary(7, snap.summary_properties()) == snap
    True
    """

    snapshot_id: int | None
    offsets: Mapping[BucketKey, int] = field(default_factory=dict)
    table_id: str | None = None
    tiered_at_ms: int | None = None
    partition_ids: Mapping[str, str] = field(default_factory=dict)

    def offset(self, bucket: int, partition: str | None = None) -> int:
        """Tiered end offset of a bucket (0: never tiered)."""
        return self.offsets.get((partition, bucket), 0)

    def start(self, key: BucketKey, partition_id: str | None = None) -> int:
        """Where to resume `key`: its tiered offset, or 0 if it belongs to an older incarnation of the partition."""
        recorded = self.partition_ids.get(key[0]) if key[0] is not None else None
        if recorded is not None and partition_id is not None and recorded != partition_id:
            return 0
        return self.offsets.get(key, 0)

    def bucket_offsets(self, partition: str | None = None) -> dict[int, int]:
        """``{bucket: offset}`` of one partition (None: the unpartitioned table)."""
        return {b: o for (p, b), o in self.offsets.items() if p == partition}

    def summary_properties(self) -> dict[str, str]:
        """The snapshot summary entries to commit with the data."""
        entries = [[p, b, o] for (p, b), o in sorted(self.offsets.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))]
        body: dict[str, Any] = {"table_id": self.table_id, "offsets": entries}
        if self.partition_ids:
            body["partitions"] = dict(sorted(self.partition_ids.items()))
        props = {OFFSETS_PROPERTY: json.dumps(body, separators=(",", ":"))}
        if self.tiered_at_ms is not None:
            props[TIERED_AT_PROPERTY] = str(self.tiered_at_ms)
        return props

    @classmethod
    def from_summary(cls, snapshot_id: int | None, summary: Mapping[str, Any]) -> LakeSnapshot:
        """Decode the tiering entries of a snapshot summary."""
        raw = summary.get(OFFSETS_PROPERTY)
        if raw is None:
            return cls(snapshot_id)
        try:
            body = json.loads(raw)
            offsets = {(p, int(b)): int(o) for p, b, o in body["offsets"]}
            ids = {str(k): str(v) for k, v in body.get("partitions", {}).items()}
        except (ValueError, KeyError, TypeError) as exc:
            raise LakeTableMismatchError(
                f"snapshot {snapshot_id} has an unreadable {OFFSETS_PROPERTY!r} entry "
                f"({raw[:80]!r}); it was not written by fluss-lake tiering"
            ) from exc
        tiered_at = summary.get(TIERED_AT_PROPERTY)
        return cls(snapshot_id, offsets, body.get("table_id"), int(tiered_at) if tiered_at else None, ids)

    @classmethod
    def of_table(cls, iceberg_table: Any) -> LakeSnapshot:
        """The newest snapshot of an Iceberg table that carries tiering offsets (walking back over others)."""
        snapshot = iceberg_table.current_snapshot()
        metadata = iceberg_table.metadata
        while snapshot is not None:
            summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
            if OFFSETS_PROPERTY in summary:
                found = cls.from_summary(snapshot.snapshot_id, summary)
                # the data of later snapshots (compactions) is still this state: report the current snapshot id
                current = iceberg_table.current_snapshot()
                return cls(current.snapshot_id, found.offsets, found.table_id, found.tiered_at_ms, found.partition_ids)
            parent = snapshot.parent_snapshot_id
            snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
        current = iceberg_table.current_snapshot()
        return cls(current.snapshot_id if current is not None else None)

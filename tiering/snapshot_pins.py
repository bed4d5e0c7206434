"""Pinning a read to one snapshot of a lake table: by id, or the latest committed at or before a time."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from fluss_lake._utils.arguments import check_int
from fluss_lake.exceptions import InvalidConfigError, LakeSnapshotNotFoundError

__all__ = ["lineage", "pinned_snapshot"]


def lineage(iceberg_table: Any) -> list[Any]:
    """The current snapshot and its ancestors, oldest first (the snapshots a read of the table can see)."""
    metadata = iceberg_table.metadata
    snapshot = iceberg_table.current_snapshot()
    chain = []
    while snapshot is not None:
        chain.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return chain[::-1]


def _as_utc_ms(as_of: Any) -> int:
    if isinstance(as_of, datetime):
        moment = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=UTC)
    elif isinstance(as_of, date):
        moment = datetime(as_of.year, as_of.month, as_of.day, tzinfo=UTC)
    elif isinstance(as_of, str):
        try:
            return _as_utc_ms(datetime.fromisoformat(as_of))
        except ValueError:
            raise InvalidConfigError(f"as_of={as_of!r} is not an ISO date or time (e.g. '2026-11-02T00:00Z')") from None
    else:
        raise InvalidConfigError(f"as_of must be a datetime, a date or an ISO string, got {type(as_of).__name__}")
    return int(moment.timestamp() * 1000)


def pinned_snapshot(iceberg_table: Any, *, snapshot_id: int | None = None, as_of: Any = None) -> int | None:
    """The snapshot a pinned read of `iceberg_table` reads: `snapshot_id` (checked to exist in the table's
    lineage) or the latest snapshot committed at or before `as_of`; None when neither is given (read current).

    Raises :class:`~fluss_lake.InvalidConfigError` when both are given and
    :class:`~fluss_lake.LakeSnapshotNotFoundError` for an unknown id or a time before the first snapshot.
    """
    snapshot_id = check_int("snapshot_id", snapshot_id, minimum=None, optional=True, hint="a lake snapshot's id")
    if snapshot_id is not None and as_of is not None:
        raise InvalidConfigError("pass snapshot_id= or as_of=, not both (an id already names one point in time)")
    if snapshot_id is None and as_of is None:
        return None
    chain = lineage(iceberg_table)
    name = ".".join(iceberg_table.name()) if hasattr(iceberg_table, "name") else "the lake table"
    if snapshot_id is not None:
        if not any(s.snapshot_id == snapshot_id for s in chain):
            raise LakeSnapshotNotFoundError(
                f"{name} has no snapshot {snapshot_id} (it never existed, belongs to another table or was expired); "
                "list the table's snapshots with tiering.lake_snapshots()"
            )
        return snapshot_id
    cut = _as_utc_ms(as_of)
    before = [s for s in chain if s.timestamp_ms <= cut]
    if not before:
        first = (
            datetime.fromtimestamp(chain[0].timestamp_ms / 1000, UTC).isoformat() if chain else "never (no snapshot)"
        )
        raise LakeSnapshotNotFoundError(
            f"{name} has no snapshot committed at or before {as_of!s}: its first was committed {first}; "
            "pass a later as_of= or list the snapshots with tiering.lake_snapshots()"
        )
    return int(before[-1].snapshot_id)

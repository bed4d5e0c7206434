"""A lake table's snapshots (Fluss's ``$lake$snapshots``) and pinning a read to one of them.

Every tiering round commits one Iceberg snapshot whose summary carries the tiered end offsets per bucket
(:mod:`tiering.lake_snapshot`); compactions commit snapshots with the same offsets. :func:`lake_snapshots` lists
them (id, commit time, offsets, record counts), oldest first. The lake reads (:func:`~tiering.read_lake`,
:func:`~tiering.read_history`, :func:`~tiering.union_read`) take ``snapshot_id=`` or ``as_of=`` (the latest
snapshot committed at or before a time), as do ``training_set`` and ``state_as_of`` given ``lake=`` (their
``snapshot_ids=`` / ``snapshot_id=`` / ``snapshot_as_of=``), so a backfill read from a pinned snapshot gives the
same rows however many rounds were tiered since (until the snapshot is expired from the table's metadata).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from fluss_lake.exceptions import TableNotExistError
from fluss_lake.metadata.table_path import TablePath
from tiering.lake_snapshot import OFFSETS_PROPERTY, LakeSnapshot
from tiering.snapshot_pins import lineage, pinned_snapshot

if TYPE_CHECKING:
    from tiering.lake import Lake
    from tiering.schema import LakeKind

__all__ = ["SNAPSHOTS_SCHEMA", "lake_snapshots", "pinned_snapshot"]

#: The columns of :func:`lake_snapshots`.
_COLUMNS: dict[str, pl.DataType] = {
    "snapshot_id": pl.Int64(),
    "parent_id": pl.Int64(),
    "committed_at": pl.Datetime("ms", "UTC"),
    "operation": pl.String(),
    "tiered_at": pl.Datetime("ms", "UTC"),
    "total_records": pl.Int64(),
    "added_records": pl.Int64(),
    "deleted_records": pl.Int64(),
    "offsets": pl.List(pl.Struct({"partition": pl.String, "bucket": pl.Int32, "offset": pl.Int64})),
}
SNAPSHOTS_SCHEMA = pl.Schema(_COLUMNS)


def _int(summary: dict[str, str], key: str) -> int | None:
    value = summary.get(key)
    return int(value) if value is not None else None


def lake_snapshots(lake: Lake, path: str | TablePath, *, kind: LakeKind = "log") -> pl.DataFrame:
    """The snapshots of a lake table, oldest first, with the tiering offsets each holds (``$lake$snapshots``).

    `kind` ``"history"`` lists a primary-key table's changelog table (what :func:`~tiering.read_history` reads).
    ``offsets`` are the tiered end offsets per (partition, bucket): the snapshot holds every live record below
    them; a snapshot without its own entry (a compaction, an expiry) holds the offsets of the last one that had.
    ``tiered_at`` is the live clock when that round read the log ends; ``committed_at`` the Iceberg commit time
    (what ``as_of=`` compares). Record counts are Iceberg's summary counts (position deletes not subtracted).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> t = conn.create_table("d.ev", schema={"v": "INT"}, options={"table.datalake.enabled": True})
    >>> lake = tiering.Lake.for_connection(conn)
    >>> for v in (1, 2):
    ...     _ = conn.get_table("d.ev").append([{"v": v}]); _ = tiering.tier_once(conn, lake)
    >>> lake_snapshots(lake, "d.ev").select("total_records", "offsets").to_dicts()  # doctest: +NORMALIZE_WHITESPACE
    [{'total_records': 1, 'offsets': [{'partition': None, 'bucket': 0, 'offset': 1}]},
     {'total_records': 2, 'offsets': [{'partition': None, 'bucket': 0, 'offset': 2}]}]
    """
    table = _load(lake, path, kind)
    rows: dict[str, list[Any]] = {name: [] for name in SNAPSHOTS_SCHEMA}
    progress = LakeSnapshot(None)
    for snapshot in lineage(table):
        summary = dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}
        if OFFSETS_PROPERTY in summary:
            progress = LakeSnapshot.from_summary(snapshot.snapshot_id, summary)
        rows["snapshot_id"].append(snapshot.snapshot_id)
        rows["parent_id"].append(snapshot.parent_snapshot_id)
        rows["committed_at"].append(snapshot.timestamp_ms)
        rows["operation"].append(snapshot.summary.operation.value if snapshot.summary is not None else None)
        rows["tiered_at"].append(progress.tiered_at_ms)
        rows["total_records"].append(_int(summary, "total-records"))
        rows["added_records"].append(_int(summary, "added-records"))
        rows["deleted_records"].append(_int(summary, "added-position-deletes"))
        ordered = sorted(progress.offsets.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))
        rows["offsets"].append([{"partition": p, "bucket": b, "offset": o} for (p, b), o in ordered])
    ms = {"committed_at": pl.Int64, "tiered_at": pl.Int64}
    frame = pl.DataFrame(rows, schema={**SNAPSHOTS_SCHEMA, **ms})
    return frame.with_columns(pl.col(*ms).cast(pl.Datetime("ms")).dt.replace_time_zone("UTC"))


def _load(lake: Lake, path: str | TablePath, kind: LakeKind) -> Any:
    table = lake.load(path, kind)
    if table is None:
        what = "history table" if kind == "history" else "table"
        raise TableNotExistError(f"the lake has no {what} for {TablePath.of(path)}; tier it first (tier_once)")
    return table

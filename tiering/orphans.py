"""Removing orphan files: files in a lake table's folders that no snapshot references (left by killed rounds).

A tiering round writes its data files, delete files and manifests before the catalog commit; a process killed
(or a lake that stopped answering) between the two leaves them behind, referenced by nothing. They never change
a read, but they cost storage. :func:`remove_orphan_files` lists the table's ``data/`` and ``metadata/``
folders, collects every file any snapshot (and any metadata version in the metadata log) references, and
deletes the others that are older than a grace period.

Why this is safe next to running tiering: the listing is taken *before* the references are read (from a
freshly loaded table), so a round that commits in between has its files in the references; a round still in
flight has only written files younger than the grace period (default one hour: far longer than a round), and
those are never touched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from fluss_lake._utils.arguments import check_seconds
from fluss_lake.metadata.table_path import TablePath

__all__ = ["DEFAULT_ORPHAN_GRACE_S", "OrphanReport", "remove_orphan_files"]

DEFAULT_ORPHAN_GRACE_S = 3600.0


class TableLoader(Protocol):
    """What the cleanup needs of a :class:`~tiering.lake.Lake`: its Iceberg tables by path and kind."""

    def load(self, path: str | TablePath, kind: Any = "log") -> Any: ...


@dataclass(frozen=True, slots=True)
class OrphanReport:
    """Files found unreferenced in one lake table's folders."""

    table: str
    removed: tuple[str, ...] = ()  # deleted (or, with dry_run, that would be)
    too_recent: tuple[str, ...] = ()  # unreferenced but younger than the grace period: kept
    referenced: int = 0  # files any snapshot or metadata version references


def remove_orphan_files(
    lake: TableLoader, path: str | TablePath, *, older_than_s: float = DEFAULT_ORPHAN_GRACE_S, dry_run: bool = False
) -> list[OrphanReport]:
    """Delete files of the lake tables of `path` (current state or log, and history) that no snapshot references
    and that are older than `older_than_s` seconds; one report per lake table. `dry_run` only reports.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.ev", schema={"v": "INT"}, options={"table.datalake.enabled": True})
    >>> _ = conn.get_table("d.ev").append([{"v": 1}])
    >>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
    >>> [r.removed for r in remove_orphan_files(lake, "d.ev", older_than_s=0)]   # nothing orphaned
    [()]
    """
    older_than_s = check_seconds(
        "older_than_s",
        older_than_s,
        positive=False,
        hint="files younger than it are kept (it protects the files of a round still running)",
    )
    reports = []
    for kind in ("log", "history"):
        table = lake.load(path, kind)
        if table is not None:
            reports.append(_remove(table, older_than_s, dry_run))
    return reports


def _remove(table: Any, older_than_s: float, dry_run: bool) -> OrphanReport:
    from pyarrow.fs import FileSelector, FileType
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = PyArrowFileIO(properties=table.io.properties)  # listing needs pyarrow's filesystems whatever the FileIO
    scheme, netloc, root = PyArrowFileIO.parse_location(table.location().rstrip("/"))
    fs = io.fs_by_scheme(scheme, netloc)
    location = table.location().rstrip("/")
    prefix = location[: len(location) - len(root)]  # "s3://", "file://": listed paths come without it
    now = time.time()
    listed: dict[str, float] = {}
    for folder in ("data", "metadata"):  # 1. list first ...
        for info in fs.get_file_info(FileSelector(f"{root}/{folder}", allow_not_found=True, recursive=True)):
            if info.type == FileType.File:
                listed[prefix + info.path] = info.mtime.timestamp() if info.mtime is not None else now
    table = table.refresh()  # 2. ... then read what the newest metadata references
    referenced = _referenced(table)
    known = {_normal(p) for p in referenced}
    orphans = sorted(p for p in listed if _normal(p) not in known)
    old = [p for p in orphans if now - listed[p] >= older_than_s]
    if not dry_run:
        for location in old:
            table.io.delete(location)
    return OrphanReport(
        ".".join(table.name()), tuple(old), tuple(p for p in orphans if p not in set(old)), len(referenced)
    )


def _referenced(table: Any) -> set[str]:
    """Every file a snapshot or a metadata version of the table names."""
    metadata = table.metadata
    found = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    found.update(s.statistics_path for s in getattr(metadata, "statistics", []) or [])
    for snapshot in metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            found.add(manifest.manifest_path)
            found.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False))
    return found


def _normal(location: str) -> str:
    """A location without its scheme's slashes variations (``file:/x`` and ``file:///x`` are one file)."""
    for scheme in ("file://", "file:"):
        if location.startswith(scheme):
            return location[len(scheme) :].lstrip("/")
    return location.split("://", 1)[-1]

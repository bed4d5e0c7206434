"""Snapshots of a primary-key bucket's state: manifests naming immutable segments plus the next offset to replay.

A snapshot publishes the state's segments (a hard link into the store's folder on a local store, an upload to a
remote one; the index file first, so a published segment always has its index) and then a manifest naming
them. A new process restores the newest usable manifest (mapping, or downloading, its segments) and replays
only the log tail after its offset. Old manifests, merged-away segments and files no retained manifest names
(left by crashed writers, after a grace period) are collected.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from fluss_lake.exceptions import CorruptedDataError
from fluss_lake.io.checksum import corrupted, crc32c, dumps_json, loads_json
from fluss_lake.io.files import fsync_file, unlink_quietly
from fluss_lake.io.store import ObjectStore
from fluss_lake.kv.kv_store import KvStore
from fluss_lake.kv.segment import (
    INDEX_SUFFIX,
    Segment,
    SegmentIndex,
    index_path,
    remove_segment_file,
    save_index,
    segment_bytes,
)

__all__ = ["KvSnapshots", "StateCheck", "newest_snapshot_offset", "verify_snapshots"]

_SNAPSHOT_SUFFIX = ".json"
_SNAPSHOT_INTERVAL_SECONDS = 600
_ORPHAN_GRACE_SECONDS = 600


class KvSnapshots:
    """The snapshots of one bucket's state under ``<kv prefix>/snapshots`` and the segments they name."""

    def __init__(self, store: ObjectStore, kv_prefix: str) -> None:
        self.store = store
        self.kv_prefix = kv_prefix
        # On a local store the published segments live in a folder of the store and are mapped from there directly.
        self.shared_dir = store.local_path(f"{kv_prefix}/segments")
        self._retired_remote: set[str] = set()  # merged-away segments on a remote store, deleted once unreferenced
        self._last_time: float | None = None  # monotonic time of the last snapshot (or of the first due() check)
        self._unusable: set[str] = set()  # manifests restore skipped for a damaged or missing segment

    def restore(
        self, kv: KvStore, *, replayable_from: Callable[[], int], required: bool = False
    ) -> tuple[int | None, list[CorruptedDataError]]:
        """Install the segments of the newest usable manifest in `kv`; returns its offset (None: no snapshot) and
        the damage met on the way (damaged manifests or segments, skipped).

        A manifest, and every segment it names, is checked (checksums, and each segment against the checksum the
        manifest recorded for it). After damage, an older snapshot is used only if the log still holds every
        offset from its offset on (`replayable_from`: the earliest retained offset), so replaying the log tail
        rebuilds the same state; otherwise None is returned with the damage and the caller rebuilds from the log
        or raises.
        """
        folder = f"{self.kv_prefix}/snapshots"
        names = sorted(n for n in self.store.list(folder) if n.endswith(_SNAPSHOT_SUFFIX))
        damage: list[CorruptedDataError] = []
        for name in reversed(names):
            key = f"{folder}/{name}"
            try:
                manifest = loads_json(self.store.get(key), key=key, required=required, what="snapshot manifest")
                offset, listed = int(manifest["offset"]), [str(n) for n in manifest["segments"]]
                checksums = {str(k): int(v) for k, v in (manifest.get("checksums") or {}).items()}
            except FileNotFoundError:
                continue  # collected meanwhile by a newer snapshot
            except CorruptedDataError as exc:
                damage.append(exc)
                continue
            except (KeyError, ValueError, TypeError) as exc:
                damage.append(corrupted(key, f"it lacks its offset or segments ({exc})", what="snapshot manifest"))
                continue
            named = _named_offset(name)
            if named is not None and named != offset:  # its name orders the snapshots: a mismatch is a swap
                damage.append(
                    corrupted(
                        key,
                        f"it holds the snapshot of offset {offset}, not {named} (manifests swapped or renamed)",
                        what="snapshot manifest",
                    )
                )
                continue
            if damage and offset < replayable_from():
                break  # older snapshots need log offsets that are gone
            segments, missing = [], ""
            try:
                for seg in listed:
                    missing = f"{self.kv_prefix}/segments/{seg}"
                    segments.append(self._open_segment(seg, kv.directory, checksums.get(seg), required))
            except CorruptedDataError as exc:
                damage.append(exc)
                self._unusable.add(key)
                continue
            except FileNotFoundError:
                if not self.store.exists(key):
                    continue  # the manifest was collected while we read it: its segments may go too
                damage.append(  # named by its key: a remote store's error names no file
                    corrupted(key, f"it names a segment that is missing ({missing})", what="snapshot")
                )
                self._unusable.add(key)
                continue
            kv.adopt(segments)
            return offset, damage
        return None, damage

    def discard(self, damage: list[CorruptedDataError]) -> None:
        """Delete damaged manifests, and manifests naming damaged segments, once a newer good snapshot replaces them
        (their segments become orphans, collected after the grace period)."""
        keys = {exc.key for exc in damage if exc.key and exc.key.startswith(f"{self.kv_prefix}/snapshots/")}
        for key in sorted(keys | self._unusable):
            self.store.delete(key)
        self._unusable.clear()

    def _open_segment(self, name: str, directory: str, crc: int | None = None, required: bool = False) -> Segment:
        """Map a snapshot segment (downloading it first into the private `directory` from a remote store),
        checking it against the checksum its manifest recorded."""
        key = f"{self.kv_prefix}/segments/{name}"
        if self.shared_dir is not None:
            return Segment.open(os.path.join(self.shared_dir, name), key=key, expected_crc=crc, required=required)
        path = self._download(name, directory, crc)
        try:
            return Segment.open(path, key=key, expected_crc=crc, required=required)
        except CorruptedDataError:  # a damaged copy kept from an earlier run: fetched again, checked again
            remove_segment_file(path)
            return Segment.open(self._download(name, directory, crc), key=key, expected_crc=crc, required=required)

    def _download(self, name: str, directory: str, crc: int | None) -> str:
        """The local copy of a published segment of a remote store (downloaded once, with its index)."""
        path = os.path.join(directory, name)
        if not os.path.exists(path):  # a copy kept in a reused local folder is complete: it is written durably
            os.makedirs(directory, exist_ok=True)
            try:  # its index file first, so a local segment file always has its index (if it was published)
                index: bytes | None = self.store.get(f"{self.kv_prefix}/segments/{name}{INDEX_SUFFIX}")
            except FileNotFoundError:
                index = None
            if index is not None:
                _write_local(index_path(path), index)
            _write_local(path, self.store.get(f"{self.kv_prefix}/segments/{name}"))
            if index is None:  # published without one: built here, once
                save_index(path, crc=crc, fsync=True)
        return path

    def due(self) -> bool:
        """Time-based trigger (Fluss's ``kv.snapshot.interval``, here 10 minutes since the last snapshot)."""
        now = time.monotonic()
        if self._last_time is None:
            self._last_time = now
        return now - self._last_time >= _SNAPSHOT_INTERVAL_SECONDS

    def publish(self, kv: KvStore, *, offset: int, schema_id: int, writer_id: str) -> None:
        """Publish the segments of `kv` (its memtable flushed first) and a manifest naming them at `offset`."""
        kv.flush_memtable()  # a snapshot names files only
        names = []
        checksums = {}
        for segment in kv.segments:
            crc = self._publish(segment)
            names.append(segment.name)
            if crc is not None:
                checksums[segment.name] = crc
        manifest = {
            "offset": offset,
            "segments": names,
            "checksums": checksums,
            "schema_id": schema_id,
            "writer_id": writer_id,
            "created_ms": int(time.time() * 1000),
        }
        name = f"{offset:020d}-{manifest['created_ms']:013d}-{uuid.uuid4().hex[:8]}{_SNAPSHOT_SUFFIX}"
        self.store.put_if_absent(f"{self.kv_prefix}/snapshots/{name}", dumps_json(manifest))
        self._last_time = time.monotonic()

    def _publish(self, segment: Segment) -> int | None:
        """Make a segment readable by other processes under its name (segments are immutable, names unique);
        returns the checksum of the published bytes (None: written before checksums)."""
        published = segment.crc
        if self.shared_dir is None:
            key = f"{self.kv_prefix}/segments/{segment.name}"
            if not self.store.exists(key):
                index = _file_bytes(index_path(segment.path)) if segment.path is not None else None
                if index is not None:  # the index first: a published segment has its index object
                    self.store.put_if_absent(f"{key}{INDEX_SUFFIX}", index)
                data = _segment_bytes(segment)
                published = _trailer_crc(data)
                self.store.put_if_absent(key, data)
            return published
        target = os.path.join(self.shared_dir, segment.name)
        if os.path.exists(target):
            return published
        os.makedirs(self.shared_dir, exist_ok=True)
        assert segment.path is not None, "a flushed segment has a file"
        index_file = index_path(segment.path)
        if os.path.exists(index_file):  # the index first: a published segment has its index file (if it has one)
            _link_published(self.shared_dir, index_file, index_path(target), lambda: _file_bytes(index_file))

        def rewritten() -> bytes:
            nonlocal published
            data = _segment_bytes(segment)
            published = _trailer_crc(data)
            return data

        _link_published(self.shared_dir, segment.path, target, rewritten)
        return published

    def collect(self, kv: KvStore, *, retained: int) -> None:
        """Drop old manifests, retired private segments, and published segments no retained manifest names."""
        prefix = f"{self.kv_prefix}/snapshots"
        names = sorted(n for n in self.store.list(prefix) if n.endswith(_SNAPSHOT_SUFFIX))
        for old in names[:-retained]:
            self.store.delete(f"{prefix}/{old}")
        referenced: set[str] = {s.name for s in kv.segments}
        for name in names[-retained:]:
            key = f"{prefix}/{name}"
            with contextlib.suppress(FileNotFoundError, CorruptedDataError, KeyError):
                referenced.update(loads_json(self.store.get(key), key=key, what="snapshot manifest")["segments"])
        for segment in kv.retired:
            if segment.path is not None and os.path.dirname(segment.path) == kv.directory:  # private copy
                remove_segment_file(segment.path)
            if self.shared_dir is None:
                self._retired_remote.add(segment.name)
        kv.retired = []
        for name in sorted(self._retired_remote - referenced):  # a retained snapshot may still name the others
            self.store.delete(f"{self.kv_prefix}/segments/{name}")
            self.store.delete(f"{self.kv_prefix}/segments/{name}{INDEX_SUFFIX}")
        self._retired_remote &= referenced
        if self.shared_dir is not None:
            for path in _orphans(self.shared_dir, referenced, time.time()):
                unlink_quietly(path)


def _named_offset(name: str) -> int | None:
    """The offset a manifest's name gives (``<offset:020d>-<created ms>-<id>.json``; None for other names)."""
    head = name.split("-", 1)[0]
    return int(head) if len(head) == 20 and head.isdigit() and "-" in name else None


def _write_local(path: str, data: bytes) -> None:
    """Write a downloaded file completely and durably, then give it its name (a power loss leaves it whole or
    absent, never a torn file under the final name)."""
    tmp = f"{path}.part"
    with open(tmp, "wb") as handle:
        handle.write(data)
    fsync_file(tmp)
    os.replace(tmp, path)


def _link_published(directory: str, source: str, target: str, data: Callable[[], bytes | None]) -> None:
    """Publish a private file under `target` in the shared folder: a hard link (same file system: no copy; else
    the bytes `data` gives, skipped when None) under a temp name, fsynced, then linked to its final name."""
    tmp = os.path.join(directory, f".tmp-{os.path.basename(target)}")
    try:
        os.link(source, tmp)
    except OSError:
        content = data()
        if content is None:
            return
        with open(tmp, "wb") as handle:
            handle.write(content)
    fsync_file(tmp)  # a manifest (fsynced) must never name a file a power loss could truncate
    os.utime(tmp)  # published now: the orphan grace period counts from here
    try:
        os.link(tmp, target)
    except FileExistsError:
        pass
    finally:
        unlink_quietly(tmp)


def _trailer_crc(data: bytes) -> int:
    """The checksum of a segment's bytes (recorded by the manifest that names it)."""
    return crc32c(data)


def _file_bytes(path: str) -> bytes | None:
    """A file's bytes, None if it is gone."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _segment_bytes(segment: Segment) -> bytes:
    """A segment's file bytes, rewritten from its mapping if the file is gone."""
    try:
        if segment.path is None:
            raise FileNotFoundError("an in-memory segment has no file")
        with open(segment.path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return segment_bytes(segment.table)


_ORPHAN_GRACE_SECONDS = 600


def _orphans(directory: str, referenced: set[str], now: float) -> list[str]:
    """Segment files no retained snapshot or live state names, untouched for the grace period.

    Such files are left by writers that crashed or by processes whose segments were merged away; a process
    that still maps one keeps its mapping (unlinking a mapped file is safe) and rewrites it if it must
    snapshot it.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    old = []
    for name in names:
        base = name.removesuffix(INDEX_SUFFIX)  # an index file lives as long as its segment
        if base in referenced or not (name.startswith("seg-") or name.startswith(".tmp-seg-")):
            continue
        path = os.path.join(directory, name)
        try:
            if now - os.path.getmtime(path) > _ORPHAN_GRACE_SECONDS:
                old.append(path)
        except FileNotFoundError:
            pass
    return old


@dataclass(frozen=True, slots=True)
class StateCheck:
    """What :meth:`KvSnapshots.verify` found in one bucket's published state: objects read, objects without
    checksums, and the damage (manifests, the segments and index files they name)."""

    checked: int
    unverified: int
    damage: tuple[CorruptedDataError, ...]


def verify_snapshots(snapshots: KvSnapshots, *, required: bool) -> StateCheck:
    """Check every retained manifest of a bucket and every segment and index file it names, as stored now."""
    store, prefix = snapshots.store, snapshots.kv_prefix
    folder = f"{prefix}/snapshots"
    damage: list[CorruptedDataError] = []
    checked = unverified = 0
    seen: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="fluss-lake-check-") as scratch:
        for name in sorted(n for n in store.list(folder) if n.endswith(_SNAPSHOT_SUFFIX)):
            key = f"{folder}/{name}"
            checked += 1
            try:
                body = store.get(key)
                unverified += not body.startswith(b'{"_crc32c"')
                manifest = loads_json(body, key=key, required=required, what="snapshot manifest")
                listed = [str(n) for n in manifest["segments"]]
                checksums = {str(k): int(v) for k, v in (manifest.get("checksums") or {}).items()}
                int(manifest["offset"])
            except FileNotFoundError:
                continue
            except CorruptedDataError as exc:
                damage.append(exc)
                continue
            except (KeyError, ValueError, TypeError) as exc:
                damage.append(corrupted(key, f"it lacks its offset or segments ({exc})", what="snapshot manifest"))
                continue
            for segment_name in listed:
                if segment_name in seen:
                    continue
                seen.add(segment_name)
                checked += 1
                segment_key = f"{prefix}/segments/{segment_name}"
                try:
                    path = store.local_path(segment_key)
                    if path is None:  # a remote store: checked on a scratch copy
                        path = os.path.join(scratch, segment_name)
                        _write_local(path, store.get(segment_key))
                        with contextlib.suppress(FileNotFoundError):
                            _write_local(index_path(path), store.get(f"{segment_key}{INDEX_SUFFIX}"))
                    crc = checksums.get(segment_name)
                    unverified += crc is None
                    segment = Segment.open(path, key=segment_key, expected_crc=crc, required=required)
                    if os.path.exists(index_path(path)):
                        checked += 1
                        try:
                            SegmentIndex.open(
                                index_path(path), segment.rows, segment_crc=segment.crc, key=segment_key + INDEX_SUFFIX
                            )
                        except CorruptedDataError as exc:
                            damage.append(exc)
                except FileNotFoundError:
                    if store.exists(key):
                        damage.append(
                            corrupted(segment_key, f"snapshot {name} names it but it is missing", what="KV segment")
                        )
                except CorruptedDataError as exc:
                    damage.append(exc)
    return StateCheck(checked, unverified, tuple(damage))


def newest_snapshot_offset(store: ObjectStore, kv_prefix: str) -> int | None:
    """The offset the newest state snapshot of a bucket covers up to, from the manifests' names (one listing, no
    read): a log ending before it lost its newest batches."""
    offsets = [
        int(name.split("-", 1)[0])
        for name in store.list(f"{kv_prefix}/snapshots")
        if name.endswith(_SNAPSHOT_SUFFIX) and name.split("-", 1)[0].isdigit()
    ]
    return max(offsets, default=None)

"""Snapshots of a primary-key bucket's state: manifests naming immutable segments plus the next offset to replay.

A snapshot publishes the state's segments (a hard link into the store's folder on a local store, an upload to a
remote one; the index file first, so a published segment always has its index) and then a manifest naming
them. A new process restores the newest usable manifest (mapping, or downloading, its segments) and replays
only the log tail after its offset. Old manifests, merged-away segments and files no retained manifest names
(left by crashed writers, after a grace period) are collected.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable

import pyarrow as pa

from fluss_lake.io.files import fsync_file, unlink_quietly
from fluss_lake.io.store import ObjectStore
from fluss_lake.kv.kv_store import KvStore
from fluss_lake.kv.segment import INDEX_SUFFIX, Segment, index_path, remove_segment_file, save_index

__all__ = ["KvSnapshots"]

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

    def restore(self, kv: KvStore) -> int | None:
        """Install the segments of the newest usable manifest in `kv`; returns its offset (None: no snapshot)."""
        names = sorted(n for n in self.store.list(f"{self.kv_prefix}/snapshots") if n.endswith(_SNAPSHOT_SUFFIX))
        for name in reversed(names):
            try:
                manifest = json.loads(self.store.get(f"{self.kv_prefix}/snapshots/{name}"))
                segments = [self._open_segment(seg, kv.directory) for seg in manifest["segments"]]
            except (FileNotFoundError, pa.ArrowInvalid, ValueError, KeyError):
                continue  # a segment was collected meanwhile or is damaged: try the previous snapshot
            kv.adopt(segments)
            return int(manifest["offset"])
        return None

    def _open_segment(self, name: str, directory: str) -> Segment:
        """Map a snapshot segment (downloading it first into the private `directory` from a remote store)."""
        if self.shared_dir is not None:
            return Segment.open(os.path.join(self.shared_dir, name))
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
                save_index(path, fsync=True)
        return Segment.open(path)

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
        for segment in kv.segments:
            self._publish(segment)
            names.append(segment.name)
        manifest = {
            "offset": offset,
            "segments": names,
            "schema_id": schema_id,
            "writer_id": writer_id,
            "created_ms": int(time.time() * 1000),
        }
        name = f"{offset:020d}-{manifest['created_ms']:013d}-{uuid.uuid4().hex[:8]}{_SNAPSHOT_SUFFIX}"
        self.store.put_if_absent(f"{self.kv_prefix}/snapshots/{name}", json.dumps(manifest).encode())
        self._last_time = time.monotonic()

    def _publish(self, segment: Segment) -> None:
        """Make a segment readable by other processes under its name (segments are immutable, names unique)."""
        if self.shared_dir is None:
            key = f"{self.kv_prefix}/segments/{segment.name}"
            if not self.store.exists(key):
                index = _file_bytes(index_path(segment.path)) if segment.path is not None else None
                if index is not None:  # the index first: a published segment has its index object
                    self.store.put_if_absent(f"{key}{INDEX_SUFFIX}", index)
                self.store.put_if_absent(key, _segment_bytes(segment))
            return
        target = os.path.join(self.shared_dir, segment.name)
        if os.path.exists(target):
            return
        os.makedirs(self.shared_dir, exist_ok=True)
        assert segment.path is not None, "a flushed segment has a file"
        index_file = index_path(segment.path)
        if os.path.exists(index_file):  # the index first: a published segment has its index file (if it has one)
            _link_published(self.shared_dir, index_file, index_path(target), lambda: _file_bytes(index_file))
        _link_published(self.shared_dir, segment.path, target, lambda: _segment_bytes(segment))

    def collect(self, kv: KvStore, *, retained: int) -> None:
        """Drop old manifests, retired private segments, and published segments no retained manifest names."""
        prefix = f"{self.kv_prefix}/snapshots"
        names = sorted(n for n in self.store.list(prefix) if n.endswith(_SNAPSHOT_SUFFIX))
        for old in names[:-retained]:
            self.store.delete(f"{prefix}/{old}")
        referenced: set[str] = {s.name for s in kv.segments}
        for name in names[-retained:]:
            with contextlib.suppress(FileNotFoundError):
                referenced.update(json.loads(self.store.get(f"{prefix}/{name}"))["segments"])
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
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, segment.table.schema) as writer:
            writer.write_table(segment.table, max_chunksize=max(segment.rows, 1))
        return sink.getvalue().to_pybytes()


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

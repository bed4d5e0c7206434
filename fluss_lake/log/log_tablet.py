"""A bucket's append-only log: dense offsets, one immutable object per committed batch.

Batch objects are named by their base offset (``00000000000000000042.arrow``) and created with an atomic
create-if-absent, so two writers racing for the same offset cannot both win; the loser catches up and retries.
Finding the end costs one probe per batch committed since the last look, not a listing of the table.

Log compaction (:meth:`LogTablet.compact`) rewrites runs of old small batches as one segment object
(``<base>.<end>.segment``) holding the same batches, headers and offsets, then deletes the originals. It never
touches the newest batch nor batches younger than a grace period, and a process whose view of the log is older
than half that period re-lists before it commits, so no writer can re-create an offset that was compacted away.

Every object is checked once per process before it is used: its checksum (:mod:`fluss_lake.io.checksum`), its
name against the base offset its header holds, and its place in the bucket: each batch must start where the one
before it ends. Damage raises :class:`~fluss_lake.exceptions.CorruptedDataError`; nothing is answered from it.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from fluss_lake.exceptions import CommitConflictError, CorruptedDataError, OffsetOutOfRangeError
from fluss_lake.io.checksum import corrupted, dumps_json, is_sealed, loads_json, unseal
from fluss_lake.io.store import ObjectStore
from fluss_lake.log.log_batch import (
    BatchHeader,
    LogBatch,
    SegmentReader,
    decode_batch,
    decode_header,
    encode_segment,
    project,
)

__all__ = ["LogTablet", "LogCheck", "batch_key", "COMPACTION_GRACE_S"]

_SUFFIX = ".arrow"
_SEGMENT_SUFFIX = ".segment"
_LEASE = "_compaction.lease"
#: Where expiry (``table.log.ttl``) left the start of the log: written before it deletes, so a log that starts later
#: than this record says lost its oldest objects.
_START = "_log_start.json"
#: Bounds of the batches held for a bucket's primary-key state (``LogTablet.hold_from``): small batches only (a
#: large one's decode is a small part of its cost), a few MiB per bucket at most.
_HOLD_BATCH_BYTES = 256 << 10
_HOLD_BYTES = 2 << 20
#: Batches younger than this are never compacted; views older than half of it are re-listed before a commit.
COMPACTION_GRACE_S = 600.0


def batch_key(prefix: str, base_offset: int) -> str:
    """Object key of the batch starting at `base_offset`."""
    return f"{prefix}/{base_offset:020d}{_SUFFIX}"


def segment_key(prefix: str, base_offset: int, end_offset: int) -> str:
    """Object key of a compacted segment holding the batches of ``[base_offset, end_offset)``."""
    return f"{prefix}/{base_offset:020d}.{end_offset:020d}{_SEGMENT_SUFFIX}"


@dataclass(slots=True)
class _Known:
    """What this process knows of the log: batch base offsets in order, end offset, last commit time."""

    bases: list[int]
    end: int
    last_commit_ts: int
    writers: dict[str, BatchHeader]  # latest batch of each writer seen since this process opened the log
    sources: dict[int, tuple[str, int]]  # base offset -> (segment key, index) for batches living in a segment
    seen_at: float = 0.0  # time.monotonic() of the last listing or probe


class LogTablet:
    """The log of one table bucket."""

    def __init__(
        self,
        store: ObjectStore,
        prefix: str,
        bucket: int,
        *,
        grace_s: float = COMPACTION_GRACE_S,
        checksums_required: bool = False,
    ) -> None:
        self.grace_s = grace_s
        #: Every object of this log carries a checksum (tables created by a version that seals them): one without
        #: is damaged, not old.
        self.checksums_required = checksums_required
        self._verified: set[str] = set()  # local objects whose checksum this process has checked
        self._segments: dict[str, SegmentReader] = {}
        self.store = store
        self.bucket = bucket
        self.prefix = prefix
        self._known: _Known | None = None
        self.lock = threading.RLock()  # one Table may be shared by threads
        #: Set by the primary-key state of this bucket to the first offset it has not applied: batches from there
        #: on that another reader (a job reading the changelog) decodes are held, whole, until the state applies
        #: them (:meth:`read` with ``for_state``), so each is decoded once per process. Bounded (_HOLD_*).
        self.hold_from: int | None = None
        self._next_path: tuple[int, str | None] = (-1, None)  # (log end, the local path of its next batch)
        self._held: dict[int, LogBatch] = {}
        self._held_sizes: dict[int, int] = {}  # each held batch's rows' nbytes, counted once (Arrow recounts)
        self._held_bytes = 0

    def _open(self, key: str) -> pa.Buffer:
        """A batch or segment object's body (memory-mapped when local), its checksum checked the first time this
        process reads it (every time for a download: each is a new copy)."""
        path = self.store.local_path(key)
        if path is None:
            return unseal(self.store.get(key), key=key, required=self.checksums_required, what="log object")
        try:
            raw = pa.memory_map(path).read_buffer()
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:  # an empty file cannot be mapped
            if not os.path.exists(path):
                raise FileNotFoundError(path) from exc
            raise corrupted(key, f"it cannot be mapped ({exc})", what="log object") from exc
        verified = key in self._verified
        body = unseal(raw, key=key, required=self.checksums_required, verify=not verified, what="log object")
        if not verified:
            self._verified.add(key)
        return body

    def _segment(self, key: str) -> SegmentReader:
        reader = self._segments.get(key)
        if reader is None:
            reader = self._segments[key] = SegmentReader(self._open(key), key=key)
        return reader

    def _decode_header(self, base: int) -> BatchHeader:
        """The header of the batch object at `base`, which must say it starts there."""
        key = batch_key(self.prefix, base)
        header = decode_header(self._open(key), key=key)
        _check_base(key, header, base)
        return header

    def _probe(self, base: int) -> BatchHeader:
        """The header of a batch found past the known log end. A small batch the bucket's state will apply
        (``hold_from``: the state is open in this process) is decoded whole and held instead, within the bounds of
        held batches: the state, and a job reading the changelog, take it from memory, so the object is opened and
        parsed once in this process instead of once for its header and once for its rows. A process whose open
        state never catches up holds at most the bounds, as with batches a job reads, then probes headers again."""
        if self.hold_from is None or base < self.hold_from or base in self._held:
            return self._decode_header(base)
        key = batch_key(self.prefix, base)
        body = self._open(key)
        # what does not fit the bounds (the compressed size: a floor of the decoded one) gets its header only
        hold = body.size <= _HOLD_BATCH_BYTES and self._held_bytes + body.size <= _HOLD_BYTES
        if hold:
            batch = decode_batch(body, None, key=key)
            header = batch.header
        else:
            header = decode_header(body, key=key)
        _check_base(key, header, base)
        if hold:
            self._hold(base, batch)
        return header

    def _listing(self) -> tuple[list[int], dict[int, tuple[str, int]]]:
        """Batch bases and, for batches that live in compacted segments, where (a batch in a segment wins); a log
        that starts later than expiry left it raises (its oldest objects are gone)."""
        names = self.store.list(self.prefix)
        bases, sources = self._located(names)
        if bases and bases[0] > 0:
            self._check_start(bases[0], _START in names)
        return bases, sources

    def _check_start(self, first: int, recorded: bool) -> None:
        """A log not starting at 0 must have been shortened by expiry, which records where it left the start."""
        key = f"{self.prefix}/{_START}"
        start = None
        if recorded:
            try:
                start = int(loads_json(self.store.get(key), key=key, what="log start record")["start"])
            except FileNotFoundError:
                start = None
            except (KeyError, TypeError, ValueError) as exc:
                raise corrupted(key, f"it is not a log start record ({exc})", what="log start record") from exc
        if start is None and not self.checksums_required:
            return  # a log of an earlier version, which expired without a record
        if start is None or first > start:
            raise corrupted(
                batch_key(self.prefix, start or 0),
                f"the bucket's log starts at offset {first} but "
                + (f"expiry left it starting at {start}" if start is not None else "it was never expired")
                + ": its oldest batches are gone",
                what="log batch",
                offsets=(start or 0, first),
            )

    def _located(self, names: list[str]) -> tuple[list[int], dict[int, tuple[str, int]]]:
        """Batch bases of a listing and the segment holding each batch that lives in one."""
        bases = {int(n[: -len(_SUFFIX)]) for n in names if n.endswith(_SUFFIX)}
        sources: dict[int, tuple[str, int]] = {}
        for name in sorted(n for n in names if n.endswith(_SEGMENT_SUFFIX)):
            key = f"{self.prefix}/{name}"
            try:
                headers = self._segment(key).headers
            except FileNotFoundError:
                continue
            for index, header in enumerate(headers):
                sources.setdefault(header.base_offset, (key, index))
        return sorted(bases | set(sources)), sources

    def _load(self) -> _Known:
        """List the bucket (collecting temp files of killed writers); afterwards only probe forward."""
        self.store.collect_temp(self.prefix, older_than_s=3600)
        self._segments = {}
        bases, sources = self._listing()
        if not bases:
            return _Known([], 0, 0, {}, sources, time.monotonic())
        last = self._header_of(bases[-1], sources)
        return _Known(bases, last.next_offset, last.commit_ts, {last.writer_id: last}, sources, time.monotonic())

    def _header_of(self, base: int, sources: dict[int, tuple[str, int]]) -> BatchHeader:
        held = self._held.get(base)
        if held is not None:
            return held.header
        source = sources.get(base)
        if source is not None:
            return self._segment(source[0]).headers[source[1]]
        return self._decode_header(base)

    def _header(self, base: int) -> BatchHeader:
        """A batch's header wherever it lives (re-listing once if compaction moved it meanwhile)."""
        assert self._known is not None
        try:
            return self._header_of(base, self._known.sources)
        except FileNotFoundError:
            self._relist()
            return self._header_of(base, self._known.sources)

    def _batch(self, base: int, columns: list[str] | None, *, for_state: bool = False) -> LogBatch:
        """A batch's rows wherever it lives (re-listing once if compaction moved it meanwhile); a held batch is
        served from memory (and let go when the state reads it)."""
        assert self._known is not None
        held = self._held.get(base)
        if held is not None:
            if for_state:
                self._release(base)
            return project(held, columns)
        hold = not for_state and self.hold_from is not None and base >= self.hold_from
        for attempt in (0, 1):
            source = self._known.sources.get(base)
            try:
                if source is not None:
                    return self._segment(source[0]).batch(source[1], columns)
                key = batch_key(self.prefix, base)
                batch = decode_batch(self._open(key), None if hold else columns, key=key)
                _check_base(key, batch.header, base)
                if hold:
                    self._hold(base, batch)
                    batch = project(batch, columns)
                return batch
            except FileNotFoundError:
                if attempt:
                    raise
                with self.lock:
                    self._relist()
        raise AssertionError("unreachable")  # pragma: no cover

    def _hold(self, base: int, batch: LogBatch) -> None:
        """Keep a decoded batch for the bucket's state, within the bounds (a batch that does not fit is not kept)."""
        size = batch.rows.nbytes
        with self.lock:
            if size > _HOLD_BATCH_BYTES or self._held_bytes + size > _HOLD_BYTES or base in self._held:
                return
            self._held[base] = batch
            self._held_sizes[base] = size
            self._held_bytes += size

    def _release(self, base: int) -> None:
        with self.lock:
            if self._held.pop(base, None) is not None:
                self._held_bytes -= self._held_sizes.pop(base)

    def release_before(self, offset: int) -> None:
        """The state applied everything before `offset`: let go of held batches it no longer needs."""
        with self.lock:
            self.hold_from = offset
            for base in [b for b in self._held if b < offset]:
                self._release(base)

    def refresh(self) -> int:
        """Catch up with batches other writers committed; returns the log end offset."""
        with self.lock:
            return self._refresh()

    def _refresh(self) -> int:
        if self._known is None or time.monotonic() - self._known.seen_at > self.grace_s / 2:
            previous = self._known
            self._known = self._load()
            if previous is not None:  # keep what we learnt of writers (idempotent retries)
                self._known.writers = {**previous.writers, **self._known.writers}
                if self._known.bases and self._known.end < previous.end:  # a log end never moves back
                    now, lost = self._known.end, previous.bases[-1] if previous.bases else self._known.end
                    self._known = previous  # keep the view that knew more
                    raise corrupted(
                        batch_key(self.prefix, lost),
                        f"the bucket's newest batch is gone (the log ended at {previous.end}, now at {now})",
                        what="log batch",
                        offsets=(now, previous.end),
                    )
        known = self._known
        known.seen_at = time.monotonic()
        while True:
            if self._next_path[0] != known.end:  # the next batch's file, worked out once per log end
                self._next_path = (known.end, self.store.local_path(batch_key(self.prefix, known.end)))
            local = self._next_path[1]
            if local is not None and not os.path.exists(local):  # the common case, without an exception
                return known.end
            try:
                header = self._probe(known.end)
            except FileNotFoundError:
                return known.end
            known.bases.append(known.end)
            known.end = header.next_offset
            known.last_commit_ts = max(known.last_commit_ts, header.commit_ts)
            known.writers[header.writer_id] = header

    @property
    def end_offset(self) -> int:
        """Log end offset as last seen (call :meth:`refresh` for a fresh value)."""
        return self.refresh() if self._known is None else self._known.end

    @property
    def earliest_offset(self) -> int:
        """The first retained offset (re-listed if another process expired the batches we knew)."""
        with self.lock:
            self.refresh()
            assert self._known is not None
            if self._known.bases and not self._exists(self._known.bases[0]):
                self._relist()
            return self._known.bases[0] if self._known.bases else self._known.end

    def _exists(self, base: int) -> bool:
        assert self._known is not None
        source = self._known.sources.get(base)
        return self.store.exists(source[0] if source is not None else batch_key(self.prefix, base))

    def _relist(self) -> None:
        """Re-read where batches live: forget expired ones, follow compacted ones into their segments."""
        assert self._known is not None
        bases, sources = self._listing()
        present = set(bases)
        known = self._known.bases
        if present and known and known[-1] not in present and not any(b > known[-1] for b in present):
            # expiry and compaction never remove a bucket's newest batch: its loss shortens the log silently
            raise corrupted(
                batch_key(self.prefix, known[-1]),
                f"the bucket's newest batch is gone (the log ended at {self._known.end})",
                what="log batch",
                offsets=(known[-1], self._known.end),
            )
        self._known.bases = [b for b in known if b in present]
        self._known.sources = sources
        names = {batch_key(self.prefix, b) for b in present} | {key for key, _ in sources.values()}
        self._verified &= names

    def expire(self, cutoff_ms: int, *, covered_until: int | None = None) -> int:
        """Delete whole batches committed before `cutoff_ms` (``table.log.ttl``); returns the earliest offset.

        The newest batch always stays (it tells where the log ends). With `covered_until` (primary-key tables:
        the offset a state snapshot replays from) a batch is kept unless all its records lie before it. No
        delete records are written: expiry only shortens the log.
        """
        with self.lock:
            self.refresh()
            assert self._known is not None
            self._relist()
            bases, sources = self._known.bases, self._known.sources
            removed = 0
            doomed: list[str] = []
            while removed < len(bases) - 1:
                base = bases[removed]
                source = sources.get(base)
                # a segment goes as a whole: all its batches must be expired and followed by a newer batch
                following = removed + 1
                while source and following < len(bases) and sources.get(bases[following], (None,))[0] == source[0]:
                    following += 1
                unit = bases[removed:following]
                if following >= len(bases) or (covered_until is not None and bases[following] > covered_until):
                    break
                try:
                    header = self._header(unit[-1])
                except FileNotFoundError:  # expired by another process already
                    removed = following
                    continue
                if header.commit_ts >= cutoff_ms:  # commit times never decrease: the rest is younger
                    break
                doomed.append(source[0] if source else batch_key(self.prefix, base))
                removed = following
            if doomed:  # the new start is recorded first: a log starting later than it lost objects
                self.store.put(f"{self.prefix}/{_START}", dumps_json({"start": bases[removed]}))
                for key in doomed:
                    self.store.delete(key)
            for base in bases[:removed]:
                sources.pop(base, None)
            del bases[:removed]
            return bases[0] if bases else self._known.end

    def next_commit_ts(self, clock_ms: int) -> int:
        """A commit timestamp for the next batch: the clock, never earlier than the previous batch's."""
        assert self._known is not None
        return max(clock_ms, self._known.last_commit_ts)

    def try_append(self, base_offset: int, data: bytes, header: BatchHeader) -> bool:
        """Commit `data` at `base_offset` if nobody else did; False means: refresh and recompute."""
        with self.lock:
            return self._try_append(base_offset, data, header)

    def _try_append(self, base_offset: int, data: bytes, header: BatchHeader) -> bool:
        assert self._known is not None and base_offset == self._known.end
        if not self.store.put_if_absent(batch_key(self.prefix, base_offset), data):
            return False
        self._known.bases.append(base_offset)
        self._known.end = header.next_offset
        self._known.last_commit_ts = max(self._known.last_commit_ts, header.commit_ts)
        self._known.writers[header.writer_id] = header
        return True

    def committed(self, writer_id: str, batch_seq: int) -> BatchHeader | None:
        """The header of this writer's batch `batch_seq` if it is already in the log (after :meth:`refresh`).

        A write whose answer was lost (the storage endpoint went away) may have landed; retrying it with the same
        writer and sequence then finds it here instead of committing it twice.
        """
        assert self._known is not None
        header = self._known.writers.get(writer_id)
        return header if header is not None and batch_seq >= 0 and header.batch_seq >= batch_seq else None

    def append(
        self,
        build: Callable[[int, int], tuple[bytes, BatchHeader]],
        clock: Callable[[], int],
        max_attempts: int = 10_000,
        *,
        writer_id: str = "",
        batch_seq: int = -1,
    ) -> BatchHeader:
        """Commit a batch whose bytes depend only on its base offset and commit time (log tables).

        With a writer id and batch sequence the append is idempotent: a batch already committed is not added again.
        """
        with self.lock:
            return self._append(build, clock, max_attempts, writer_id, batch_seq, CommitConflictError)

    def _append(self, build, clock, max_attempts, writer_id, batch_seq, conflict) -> BatchHeader:  # noqa: ANN001
        """The body of :meth:`append`, under the lock."""
        for _ in range(max_attempts):
            base = self.refresh()
            done = self.committed(writer_id, batch_seq)
            if done is not None:
                return done
            data, header = build(base, self.next_commit_ts(clock()))
            if self.try_append(base, data, header):
                return header
        raise conflict(f"bucket {self.bucket}: lost the race for the log end {max_attempts} times; retry the write")

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """First offset whose batch was committed at or after `timestamp_ms` (the log end if none).

        Commit timestamps never decrease within a bucket, so this is a binary search over batch headers.
        """
        end = self.refresh()
        assert self._known is not None
        bases = list(self._known.bases)
        lo, hi = 0, len(bases)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._header(bases[mid]).commit_ts >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return bases[lo] if lo < len(bases) else end

    def read(
        self,
        start: int,
        end: int | None = None,
        *,
        columns: list[str] | None = None,
        header_filter: Callable[[BatchHeader], bool] | None = None,
        for_state: bool = False,
    ) -> Iterator[LogBatch]:
        """Batches overlapping ``[start, end)`` in offset order (rows before `start` cut off).

        `header_filter` may skip whole batches from their header alone (statistics-based skipping); `for_state`
        is the bucket's primary-key state catching up (it takes the batches held for it, see ``hold_from``).
        """
        stop = self.refresh() if end is None else end
        assert self._known is not None
        bases = list(self._known.bases)
        earliest = bases[0] if bases else self._known.end
        if start < earliest or start > self._known.end:
            raise OffsetOutOfRangeError(
                f"bucket {self.bucket}: offset {start} is outside the retained log "
                f"[{earliest}, {self._known.end}]; start from {earliest} (earliest) or "
                f"{self._known.end} (latest)"
            )
        index = max(bisect.bisect_right(bases, start) - 1, 0)
        expected: int | None = None  # where the next batch must start
        for base in bases[index:]:
            if base >= stop:
                break
            if expected is not None and base != expected:
                self._gap(expected, base)
            try:
                if header_filter is not None:
                    header = self._header(base)
                    _check_base(batch_key(self.prefix, base), header, base)
                    expected = header.next_offset
                    if not header_filter(header):
                        continue
                batch = self._batch(base, columns, for_state=for_state)
            except FileNotFoundError:
                with self.lock:
                    self._relist()
                    if self._known.bases and base > self._known.bases[0]:  # not expiry: that starts at the front
                        self._gap(base, next((b for b in self._known.bases if b > base), self._known.end))
                raise OffsetOutOfRangeError(
                    f"bucket {self.bucket}: offsets from {base} expired (table.log.ttl) "
                    f"while reading; start again from {self.earliest_offset} (earliest)"
                ) from None
            expected = batch.header.next_offset
            if base < start or base + batch.rows.num_rows > stop:
                lo = max(start - base, 0)
                hi = min(stop - base, batch.rows.num_rows)
                batch = LogBatch(batch.header, batch.rows.slice(lo, max(hi - lo, 0)))
            yield batch

    def _gap(self, start: int, end: int) -> None:
        """Raise for offsets ``[start, end)`` missing in the middle of the bucket (a deleted or lost object)."""
        raise corrupted(
            batch_key(self.prefix, start),
            f"offsets [{start}, {end}) are missing in the middle of the bucket: the batch object that held them is "
            "gone or the next batch does not start where this one ends",
            what="log batch",
            offsets=(start, end),
        )

    # ------------------------------------------------------------ compaction
    def compact(
        self,
        *,
        now_ms: int,
        grace_ms: int | None = None,
        target_rows: int = 1_000_000,
        target_bytes: int = 64 << 20,
        compression: str | None = "zstd",
    ) -> int:
        """Merge runs of consecutive small batches into segment objects without changing any offset.

        Only batches committed before ``now_ms - grace_ms`` qualify, never the newest batch, and only runs of batches
        with the same columns. One compaction per bucket at a time (a lease object; a lease older than the grace
        period is taken over). Returns how many batches were moved into segments.
        """
        grace = int(self.grace_s * 1000) if grace_ms is None else grace_ms
        lease = f"{self.prefix}/{_LEASE}"
        body = json.dumps({"ms": now_ms}).encode()
        if not self.store.put_if_absent(lease, body):
            try:
                taken = json.loads(self.store.get(lease))["ms"]
            except (FileNotFoundError, ValueError, KeyError):
                taken = None
            if taken is not None and now_ms - taken < max(grace, 1):
                return 0  # another process is compacting this bucket
            self.store.delete(lease)
            if not self.store.put_if_absent(lease, body):
                return 0
        try:
            with self.lock:
                return self._compact(now_ms - grace, target_rows, target_bytes, compression)
        finally:
            self.store.delete(lease)

    def _compact(self, cutoff_ms: int, target_rows: int, target_bytes: int, compression: str | None) -> int:
        self.refresh()
        self._relist()
        assert self._known is not None
        known = self._known
        runs: list[list[tuple[int, BatchHeader, int]]] = []
        run: list[tuple[int, BatchHeader, int]] = []
        rows = size = 0
        columns = None
        for base in known.bases[:-1]:  # never the newest batch: it tells where the log ends
            if base in known.sources:
                runs.append(run)
                run, rows, size, columns = [], 0, 0, None
                continue
            key = batch_key(self.prefix, base)
            try:
                header = self._decode_header(base)
                local = self.store.local_path(key)
                nbytes = os.path.getsize(local) if local is not None else 0
                names = pa.ipc.open_file(self._open(key)).schema.names
            except FileNotFoundError:
                continue
            if header.commit_ts >= cutoff_ms:
                break
            if run and (
                names != columns
                or base != run[-1][1].next_offset  # never across a gap: it stays visible to readers
                or rows + header.record_count > target_rows
                or size + nbytes > target_bytes
            ):
                runs.append(run)
                run, rows, size = [], 0, 0
            run.append((base, header, nbytes))
            rows += header.record_count
            size += nbytes
            columns = names
        runs.append(run)
        moved = 0
        for run in runs:
            if len(run) < 2:
                continue
            keys = [batch_key(self.prefix, base) for base, _, _ in run]
            try:
                data, headers = encode_segment([self._open(k) for k in keys], compression=compression, keys=keys)
            except FileNotFoundError:  # expired meanwhile
                continue
            key = segment_key(self.prefix, run[0][0], run[-1][1].next_offset)
            self.store.put_if_absent(key, data)
            for index, header in enumerate(headers):
                known.sources[header.base_offset] = (key, index)
            for old in keys:
                self.store.delete(old)
            moved += len(run)
        return moved

    # ------------------------------------------------------------ verification and repair
    def verify(self) -> LogCheck:
        """Check every object of the bucket as stored now (checksums, decoding, names, continuity), ignoring what
        this process verified before; nothing is changed. See :class:`LogCheck`."""
        names = self.store.list(self.prefix)
        spans: list[tuple[int, int, str]] = []  # (base, next offset, key) of every batch found
        damage: list[CorruptedDataError] = []
        unverified = checked = 0
        for name in sorted(n for n in names if n.endswith(_SEGMENT_SUFFIX)):
            key = f"{self.prefix}/{name}"
            checked += 1
            try:
                raw = self._fetch(key)
                unverified += not is_sealed(raw)
                reader = SegmentReader(unseal(raw, key=key, required=self.checksums_required), key=key)
                for index, header in enumerate(reader.headers):
                    reader.batch(index)
                    spans.append((header.base_offset, header.next_offset, key))
            except FileNotFoundError:
                continue  # expired or compacted meanwhile
            except CorruptedDataError as exc:
                damage.append(exc)
        in_segments = {base for base, _, _ in spans}
        for base in sorted(int(n[: -len(_SUFFIX)]) for n in names if n.endswith(_SUFFIX)):
            key = batch_key(self.prefix, base)
            checked += 1
            try:
                raw = self._fetch(key)
                unverified += not is_sealed(raw)
                batch = decode_batch(unseal(raw, key=key, required=self.checksums_required), key=key)
                _check_base(key, batch.header, base)
                if base not in in_segments:  # a batch already copied into a segment is deleted right after
                    spans.append((base, batch.header.next_offset, key))
            except FileNotFoundError:
                continue
            except CorruptedDataError as exc:
                damage.append(exc)
                spans.append((base, -1, key))  # its end is unknown: the next batch's base tells
        spans.sort()
        if spans and spans[0][0] > 0:
            try:
                self._check_start(spans[0][0], _START in names)
            except CorruptedDataError as exc:
                damage.append(exc)
        for (base, end, _), (next_base, _, next_key) in itertools.pairwise(spans):
            if end >= 0 and next_base != end and next_base != base:
                damage.append(
                    corrupted(
                        batch_key(self.prefix, end) if next_base > end else next_key,
                        f"the batch ending at {end} is followed by one starting at {next_base}"
                        + (" (offsets missing)" if next_base > end else " (batches overlap)"),
                        what="log batch",
                        offsets=(min(end, next_base), max(end, next_base)),
                    )
                )
        return LogCheck(self.bucket, checked, unverified, tuple(damage), tuple((b, e, k) for b, e, k in spans))

    def _fetch(self, key: str) -> pa.Buffer | bytes:
        """An object's whole stored bytes (mapped when local)."""
        path = self.store.local_path(key)
        if path is None:
            return self.store.get(key)
        if os.path.getsize(path) == 0:
            return b""
        return pa.memory_map(path).read_buffer()

    def restore_batch(self, base: int, data: bytes) -> str:
        """Put a batch rebuilt from elsewhere (the lake's history) in place of a damaged or missing object; `data`
        is an encoded batch (:func:`~fluss_lake.log.log_batch.encode_batch`) that must start at `base` and end where
        the next stored batch starts. Returns the object key."""
        key = batch_key(self.prefix, base)
        header = decode_header(data, key=key)
        if header.base_offset != base:
            raise ValueError(f"the rebuilt batch starts at {header.base_offset}, not {base}")
        with self.lock:
            self.store.put(key, data)
            self._verified.discard(key)
            if self._known is not None:
                self._known = None  # listed again on next use
        return key


@dataclass(frozen=True, slots=True)
class LogCheck:
    """What :meth:`LogTablet.verify` found in one bucket: objects read, objects without checksums (written before
    checksums existed), the damage, and the offsets ``(base, next offset, object key)`` of every batch found
    (next offset -1 for a batch that cannot be read)."""

    bucket: int
    checked: int
    unverified: int
    damage: tuple[CorruptedDataError, ...]
    spans: tuple[tuple[int, int, str], ...]


def _check_base(key: str, header: BatchHeader, base: int) -> None:
    """A batch object holds the batch its name says: another base offset means objects were swapped or renamed."""
    if header.base_offset != base:
        raise corrupted(
            key,
            f"it holds the batch of offset {header.base_offset}, not {base} (objects swapped or renamed)",
            what="log batch",
            offsets=(base, base),
        )

"""A primary-key bucket: merge a write batch against current state, commit its changelog, apply it.

The changelog is committed to the bucket log first (atomic create at the log end); the state is derived
from it. A writer that loses the race for an offset catches up with the winner's changelog and merges again,
so several processes can write one table. State snapshots (a manifest naming immutable segments plus the next
offset to replay, :mod:`fluss_lake.kv.kv_snapshot`) let a new process start from the latest snapshot and replay
only the tail.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from fluss_lake._utils.arrow_pool import pool
from fluss_lake._utils.distinct import distinct, distinct_rows
from fluss_lake._utils.frames import to_arrow as frame_to_arrow
from fluss_lake.exceptions import CommitConflictError, CorruptedDataError
from fluss_lake.io import layout
from fluss_lake.io.store import ObjectStore
from fluss_lake.keys.index_hash import index_hashes
from fluss_lake.kv.auto_increment import AutoIncrementMerger, AutoIncrementSequence
from fluss_lake.kv.kv_snapshot import KvSnapshots
from fluss_lake.kv.kv_store import OFFSET_COLUMN, TS_COLUMN, KvStore
from fluss_lake.kv.merge.row_merger import EMIT_DELETE, EMIT_INSERT, EMIT_NOTHING, EMIT_UPDATE, MergeRound, RowMerger
from fluss_lake.kv.row_gather import take_rows
from fluss_lake.kv.segment import take
from fluss_lake.log.log_batch import CHANGE_TYPE_COLUMN, BatchHeader, LogBatch, delete_count, encode_batch
from fluss_lake.log.log_tablet import LogTablet

__all__ = ["KvTablet", "ChangeImage"]

APPEND_ONLY, INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3, 4
_REPLAY_CHUNK_ROWS = 2_000_000
_log = logging.getLogger("fluss_lake.integrity")
#: The final image of every key a batch changed: (index hashes, rows, deleted mask, position of the key's last
#: record in the changelog).
_FinalImage = tuple[np.ndarray, pl.DataFrame | pa.Table, np.ndarray, np.ndarray]


def _locked(method: Callable) -> Callable:
    """Run a tablet method under the bucket's lock (a Table may be shared by threads)."""

    @functools.wraps(method)
    def wrapper(self: KvTablet, *args: object, **kwargs: object) -> object:
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper


@dataclass(frozen=True, slots=True)
class ChangeImage:
    """How changelog records are written: FULL (-U/+U pairs) or WAL (no -U; maybe inserts as +U)."""

    wal: bool = False
    inserts_as_updates: bool = False


class KvTablet:
    """State + changelog of one bucket of a primary-key table."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        table_prefix: str,
        bucket: int,
        schema: pl.Schema,
        schema_id: int,
        primary_key: Sequence[str],
        prefix_key: Sequence[str],
        local_dir: str,
        writer_id: str,
        clock: Callable[[], int],
        compression: str | None,
        compression_level: int | None,
        snapshot_every: int = 1_000_000,
        snapshots_retained: int = 2,
        kv_ttl_ms: int = 0,
        log_grace_s: float = 600.0,
        checksums_required: bool = False,
        auto_increment: AutoIncrementSequence | None = None,
    ) -> None:
        self.store = store
        self.auto_increment = auto_increment  # numbers inserted keys; follows the +I records committed
        self.bucket = bucket
        self.schema = schema
        self.schema_id = schema_id
        self.primary_key = tuple(primary_key)
        self.prefix_key = tuple(prefix_key)
        self.writer_id = writer_id
        self.clock = clock
        self.compression = compression
        self.compression_level = compression_level
        self.snapshot_every = snapshot_every
        self.snapshots_retained = snapshots_retained
        self.checksums_required = checksums_required
        self.log = LogTablet(
            store,
            layout.log_prefix(table_prefix, bucket),
            bucket,
            grace_s=log_grace_s,
            checksums_required=checksums_required,
        )
        self.lock = self.log.lock  # one lock guards the bucket's log view and its state
        self.kv_prefix = layout.kv_prefix(table_prefix, bucket)
        # Working segments are private to this process (local_dir); snapshots publish them to the store. On a
        # local store the published segments live in a folder of the store and are mapped from there directly.
        self._snapshots = KvSnapshots(store, self.kv_prefix)
        self.shared_dir = self._snapshots.shared_dir
        self.kv = KvStore(
            os.path.join(local_dir, f"b{bucket:05d}"),
            schema,
            self.primary_key,
            ttl_ms=kv_ttl_ms,
            clock=clock,
            lock=self.lock,
        )
        self.applied = 0  # next log offset not yet applied to the state
        self.last_snapshot = -1
        self._restore()

    # ------------------------------------------------------------ recovery
    def _restore(self) -> None:
        """Latest snapshot (if any), then replay of the log tail.

        The log is the truth: a damaged snapshot (manifest, segment) is skipped with a warning, and the state is
        rebuilt from an older snapshot or the whole log, then published as a new snapshot. When the log no longer
        holds what the rebuild needs, the damage is raised.
        """
        offset, damage = self._snapshots.restore(
            self.kv, replayable_from=lambda: self.log.earliest_offset, required=self.checksums_required
        )
        for exc in damage:
            _log.warning("%s; the state is rebuilt from the log", exc)
        if offset is not None:
            self.applied = self.last_snapshot = offset
        else:
            self.applied = self.log.earliest_offset
            if self.applied > 0:
                cause = f"the snapshot that did is damaged ({damage[0]})" if damage else "older batches expired"
                raise CorruptedDataError(
                    f"bucket {self.bucket} of {self.log.prefix}: the log starts at offset {self.applied} but no usable "
                    f"state snapshot covers the offsets before it ({cause}); the state cannot be rebuilt. Restore "
                    "the snapshots folder from a backup or recreate the table",
                    key=damage[0].key if damage else self.kv_prefix,
                    bucket=self.bucket,
                    offsets=(0, self.applied),
                )
        self.catch_up()
        if damage:  # repaired: a good snapshot replaces the damaged ones
            self.last_snapshot = -1
            self.snapshot()
            self._snapshots.discard(damage)

    @_locked
    def catch_up(self) -> int:
        """Apply changelog batches committed by anyone since our last look; returns the log end."""
        end = self.log.refresh()
        if end < self.applied:
            raise CorruptedDataError(
                f"bucket {self.bucket} of {self.log.prefix}: the log ends at offset {end} but the state already holds "
                f"changes up to offset {self.applied}: log batches from {end} on are missing (deleted or lost). "
                "Restore them from a backup (or from the lake: `fluss-lake check --repair`)",
                key=self.log.prefix,
                bucket=self.bucket,
                offsets=(end, self.applied),
            )
        if end > self.applied:
            frames: list[pl.DataFrame] = []
            run: list[LogBatch] = []  # consecutive batches with the same columns: converted as one frame
            rows = 0
            for batch in self.log.read(self.applied, end, for_state=True):
                if not batch.rows.num_rows:
                    continue
                if run and not batch.rows.schema.equals(run[0].rows.schema):
                    frames.append(self._changelog_frame(run))
                    run = []
                run.append(batch)
                rows += batch.rows.num_rows
                if rows >= _REPLAY_CHUNK_ROWS:
                    frames.append(self._changelog_frame(run))
                    self._apply_changelog(pl.concat(frames, how="vertical_relaxed"))
                    frames, run, rows = [], [], 0
            if run and not frames and self._apply_arrow(run):
                run = []
            if run:
                frames.append(self._changelog_frame(run))
            if frames:
                self._apply_changelog(pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0])
            self.applied = end
        if self.log.hold_from != self.applied:
            self.log.release_before(self.applied)
        return end

    def _apply_arrow(self, run: Sequence[LogBatch]) -> bool:
        """:meth:`_apply_changelog` of consecutive batches straight from Arrow, when their columns are exactly what
        the Polars path would hand the store (the table's schema as Polars exports it) and the key is integers
        without nulls: no conversion to Polars and back. False (nothing applied) otherwise."""
        table = run[0].rows if len(run) == 1 else pa.concat_tables([b.rows for b in run])
        if self.auto_increment is not None or not table.schema.equals(self._changelog_schema(), check_metadata=True):
            return False
        keys = [table.column(c) for c in self.primary_key]
        if not all(pa.types.is_integer(k.type) and not k.null_count for k in keys):
            return False
        counts = np.fromiter((b.rows.num_rows for b in run), dtype=np.int64, count=len(run))
        bases = np.fromiter((b.header.base_offset for b in run), dtype=np.int64, count=len(run))
        stamps = np.fromiter((b.header.commit_ts for b in run), dtype=np.int64, count=len(run))
        types = table.column(CHANGE_TYPE_COLUMN).to_numpy()
        rows = np.flatnonzero(types != UPDATE_BEFORE)
        if not len(rows):
            return True
        values = [k.to_numpy() for k in keys]
        kept = distinct_rows([v[rows] for v in values], keep="last")
        rows = rows if kept is None else rows[kept]
        names = self.schema.names()
        data = table.select(names)
        data = data if len(rows) == table.num_rows else take(data, rows)
        key_frame = pl.DataFrame([pl.Series(c, v[rows]) for c, v in zip(self.primary_key, values, strict=True)])
        offsets = np.arange(table.num_rows, dtype=np.int64) + np.repeat(bases - (np.cumsum(counts) - counts), counts)
        self.kv.apply(
            index_hashes(key_frame, self.primary_key, self.prefix_key),
            data,
            types[rows] == DELETE,
            np.repeat(stamps, counts)[rows],
            offsets=offsets[rows],
        )
        return True

    def _changelog_schema(self) -> pa.Schema:
        """The Arrow schema of changelog rows written with the current schema, as Polars exports it (cached)."""
        cached = self.__dict__.get("_changelog_arrow")
        if cached is None or cached[0] is not self.schema:
            frame = pl.DataFrame(schema={CHANGE_TYPE_COLUMN: pl.Int8, **dict(self.schema)})
            cached = self.__dict__["_changelog_arrow"] = (self.schema, frame.to_arrow().schema)
        return cached[1]

    def _changelog_frame(self, run: Sequence[LogBatch]) -> pl.DataFrame:
        """Changelog rows of consecutive batches with the same columns, with their commit times and offsets: one
        conversion for the run (a process catching up with many small batches pays it once, not per batch)."""
        table = run[0].rows if len(run) == 1 else pa.concat_tables([b.rows for b in run])
        frame = self._conform(pl.from_arrow(table))  # type: ignore[arg-type]
        counts = np.fromiter((b.rows.num_rows for b in run), dtype=np.int64, count=len(run))
        bases = np.fromiter((b.header.base_offset for b in run), dtype=np.int64, count=len(run))
        stamps = np.fromiter((b.header.commit_ts for b in run), dtype=np.int64, count=len(run))
        starts = np.cumsum(counts) - counts
        offsets = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(bases - starts, counts)
        return pl.DataFrame(  # with_columns without a Polars query (a catch-up of a few rows pays per query)
            [
                *frame.get_columns(),
                pl.Series(TS_COLUMN, np.repeat(stamps, counts), dtype=pl.Int64),
                pl.Series(OFFSET_COLUMN, offsets),
            ]
        )

    def _conform(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Changelog rows with the current schema (columns added later are null)."""
        names = self.schema.names()
        if frame.width == len(names) + 1 and frame.columns == [CHANGE_TYPE_COLUMN, *names]:
            return frame  # written with the current schema: nothing to add or reorder
        missing = [pl.lit(None, dtype).alias(name) for name, dtype in self.schema.items() if name not in frame.columns]
        return frame.with_columns(missing).select(CHANGE_TYPE_COLUMN, *names)

    def _apply_changelog(self, changelog: pl.DataFrame) -> None:
        """Fold changelog rows into the state: last after-image per key wins, -D leaves a tombstone."""
        if self.auto_increment is not None:
            self.auto_increment.observe(changelog)
        image = changelog.get_column(CHANGE_TYPE_COLUMN).to_numpy() != UPDATE_BEFORE
        if not image.any():
            return
        images = changelog if image.all() else changelog[np.flatnonzero(image)]  # gathers, no Polars query
        last = distinct(images, list(self.primary_key), keep="last")
        hashes = index_hashes(last, self.primary_key, self.prefix_key)
        deleted = last.get_column(CHANGE_TYPE_COLUMN).to_numpy() == DELETE
        system = (CHANGE_TYPE_COLUMN, TS_COLUMN, OFFSET_COLUMN)
        self.kv.apply(
            hashes,
            last[[c for c in last.columns if c not in system]],  # drop() without a Polars query
            deleted,
            last.get_column(TS_COLUMN).to_numpy(),
            offsets=last.get_column(OFFSET_COLUMN).to_numpy(),
        )

    @overload
    def scan_state(self, *, lazy: Literal[False] = ...) -> tuple[pl.DataFrame, int]: ...

    @overload
    def scan_state(self, *, lazy: Literal[True]) -> tuple[pl.LazyFrame, int]: ...

    @overload
    def scan_state(self, *, lazy: bool) -> tuple[pl.DataFrame | pl.LazyFrame, int]: ...

    def scan_state(self, *, lazy: bool = False) -> tuple[pl.DataFrame | pl.LazyFrame, int]:
        """The bucket's current rows and the log offset they include, read under the tablet lock after
        :meth:`catch_up` (the changelog committed by anyone so far is applied): the rows hold every change
        before that offset. ``lazy`` gives a LazyFrame over the segments (:meth:`KvStore.scan_lazy`)."""
        with self.lock:
            self.catch_up()
            return (self.kv.scan_lazy() if lazy else self.kv.scan()), self.applied

    # ------------------------------------------------------------ writes

    @_locked
    def write(
        self,
        batch: pl.DataFrame,
        is_delete: np.ndarray,
        merger: RowMerger,
        image: ChangeImage,
        max_attempts: int = 10_000,
        *,
        writer_id: str | None = None,
        batch_seq: int = -1,
        skip_unchanged: bool = False,
    ) -> BatchHeader:
        """Merge `batch` (rows in write order) and commit its changelog; returns the committed batch header.

        With a writer id and batch sequence the write is idempotent: if that batch is already in the log (an
        earlier attempt reached the storage but its answer was lost) it is not merged again. With
        `skip_unchanged`, an update whose new row equals the current row writes no changelog record and leaves
        the state as it is (not on tables with ``table.kv.ttl``, where a write renews the row's time).
        """
        writer_id = writer_id or self.writer_id
        hashes = index_hashes(batch, self.primary_key, self.prefix_key)
        for _ in range(max_attempts):
            base = self.catch_up()
            done = self.log.committed(writer_id, batch_seq)
            if done is not None:
                return done
            attempt = merger if self.auto_increment is None else self.auto_increment.merger(merger)
            changelog, final, order = self._merge(
                batch, hashes, is_delete, attempt, image, skip_unchanged and self.kv.ttl_ms <= 0
            )
            if isinstance(attempt, AutoIncrementMerger):  # values increase with offsets, also across rounds
                changelog, final_rows = attempt.in_offset_order(changelog, final[1])
                final = (final[0], final_rows, final[2], final[3])
            commit_ts = self.log.next_commit_ts(self.clock())
            if isinstance(changelog, pl.DataFrame):
                changelog = frame_to_arrow(changelog)
            header = BatchHeader(
                base,
                len(changelog),
                commit_ts,
                self.schema_id,
                writer_id,
                batch_seq=batch_seq,
                deletes=delete_count(changelog),
            )
            codec, level = self.hot_codec
            data = encode_batch(
                rows=changelog,
                base_offset=base,
                commit_ts=commit_ts,
                schema_id=self.schema_id,
                writer_id=writer_id,
                batch_seq=batch_seq,
                compression=codec,
                compression_level=level,
                deletes=header.deletes,
            )
            if self.log.try_append(base, data, header):
                if self.auto_increment is not None:
                    self.auto_increment.observe(changelog)
                final_hashes, final_rows, final_deleted, positions = final
                self.kv.apply(final_hashes, final_rows, final_deleted, commit_ts, order=order, offsets=base + positions)
                self.applied = header.next_offset
                self.log.release_before(self.applied)
                if self.applied - max(self.last_snapshot, 0) >= self.snapshot_every or self._snapshots.due():
                    self.snapshot()
                return header
        raise CommitConflictError(
            f"bucket {self.bucket}: lost the race for the log end {max_attempts} times; retry the write"
        )

    @property
    def hot_codec(self) -> tuple[str | None, int | None]:
        """Codec of a freshly committed changelog batch.

        A zstd table writes its hot batches with LZ4 (several times cheaper to encode, on the path of every
        write); log compaction rewrites them with the table's zstd codec. Readers need nothing special: the
        codec is recorded in each Arrow IPC buffer. Other codecs (``lz4_frame``, ``none``) are used as set.
        """
        if self.compression == "zstd":
            return "lz4_frame", None
        return self.compression, self.compression_level

    def _merge(
        self,
        batch: pl.DataFrame,
        hashes: np.ndarray,
        is_delete: np.ndarray,
        merger: RowMerger,
        image: ChangeImage,
        skip_unchanged: bool = False,
    ) -> tuple[pl.DataFrame | pa.Table, _FinalImage, np.ndarray | None]:
        """The changelog of a batch (rounds of unique keys merged in write order, see row_merger), the
        final image of every key it changed: (index hashes, rows, deleted mask, position of the key's last record
        in the changelog), and the hash order of that final image when it is known (else None)."""
        order = np.argsort(hashes)  # not a stable sort: its order is used only when the hashes are all distinct
        sorted_hashes = hashes[order]
        # distinct hashes: every key once, one round
        if len(hashes) and not (sorted_hashes[1:] == sorted_hashes[:-1]).any():
            return self._merge_distinct(batch, hashes, order, is_delete, merger, image, skip_unchanged)
        changelog, final = self._merge_rounds(batch, hashes, is_delete, merger, image, skip_unchanged)
        return changelog, final, None

    def _merge_distinct(
        self,
        batch: pl.DataFrame,
        hashes: np.ndarray,
        order: np.ndarray,
        is_delete: np.ndarray,
        merger: RowMerger,
        image: ChangeImage,
        skip_unchanged: bool = False,
    ) -> tuple[pl.DataFrame | pa.Table, _FinalImage, np.ndarray | None]:
        """:meth:`_merge` for a batch whose keys are all distinct (the common case): one merge round, and the
        changelog is gathered in one take (-U of a row right before its +U, rows in batch order)."""
        n = batch.height
        keys = batch[list(self.primary_key)]
        found, current = self.kv.lookup(hashes, keys)
        outcome = merger.merge(MergeRound(current, pl.Series(found), batch, pl.Series(is_delete)))
        emit = outcome.emit.to_numpy()
        if skip_unchanged:
            emit = _without_unchanged(emit, current, outcome.after)
        after_exists = outcome.after_exists.to_numpy()
        before = (emit == EMIT_DELETE) | ((emit == EMIT_UPDATE) & (not image.wal))
        after = (emit == EMIT_INSERT) | (emit == EMIT_UPDATE)
        touched = emit != 0
        after_rows = _with_columns_of(outcome.after, keys)  # keys as written
        counts = before.astype(np.int64) + after
        last = np.cumsum(counts) - 1  # changelog position of each changed row's last record (its final change)
        # The after-images of changed keys are both changelog records and the final image (their key values are
        # the written ones): converted to Arrow once for both, unless the auto-increment merger renumbers them.
        shared = touched.all() and not isinstance(merger, AutoIncrementMerger)
        after_arrow = frame_to_arrow(after_rows) if shared else None
        final_rows: pl.DataFrame | pa.Table
        if touched.all():
            final_rows = after_rows if after_arrow is None else after_arrow
            final = (hashes, final_rows, ~after_exists, last)
            final_order: np.ndarray | None = order
        else:
            changed = np.flatnonzero(touched)
            final = (hashes[changed], after_rows[changed], ~after_exists[changed], last[changed])
            final_order = None
        insert_type = UPDATE_AFTER if image.inserts_as_updates else INSERT
        after_types = np.where(emit == EMIT_INSERT, insert_type, UPDATE_AFTER).astype(np.int8)
        if not before.any():  # inserts only, or WAL: the after-images in batch order
            if after.all() and after_arrow is not None:
                names = [CHANGE_TYPE_COLUMN, *after_arrow.column_names]
                return (
                    pa.table([pa.array(after_types, pa.int8()), *after_arrow.columns], names=names),
                    final,
                    final_order,
                )
            if after.all():
                body = outcome.after
            else:
                body = outcome.after[np.flatnonzero(after)]
                after_types = after_types[after]
            types_column = pl.Series(CHANGE_TYPE_COLUMN, after_types, dtype=pl.Int8)
            return pl.DataFrame([types_column, *body.get_columns()]), final, final_order
        slot = last + 1 - counts  # first changelog position of each batch row
        total = int(counts.sum())
        source = np.empty(total, dtype=np.int64)  # row of concat([current, after]) behind each record
        types = np.empty(total, dtype=np.int8)
        b = np.flatnonzero(before)
        source[slot[b]] = b
        types[slot[b]] = np.where(emit[b] == EMIT_DELETE, DELETE, UPDATE_BEFORE)
        a = np.flatnonzero(after)
        source[slot[a] + before[a]] = n + a
        types[slot[a] + before[a]] = after_types[a]
        # One compiled gather per column over [current rows | after-images] (no concatenated copy first).
        sides = [frame_to_arrow(current), frame_to_arrow(outcome.after) if after_arrow is None else after_arrow]
        side = (source >= n).astype(np.int64)
        row = source - n * side
        names = sides[0].column_names
        columns = [take_rows([t.column(c).combine_chunks(memory_pool=pool()) for t in sides], side, row) for c in names]
        changelog = pa.table([pa.array(types, pa.int8()), *columns], names=[CHANGE_TYPE_COLUMN, *names])
        return changelog, final, final_order

    def _merge_rounds(
        self,
        batch: pl.DataFrame,
        hashes: np.ndarray,
        is_delete: np.ndarray,
        merger: RowMerger,
        image: ChangeImage,
        skip_unchanged: bool = False,
    ) -> tuple[pl.DataFrame, _FinalImage]:
        """:meth:`_merge` for a batch that may touch a key several times: rounds of distinct keys."""
        key_id, first = _key_ids(batch, hashes, self.primary_key)
        occurrence = _occurrence(key_id)
        found, current = self.kv.lookup(hashes[first], batch[first].select(self.primary_key))
        exists = found.copy()
        store = current
        position = np.arange(len(first))
        records: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # store row, type, seq, sub
        touched = np.zeros(len(first), dtype=bool)
        rounds = int(occurrence.max()) + 1 if len(occurrence) else 0
        for r in range(rounds):
            sel = np.flatnonzero(occurrence == r)
            keys = key_id[sel]
            identity = rounds == 1 and len(sel) == store.height  # every key once, in first-seen order
            old_pos = position[keys]
            old = store if identity else store[old_pos]
            outcome = merger.merge(
                MergeRound(old, pl.Series(exists[keys]), batch if identity else batch[sel], pl.Series(is_delete[sel]))
            )
            emit = outcome.emit.to_numpy()
            if skip_unchanged:
                emit = _without_unchanged(emit, old, outcome.after)
            touched[keys] |= emit != 0
            new_pos = store.height + np.arange(len(sel))
            records.append(_records(emit, old_pos, new_pos, sel, image))
            position[keys] = new_pos
            store = pl.concat([store, outcome.after], how="vertical")
            exists[keys] = outcome.after_exists.to_numpy()
        changed = np.flatnonzero(touched)
        keys_of_changed = batch[first[changed]].select(self.primary_key)
        if records:
            rows, types, seq, sub = (np.concatenate(parts) for parts in zip(*records, strict=True))
        else:
            rows = types = seq = sub = np.empty(0, dtype=np.int64)
        order = np.lexsort((sub, seq)) if len(rows) else np.empty(0, dtype=np.int64)
        last = np.full(len(first), -1, dtype=np.int64)  # changelog position of each key's last record
        np.maximum.at(last, key_id[np.asarray(seq, dtype=np.int64)[order]], np.arange(len(order), dtype=np.int64))
        final = (
            hashes[first][changed],
            store[position[changed]].with_columns(keys_of_changed),
            ~exists[changed],
            last[changed],
        )
        if len(rows) == 0:
            return pl.DataFrame(schema={CHANGE_TYPE_COLUMN: pl.Int8, **dict(self.schema)}), final
        changelog = store[rows[order]].select(pl.Series(CHANGE_TYPE_COLUMN, types[order], dtype=pl.Int8), pl.all())
        return changelog, final

    @_locked
    def compact(self) -> None:
        """Full compaction of the state (applies ``table.kv.ttl``); then a snapshot so other processes see it."""
        self.catch_up()
        self.kv.compact_all()
        self.last_snapshot = -1  # force a new manifest even at the same offset
        self.snapshot()

    # ------------------------------------------------------------ snapshots
    @_locked
    def snapshot(self) -> int:
        """Persist the state as a manifest of immutable segments at the applied offset; returns that offset."""
        if self.applied == self.last_snapshot:
            return self.applied
        self._snapshots.publish(self.kv, offset=self.applied, schema_id=self.schema_id, writer_id=self.writer_id)
        self.last_snapshot = self.applied
        self._snapshots.collect(self.kv, retained=self.snapshots_retained)
        return self.applied


def _with_columns_of(frame: pl.DataFrame, replacements: pl.DataFrame) -> pl.DataFrame:
    """`frame` with the columns of `replacements` in their places (``with_columns`` without a Polars query)."""
    replaced = set(replacements.columns)
    return pl.DataFrame([replacements.get_column(s.name) if s.name in replaced else s for s in frame.get_columns()])


def _without_unchanged(emit: np.ndarray, old: pl.DataFrame, after: pl.DataFrame) -> np.ndarray:
    """`emit` with updates whose new row equals the old one (every column, nulls equal) turned into no-ops."""
    update = emit == EMIT_UPDATE
    if not update.any():
        return emit
    same = np.ones(len(emit), dtype=bool)
    for name in after.columns:
        same &= _equal_missing(old.get_column(name), after.get_column(name))
    unchanged = update & same
    return np.where(unchanged, EMIT_NOTHING, emit).astype(emit.dtype) if unchanged.any() else emit


def _equal_missing(left: pl.Series, right: pl.Series) -> np.ndarray:
    """``left.eq_missing(right)`` as a numpy mask; integers and floats compared in numpy (no Polars query), with
    Polars' float equality (NaN equals NaN, -0.0 equals 0.0) and nulls equal only to nulls."""
    dtype = left.dtype
    if dtype != right.dtype:
        return left.eq_missing(right).to_numpy()
    if dtype in _ARROW_EQUAL:  # strings, binaries, booleans, dates: Arrow's kernel, no Polars query
        a, b = _one_chunk(left.to_arrow()), _one_chunk(right.to_arrow())
        same = pc.equal(a, b)
        if a.null_count or b.null_count:  # nulls equal only to nulls
            same = pc.or_(pc.fill_null(same, False), pc.and_(a.is_null(), b.is_null()))
        return same.to_numpy(zero_copy_only=False)
    if not (dtype.is_integer() or dtype.is_float()):
        return left.eq_missing(right).to_numpy()
    (a, a_valid), (b, b_valid) = _numbers(left), _numbers(right)
    same = a == b
    if dtype.is_float():
        same |= np.isnan(a) & np.isnan(b)
    if a_valid is None and b_valid is None:
        return same
    a_valid = np.ones(len(a), dtype=bool) if a_valid is None else a_valid
    b_valid = np.ones(len(b), dtype=bool) if b_valid is None else b_valid
    return (same & a_valid & b_valid) | ~(a_valid | b_valid)


#: Types whose equality Arrow's ``equal`` kernel gives as Polars' does (floats are compared in numpy: NaN).
_ARROW_EQUAL = (pl.String, pl.Binary, pl.Boolean, pl.Date)


def _one_chunk(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _numbers(series: pl.Series) -> tuple[np.ndarray, np.ndarray | None]:
    """A numeric column's values (whatever sits under a null) and validity mask (None: no nulls), from Arrow."""
    if not series.null_count():
        return series.to_numpy(), None
    array = series.to_arrow()
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    values = np.frombuffer(array.buffers()[1], dtype=array.type.to_pandas_dtype())
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    return values[array.offset : array.offset + len(array)], valid


def _key_ids(batch: pl.DataFrame, hashes: np.ndarray, primary_key: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Dense id per distinct key (in first-appearance order) and the batch position of each key's first row."""
    uniq, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    key_id = rank[inverse]
    first_pos = first[order]
    if len(uniq) != batch.height:  # some hashes repeat: make sure they are the same keys, not collisions
        keys = batch.select(primary_key)
        if not keys.equals(keys[first_pos[key_id]]):
            ids = keys.select(pl.struct(primary_key).rank("dense").alias("id")).get_column("id").to_numpy() - 1
            _, first_pos = np.unique(ids, return_index=True)
            order = np.argsort(first_pos, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            return rank[ids], first_pos[order]
    return key_id, first_pos


def _occurrence(key_id: np.ndarray) -> np.ndarray:
    """For each row, how many earlier rows of the batch have the same key (0 for the first)."""
    order = np.argsort(key_id, kind="stable")
    sorted_ids = key_id[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_ids)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(sorted_ids)]))
    occurrence = np.empty_like(key_id)
    occurrence[order] = np.arange(len(key_id)) - run_start
    return occurrence


def _records(
    emit: np.ndarray, old_pos: np.ndarray, new_pos: np.ndarray, seq: np.ndarray, image: ChangeImage
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Changelog records of one round as (store row, change type, batch position, order within it)."""
    before = (emit == EMIT_DELETE) | ((emit == EMIT_UPDATE) & (not image.wal))
    after = (emit == EMIT_INSERT) | (emit == EMIT_UPDATE)
    insert_type = UPDATE_AFTER if image.inserts_as_updates else INSERT
    return (
        np.concatenate([old_pos[before], new_pos[after]]),
        np.concatenate(
            [
                np.where(emit[before] == EMIT_DELETE, DELETE, UPDATE_BEFORE),
                np.where(emit[after] == EMIT_INSERT, insert_type, UPDATE_AFTER),
            ]
        ).astype(np.int8),
        np.concatenate([seq[before], seq[after]]),
        np.concatenate([np.zeros(before.sum(), np.int8), np.ones(after.sum(), np.int8)]),
    )

"""Where each primary key lives in a current-state lake table: ``(data file, position)``, for position deletes.

A tiering round must delete the old row of every key it changes. It reads only the primary-key columns of the
data files of the touched ``(partition, bucket)``s, numbers their rows (the Iceberg position), keeps the
positions of touched keys and drops those already deleted by earlier delete files. Data files and delete files
are immutable, so their key columns and deleted positions (and manifests' entries) are cached by file path in
the :class:`StateIndex` of a :class:`~tiering.Lake` (bounded; least recently used first out): a tiering process
reads the key columns of a file once, and after its first round only the files the previous round added.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table as IcebergTable

__all__ = ["FILE", "POS", "StateIndex", "state_index"]

FILE, POS = "__file", "__pos"
_DEFAULT_MAX_ROWS = 50_000_000
_MAX_MANIFESTS = 4096
_INDEXES: weakref.WeakKeyDictionary[Any, StateIndex] = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


class StateIndex:
    """Cached key columns of data files and positions of delete files (by file path; files never change).

    Examples
    --------
    >>> index = StateIndex(max_rows=1000)
    >>> index.cached_rows
    0
    """

    def __init__(self, *, max_rows: int = _DEFAULT_MAX_ROWS) -> None:
        self.max_rows = max_rows
        self._frames: OrderedDict[tuple[str, tuple[str, ...]], pl.DataFrame] = OrderedDict()
        self._rows = 0
        self._entries: OrderedDict[str, list[Any]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def cached_rows(self) -> int:
        """Rows held in the cache (key rows + deleted positions)."""
        return self._rows

    def _get(self, key: tuple[str, tuple[str, ...]]) -> pl.DataFrame | None:
        with self._lock:
            frame = self._frames.get(key)
            if frame is not None:
                self._frames.move_to_end(key)
            return frame

    def _put(self, key: tuple[str, tuple[str, ...]], frame: pl.DataFrame) -> None:
        with self._lock:
            if key in self._frames:
                return
            self._frames[key] = frame
            self._rows += frame.height
            while self._rows > self.max_rows and len(self._frames) > 1:
                _, old = self._frames.popitem(last=False)
                self._rows -= old.height

    def keys(self, table: IcebergTable, data_files: Sequence[Any], primary_key: Sequence[str]) -> list[pl.DataFrame]:
        """The primary-key columns of each data file, in file order (one frame per file)."""
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan
        from pyiceberg.table import FileScanTask

        pk = tuple(primary_key)
        found = {f.file_path: self._get((f.file_path, pk)) for f in data_files}
        missing = [f for f in data_files if found[f.file_path] is None]
        if missing:  # one ArrowScan over the missing files (parallel reads, field ids resolved), split per file
            scan = ArrowScan(table.metadata, table.io, table.schema().select(*pk), AlwaysTrue())
            whole = pl.from_arrow(scan.to_table([FileScanTask(f) for f in missing]))
            assert isinstance(whole, pl.DataFrame)
            at = 0
            for f in missing:
                frame = whole.slice(at, f.record_count)
                at += f.record_count
                found[f.file_path] = frame
                self._put((f.file_path, pk), frame)
        return [found[f.file_path] for f in data_files]  # type: ignore[misc]

    def deleted(self, io: FileIO, delete_files: Sequence[Any]) -> pl.DataFrame:
        """``file_path, pos`` rows of some position-delete files."""
        frames = []
        for f in delete_files:
            frame = self._get((f.file_path, ()))
            if frame is None:
                from tiering.deletes import read_position_deletes

                read = pl.from_arrow(read_position_deletes(io, f))
                assert isinstance(read, pl.DataFrame)
                frame = read
                self._put((f.file_path, ()), frame)
            frames.append(frame)
        if not frames:
            return pl.DataFrame(schema={"file_path": pl.String, "pos": pl.Int64})
        return pl.concat(frames, how="vertical_relaxed")

    def delete_counts(self, io: FileIO, delete_files: Sequence[Any]) -> pl.DataFrame:
        """``file_path, len``: how many positions each delete file deletes per data file (cached per file)."""
        frames = []
        for f in delete_files:
            counts = self._get((f.file_path, ("#counts",)))
            if counts is None:
                counts = self.deleted(io, [f]).group_by("file_path").len()
                self._put((f.file_path, ("#counts",)), counts)
            frames.append(counts)
        if not frames:
            return pl.DataFrame(schema={"file_path": pl.String, "len": pl.UInt32})
        return pl.concat(frames, how="vertical_relaxed")

    def entries(self, io: FileIO, manifests: Sequence[Any]) -> list[Any]:
        """The live entries of some manifests (read once per manifest file: manifests never change)."""
        from pyiceberg.utils.concurrent import ExecutorFactory

        found = {m.manifest_path: self._entries.get(m.manifest_path) for m in manifests}
        missing = [m for m in manifests if found[m.manifest_path] is None]
        for m, read in zip(
            missing,
            ExecutorFactory.get_or_create().map(lambda m: m.fetch_manifest_entry(io, discard_deleted=True), missing),
            strict=True,
        ):
            found[m.manifest_path] = read
            with self._lock:
                self._entries[m.manifest_path] = read
                while len(self._entries) > _MAX_MANIFESTS:
                    self._entries.popitem(last=False)
        return [e for m in manifests for e in found[m.manifest_path]]  # type: ignore[union-attr]

    def live_positions(
        self, table: IcebergTable, tasks: Sequence[Any], keys: pl.DataFrame, primary_key: Sequence[str]
    ) -> pl.DataFrame:
        """``file_path, pos`` of the live rows (not deleted yet) of `keys` in the data files of `tasks`.

        `keys` holds primary-key columns typed as in the lake. Reads only key columns and delete files.
        """
        empty = pl.DataFrame(schema={"file_path": pl.String, "pos": pl.Int64})
        if not tasks or not keys.height:
            return empty
        files = [t.file for t in tasks]
        frames = self.keys(table, files, primary_key)
        indexed = pl.concat(
            [
                frame.with_columns(
                    pl.lit(i, pl.Int32).alias(FILE), pl.int_range(frame.height, dtype=pl.Int64).alias(POS)
                )
                for i, frame in enumerate(frames)
            ],
            how="vertical_relaxed",
        )
        hits = indexed.join(keys, on=list(primary_key), how="semi", nulls_equal=True).select(FILE, POS)
        if not hits.height:
            return empty
        paths = pl.DataFrame(
            {FILE: pl.Series(range(len(files)), dtype=pl.Int32), "file_path": [f.file_path for f in files]}
        )
        hits = hits.join(paths, on=FILE).select("file_path", pl.col(POS).alias("pos"))
        delete_files = list({d.file_path: d for t in tasks for d in t.delete_files}.values())
        if delete_files:
            hits = hits.join(self.deleted(table.io, delete_files), on=["file_path", "pos"], how="anti")
        return hits


def state_index(lake: Any) -> StateIndex:
    """The index cache of a lake connection (one per :class:`~tiering.Lake` object)."""
    with _INDEXES_LOCK:
        index = _INDEXES.get(lake)
        if index is None:
            index = _INDEXES[lake] = StateIndex()
        return index

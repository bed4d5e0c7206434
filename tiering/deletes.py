"""Merge-on-read for the lake's current-state tables: Iceberg (format v2) position delete files, written by us.

pyiceberg 0.12 reads position deletes (its scan planning matches delete files to data files by partition and
sequence number, and ``ArrowScan`` drops the deleted positions) but writes none: its snapshot producers only write
data manifests. This module adds the missing half:

- :func:`write_position_deletes` writes one position-delete Parquet file per partition (columns ``file_path``
  string, field id 2147483546, and ``pos`` long, field id 2147483545, sorted by ``file_path, pos``; exact
  ``file_path`` bounds, so readers skip it for data files it does not name);
- :class:`RowDelta` is a snapshot producer that adds data files and delete files and removes either kind in ONE
  snapshot (one commit, so the tiering offsets in its summary stay atomic with the changes). It writes a
  ``deletes`` manifest for delete files, rewrites a parent manifest only when it loses an entry, and can fold
  every manifest into one per content and spec (``merge_manifests``, used by compaction).

Sequence numbers do the rest: a delete file applies to data files of its own or an older sequence number, so
deletes written in a round never touch the rows that round adds, and a data file rewritten by compaction is not
affected by older delete files.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import (
    Operation,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.types import LongType, NestedField, StringType

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Transaction

__all__ = [
    "FILE_PATH_FIELD_ID",
    "POSITION_DELETE_SCHEMA",
    "POS_FIELD_ID",
    "RowDelta",
    "is_delete_file",
    "read_position_deletes",
    "write_position_deletes",
]

FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545
#: The Iceberg spec's position-delete schema (pyiceberg's own constant types ``pos`` as int; the spec says long).
POSITION_DELETE_SCHEMA = Schema(
    NestedField(FILE_PATH_FIELD_ID, "file_path", StringType(), required=True),
    NestedField(POS_FIELD_ID, "pos", LongType(), required=True),
)
_ARROW_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_FIELD_ID).encode()}
        ),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_FIELD_ID).encode()}),
    ]
)
# exact bounds on file_path: with lower == upper a reader indexes the file by the one data file it names
_WRITE_PROPERTIES = {"write.metadata.metrics.default": "full", "write.parquet.compression-codec": "zstd"}


def is_delete_file(data_file: DataFile) -> bool:
    """Whether a manifest entry's file is a position-delete file."""
    return data_file.content == DataFileContent.POSITION_DELETES


def write_position_deletes(io: FileIO, spec_id: int, deletes: Iterable[tuple[Any, str, pa.Table]]) -> list[DataFile]:
    """Write one position-delete file per ``(partition record, folder, rows)``; rows hold ``file_path`` + ``pos``.

    The file goes into `folder` (the partition's data folder), its rows sorted by ``file_path, pos`` as the
    spec asks. Returns the DataFiles (``content = POSITION_DELETES``) to add with :class:`RowDelta`.
    """
    from pyiceberg.utils.concurrent import ExecutorFactory

    todo = [(partition, folder, rows) for partition, folder, rows in deletes if rows.num_rows]
    return list(ExecutorFactory.get_or_create().map(lambda job: _write_one(io, spec_id, *job), todo))


def _write_one(io: FileIO, spec_id: int, partition: Any, folder: str, rows: pa.Table) -> DataFile:
    """One position-delete file (see :func:`write_position_deletes`)."""
    from pyiceberg.io.pyarrow import ParquetFormatWriter

    rows = (
        rows.select(["file_path", "pos"])
        .cast(_ARROW_SCHEMA)
        .sort_by([("file_path", "ascending"), ("pos", "ascending")])
    )
    path = f"{folder.rstrip('/')}/{uuid.uuid4()}-deletes.parquet"
    output = io.new_output(path)
    writer = ParquetFormatWriter(output, POSITION_DELETE_SCHEMA, _WRITE_PROPERTIES)
    with writer:
        writer.write(rows)
    stats = writer.result()
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=len(output),
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )
    delete_file.spec_id = spec_id
    return delete_file


def read_position_deletes(io: FileIO, delete_file: DataFile) -> pa.Table:
    """The ``file_path, pos`` rows of a position-delete file."""
    import pyarrow.parquet as pq

    with io.new_input(delete_file.file_path).open() as stream:
        table = pq.read_table(stream, columns=["file_path", "pos"])
    return table.set_column(1, "pos", pc.cast(table.column("pos"), pa.int64()))


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg 0.12 only writes data manifests)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_SnapshotProducer["RowDelta"]):
    """One snapshot that adds and removes data files and position-delete files.

    Use it inside a transaction and commit the transaction (the table's ``commit.retry.num-retries = 0`` makes a
    concurrent commit fail instead of being rebased)::

        with table.transaction() as tx:
            delta = RowDelta(tx, table.io, snapshot_properties=props)
            delta.append_data_file(f); delta.add_delete_file(d); delta.delete_data_file(old)
            delta.commit()
    """

    def __init__(
        self,
        transaction: Transaction,
        io: FileIO,
        *,
        snapshot_properties: dict[str, str],
        merge_manifests: bool = False,
        commit_uuid: uuid.UUID | None = None,
    ) -> None:
        has_parent = transaction.table_metadata.current_snapshot() is not None
        super().__init__(
            operation=Operation.OVERWRITE if has_parent else Operation.APPEND,
            transaction=transaction,
            io=io,
            commit_uuid=commit_uuid,
            snapshot_properties=snapshot_properties,
        )
        self._added_delete_files: list[DataFile] = []
        self._removed_files: set[DataFile] = set()
        self._merge = merge_manifests

    # ------------------------------------------------------------ building
    def add_delete_file(self, delete_file: DataFile) -> RowDelta:
        """Add a position-delete file."""
        self._added_delete_files.append(delete_file)
        return self

    def delete_data_file(self, data_file: DataFile) -> RowDelta:
        """Remove a data file or a delete file from the table."""
        self._removed_files.add(data_file)
        return self

    # ------------------------------------------------------------ producer hooks
    def _deleted_entries(self) -> list[ManifestEntry]:  # unused: _manifests does it in one pass
        return []

    def _existing_manifests(self) -> list[ManifestFile]:  # unused: _manifests does it in one pass
        return []

    def _writer(self, content: ManifestContent, spec_id: int) -> ManifestWriterV2:
        kind = _DeleteManifestWriter if content == ManifestContent.DELETES else ManifestWriterV2
        return kind(self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)

    def _manifests(self) -> list[ManifestFile]:
        metadata = self._transaction.table_metadata
        if metadata.format_version < 2:
            raise ValueError("position deletes need an Iceberg format-version 2 table")
        out: list[ManifestFile] = []
        spec_id = metadata.default_spec_id
        for content, files in (
            (ManifestContent.DATA, self._added_data_files),
            (ManifestContent.DELETES, self._added_delete_files),
        ):
            if files:
                with self._writer(content, spec_id) as writer:
                    for f in files:
                        writer.add(
                            ManifestEntry.from_args(
                                status=ManifestEntryStatus.ADDED,
                                snapshot_id=self._snapshot_id,
                                sequence_number=None,
                                file_sequence_number=None,
                                data_file=f,
                            )
                        )
                out.append(writer.to_manifest_file())
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        if parent is None:
            missing = self._removed_files
        else:
            missing = set(self._removed_files)
            kept: dict[tuple[ManifestContent, int], list[ManifestEntry]] = defaultdict(list)
            removed: dict[tuple[ManifestContent, int], list[ManifestEntry]] = defaultdict(list)
            for manifest in parent.manifests(self._io):
                if not manifest.has_added_files() and not manifest.has_existing_files():
                    continue  # only DELETED entries: recorded by its own snapshot, dropped from later ones
                if not self._merge and not self._removed_files:
                    out.append(manifest)
                    continue
                entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
                gone = [e for e in entries if e.data_file in self._removed_files]
                if not gone and not self._merge:
                    out.append(manifest)  # untouched: reuse as is
                    continue
                group = (manifest.content, manifest.partition_spec_id)
                removed[group].extend(gone)
                kept[group].extend(e for e in entries if e.data_file not in self._removed_files)
                missing.difference_update(e.data_file for e in gone)
            for group in sorted(set(kept) | set(removed), key=lambda g: (int(g[0]), g[1])):
                if not kept[group] and not removed[group]:
                    continue
                with self._writer(*group) as writer:
                    for entry in kept[group]:
                        writer.existing(entry)
                    for entry in removed[group]:
                        writer.delete(entry)
                out.append(writer.to_manifest_file())
        if missing:
            from pyiceberg.exceptions import ValidationException

            raise ValidationException(
                "files to remove are not in the parent snapshot: " + ", ".join(sorted(f.file_path for f in missing))
            )
        return out

    def _summary(self, snapshot_properties: dict[str, str] | None = None) -> Summary:
        metadata = self._transaction.table_metadata
        schema, specs = metadata.schema(), metadata.specs()
        collector = SnapshotSummaryCollector(partition_summary_limit=0)
        for f in (*self._added_data_files, *self._added_delete_files):  # added files: the default spec
            collector.add_file(f, schema=schema, partition_spec=metadata.spec())
        for f in self._removed_files:
            collector.remove_file(f, schema=schema, partition_spec=specs[f.spec_id])
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        return update_snapshot_summaries(
            summary=Summary(operation=self._operation, **collector.build(), **(snapshot_properties or {})),
            previous_summary=parent.summary if parent is not None else None,
        )

"""One exception tree for fluss-lake, rooted in :class:`FlussLakeError`.

Every message says what went wrong and what to do about it. ``retriable`` tells a caller whether the
same call may succeed if simply tried again (a commit race, a storage endpoint that stopped answering).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "FlussLakeError",
    "InvalidNameError",
    "InvalidConfigError",
    "UnsupportedMergeEngineError",
    "InvalidTableError",
    "InvalidAlterError",
    "SchemaMismatchError",
    "NullPrimaryKeyError",
    "InvalidPartialUpdateError",
    "DeletionDisabledError",
    "UnsupportedOperationError",
    "DatabaseNotExistError",
    "DatabaseAlreadyExistError",
    "DatabaseNotEmptyError",
    "TableNotExistError",
    "TableAlreadyExistError",
    "InvalidPartitionError",
    "PartitionNotExistError",
    "PartitionAlreadyExistError",
    "TooManyPartitionsError",
    "OffsetOutOfRangeError",
    "CommitConflictError",
    "StorageError",
    "StorageUnavailableError",
    "CorruptDataError",
    "CorruptedDataError",
    "IncompleteHistoryError",
    "DecisionNotFoundError",
    "JobConflictError",
    "JobStateError",
    "JoinNotSupportedError",
    "LakeError",
    "LakeTableMismatchError",
    "LakeSnapshotNotFoundError",
    "LakeUnavailableError",
    "TieringConflictError",
]


class FlussLakeError(Exception):
    """Root of every error raised by fluss-lake."""

    retriable: ClassVar[bool] = False


class InvalidNameError(FlussLakeError, ValueError):
    """A database, table or column name is not allowed (empty, ``..``, ``/``, control characters, reserved)."""


class InvalidConfigError(FlussLakeError, ValueError):
    """An option is unknown, has a bad value, or conflicts with another option or the schema."""


class UnsupportedMergeEngineError(InvalidConfigError):
    """``table.merge-engine`` names an engine that does not exist."""


class InvalidTableError(FlussLakeError, ValueError):
    """A table descriptor is inconsistent (primary key, bucket key, schema)."""


class InvalidAlterError(FlussLakeError, ValueError):
    """An ALTER asks for a change Fluss does not allow (non-alterable option, non-nullable new column...)."""


class SchemaMismatchError(FlussLakeError, ValueError):
    """Written data does not fit the table schema (missing or unknown columns, wrong types)."""


class NullPrimaryKeyError(SchemaMismatchError):
    """A primary-key (or bucket-key) column holds a null."""


class InvalidPartialUpdateError(FlussLakeError, ValueError):
    """A partial update (target columns) is not allowed for this table or these columns."""


class DeletionDisabledError(FlussLakeError):
    """A delete was sent to a table whose ``table.delete.behavior`` is ``disable``."""


class UnsupportedOperationError(FlussLakeError):
    """The operation does not apply to this kind of table (e.g. upsert into a log table)."""


class DatabaseNotExistError(FlussLakeError, LookupError):
    """The database does not exist."""


class DatabaseAlreadyExistError(FlussLakeError):
    """The database exists already."""


class DatabaseNotEmptyError(FlussLakeError):
    """The database still has tables."""


class TableNotExistError(FlussLakeError, LookupError):
    """The table does not exist."""


class TableAlreadyExistError(FlussLakeError):
    """The table exists already."""


class InvalidPartitionError(FlussLakeError, ValueError):
    """A partition value or spec that Fluss would reject (null, bad characters, expired, wrong keys)."""


class PartitionNotExistError(FlussLakeError, LookupError):
    """The partition does not exist (and dynamic partition creation is off for this write)."""


class PartitionAlreadyExistError(FlussLakeError):
    """The partition exists already."""


class TooManyPartitionsError(FlussLakeError):
    """Creating the partition would exceed the table's partition limit (``max.partition.num``)."""


class OffsetOutOfRangeError(FlussLakeError, IndexError):
    """A read asked for an offset before the earliest retained one or after the log end."""


class CommitConflictError(FlussLakeError):
    """Another writer committed the same offset first; re-read the log end and try again."""

    retriable = True


class StorageError(FlussLakeError, OSError):
    """The storage backend failed in a way that is not simply a timeout."""


class StorageUnavailableError(StorageError):
    """The storage endpoint did not answer; nothing was committed, so the same call can be retried."""

    retriable = True


class CorruptedDataError(StorageError):
    """A stored object is damaged (its checksum does not match, it is truncated, or it disagrees with its
    neighbours: an offset gap, a batch under the wrong name, a snapshot naming a missing segment).

    ``key`` names the object; ``table``, ``bucket`` and ``offsets`` say what it holds where the key tells. Nothing is
    answered from a damaged object: the message says how to repair it (``fluss-lake check --repair``).
    """

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        table: str | None = None,
        bucket: int | None = None,
        offsets: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.table = table
        self.bucket = bucket
        self.offsets = offsets


#: The earlier name of :class:`CorruptedDataError` (kept: code written against it still catches the same errors).
CorruptDataError = CorruptedDataError


# ---------------------------------------------------------------- training sets, state as of a time, decision log
class IncompleteHistoryError(FlussLakeError):
    """A table's history misses changes (the live log expired before the lake took them), so answers as of a
    time would be wrong."""


class DecisionNotFoundError(FlussLakeError, LookupError):
    """A decision-log reconstruction asked for request ids the log does not hold."""


# ---------------------------------------------------------------- jobs (fluss_lake.jobs)
class JobConflictError(FlussLakeError):
    """Another instance of the same job committed a checkpoint first; run one instance per job name."""


class JobStateError(FlussLakeError):
    """A job's checkpoint does not fit its inputs any more (an input table was dropped and re-created)."""


class JoinNotSupportedError(InvalidConfigError):
    """A join cannot run as a delta join (and the stateful fallback was not chosen); the message says why."""


# ---------------------------------------------------------------- the lake (raised by the ``tiering`` package)
class LakeError(FlussLakeError):
    """The lake (an Iceberg catalog and its warehouse) refused or failed an operation."""


class LakeTableMismatchError(LakeError, ValueError):
    """A lake table does not belong to this live table (another incarnation, kind or incompatible schema)."""


class LakeSnapshotNotFoundError(LakeError, LookupError):
    """A pinned lake read named a snapshot the table does not have (unknown id, or a time before its first)."""


class LakeUnavailableError(LakeError, StorageError):
    """The lake's catalog or object store did not answer; nothing was committed, so the round can be run again."""

    retriable = True


class TieringConflictError(CommitConflictError, LakeError):
    """Another tiering run committed to the lake table first; refresh its offsets and plan the round again."""

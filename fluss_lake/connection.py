"""Connections: a handle on a store with the admin verbs (databases, tables, partitions) and its tables.

A connection keeps one :class:`~fluss_lake.table.Table` per table, so every handle of a table in this process
shares its tablets; the catalog (:mod:`fluss_lake.catalog`) keeps the metadata in the store.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from fluss_lake._utils.arguments import check_callable, check_int
from fluss_lake.catalog import Catalog
from fluss_lake.exceptions import (
    CorruptedDataError,
    DatabaseNotEmptyError,
    DatabaseNotExistError,
    InvalidConfigError,
    TableNotExistError,
)
from fluss_lake.io.store import ObjectStore, open_store
from fluss_lake.metadata.descriptor import TableDescriptor, TableInfo
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.metadata.types import DataTypeLike
from fluss_lake.runtime.context import DEFAULT_GRACE_MS, RuntimeContext
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.verification import IntegrityReport, damage_of, verify_jobs
from fluss_lake.table import Table

__all__ = ["Connection", "connect", "default_store_url", "DEFAULT_HOME", "DEFAULT_URL_ENV", "HOME_ENV"]

DEFAULT_URL_ENV = "FLUSS_LAKE_URL"
#: The environment variable naming the home folder (store, lake and Dagster instance of the embedded default).
HOME_ENV = "FLUSS_LAKE_HOME"
#: The home when ``$FLUSS_LAKE_HOME`` is not set (relative to the working directory).
DEFAULT_HOME = ".fluss-lake"
#: The default store of versions before homes (still used, with a warning, while the home has no store).
_LEGACY_DIR = "fluss-lake-data"
_said_legacy: list[bool] = []


def default_store_url() -> str:
    """The store ``connect()`` opens when given none: ``$FLUSS_LAKE_URL``, else the home's ``live/`` folder
    (``$FLUSS_LAKE_HOME``, else ``./.fluss-lake``: the store ``fluss-lake ui``, ``materialize`` and ``tier`` use).

    A store at ``./fluss-lake-data`` (the default of earlier versions) is still used while the home has none, with
    a warning saying how to move it.
    """
    if os.environ.get(DEFAULT_URL_ENV):
        return os.environ[DEFAULT_URL_ENV]
    live = os.path.join(os.environ.get(HOME_ENV) or DEFAULT_HOME, "live")
    if HOME_ENV not in os.environ and not os.path.isdir(live) and os.path.isdir(_LEGACY_DIR):
        if not _said_legacy:
            _said_legacy.append(True)
            logging.getLogger("fluss_lake").warning(
                "using the store at ./%s (the default before homes); move it to ./%s/live, or pass its path",
                _LEGACY_DIR,
                DEFAULT_HOME,
            )
        return _LEGACY_DIR
    return live


def _system_clock() -> int:
    """Wall clock in epoch milliseconds."""
    return int(time.time() * 1000)


def _checked_options(
    clock: Callable[[], int] | None, snapshot_every: int, max_partition_num: int, log_compaction_grace_ms: int | None
) -> tuple[int, int, int | None]:
    """The connection's numeric options, checked before anything is opened or created."""
    check_callable("clock", clock, hint="a function returning epoch milliseconds")
    return (
        check_int("snapshot_every", snapshot_every, minimum=1, hint="log offsets between two state snapshots"),
        check_int("max_partition_num", max_partition_num, minimum=1),
        None
        if log_compaction_grace_ms is None
        else check_int("log_compaction_grace_ms", log_compaction_grace_ms, minimum=0),
    )


class Connection:
    """A handle on a store: admin operations (databases, tables) and :class:`~fluss_lake.table.Table` objects.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp())
    >>> conn.create_database("shop")
    >>> conn.list_databases()
    ['shop']
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        local_dir: str | None = None,
        clock: Callable[[], int] | None = None,
        snapshot_every: int = 1_000_000,
        dynamic_partition_creation: bool = True,
        max_partition_num: int = 1000,
        log_compaction_grace_ms: int | None = None,
        default_lake_format: str | None = None,
    ) -> None:
        snapshot_every, max_partition_num, log_compaction_grace_ms = _checked_options(
            clock, snapshot_every, max_partition_num, log_compaction_grace_ms
        )
        if local_dir is None:
            local_dir = tempfile.mkdtemp(prefix="fluss-lake-state-")
            atexit.register(shutil.rmtree, local_dir, True)
        self.catalog = Catalog(
            store,
            clock=clock or _system_clock,
            max_partition_num=max_partition_num,
            default_lake_format=default_lake_format,
        )
        self._context = RuntimeContext(
            self.catalog,
            local_dir,
            snapshot_every=snapshot_every,
            log_compaction_grace_ms=log_compaction_grace_ms,
            dynamic_partition_creation=dynamic_partition_creation,
        )
        self._tables: dict[str, Table] = {}

    @property
    def store(self) -> ObjectStore:
        """The object store."""
        return self.catalog.store

    @property
    def url(self) -> str:
        """Where the store lives."""
        return self.store.url

    @property
    def clock(self) -> Callable[[], int]:
        """Epoch-millisecond clock of commit timestamps."""
        return self.catalog.clock

    @property
    def local_dir(self) -> str:
        """Where primary-key state segments of this process live."""
        return self._context.local_dir

    @property
    def snapshot_every(self) -> int:
        """Applied log offsets between two state snapshots of a bucket."""
        return self._context.snapshot_every

    @property
    def log_compaction_grace_ms(self) -> int:
        """Age below which log batches of the tables this connection creates are not compacted (each table keeps
        the value it was created with)."""
        value = self._context.log_compaction_grace_ms
        return DEFAULT_GRACE_MS if value is None else value

    @property
    def dynamic_partition_creation(self) -> bool:
        """Whether writes create missing partitions."""
        return self._context.dynamic_partition_creation

    @property
    def max_partition_num(self) -> int:
        """Most partitions a table may have."""
        return self.catalog.max_partition_num

    @property
    def default_lake_format(self) -> str | None:
        """The ``datalake.format`` stamped on new tables."""
        return self.catalog.default_lake_format

    # ------------------------------------------------------------ databases
    def create_database(self, name: str, *, ignore_if_exists: bool = False, comment: str | None = None) -> None:
        """Create a database."""
        self.catalog.create_database(name, ignore_if_exists=ignore_if_exists, comment=comment)

    def database_exists(self, name: str) -> bool:
        """Whether the database exists."""
        return self.catalog.database_exists(name)

    def list_databases(self) -> list[str]:
        """Database names, sorted."""
        return self.catalog.list_databases()

    def drop_database(self, name: str, *, ignore_if_not_exists: bool = False, cascade: bool = False) -> None:
        """Drop a database (with its tables when `cascade`)."""
        if not self.database_exists(name):
            if ignore_if_not_exists:
                return
            raise DatabaseNotExistError(f"database {name!r} does not exist")
        tables = self.list_tables(name)
        if tables and not cascade:
            raise DatabaseNotEmptyError(f"database {name!r} still has tables {tables}; drop them or pass cascade=True")
        for table in tables:
            self.drop_table(TablePath(name, table), ignore_if_not_exists=True)
        self.catalog.drop_database(name)

    # ------------------------------------------------------------ tables
    def list_tables(self, database: str) -> list[str]:
        """Table names of a database, sorted."""
        return self.catalog.list_tables(database)

    def table_exists(self, path: str | TablePath) -> bool:
        """Whether the table exists."""
        return self.catalog.table_exists(TablePath.of(path))

    def create_table(
        self,
        path: str | TablePath,
        descriptor: TableDescriptor | None = None,
        *,
        schema: Schema | Mapping[str, DataTypeLike] | None = None,
        primary_key: Sequence[str] = (),
        bucket_num: int | None = None,
        bucket_keys: Sequence[str] | None = None,
        options: Mapping[str, object] | None = None,
        comment: str | None = None,
        partition_keys: Sequence[str] = (),
        ignore_if_exists: bool = False,
    ) -> TableInfo:
        """Create a table from a descriptor, or from `schema` + keyword options.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("shop")
        >>> info = conn.create_table("shop.orders", schema={"id": "BIGINT", "amount": "DOUBLE"},
        ...                          primary_key=["id"], bucket_num=4)
        >>> info.bucket_num, info.options["table.delete.behavior"]
        (4, 'allow')
        """
        if descriptor is None:
            if schema is None:
                raise InvalidConfigError("create_table needs a TableDescriptor or a schema")
            built = schema if isinstance(schema, Schema) else Schema.of(schema, primary_key=primary_key)
            descriptor = TableDescriptor(
                built,
                bucket_num,
                tuple(bucket_keys) if bucket_keys is not None else None,
                cast(dict[str, str], dict(options or {})),  # values become strings in TableDescriptor.validated
                comment,
                tuple(partition_keys),
            )
        elif (
            schema is not None
            or primary_key
            or bucket_num is not None
            or bucket_keys is not None
            or options
            or comment is not None
            or partition_keys
        ):
            raise InvalidConfigError(
                "pass either a TableDescriptor or schema/primary_key/bucket_num/bucket_keys/"
                "options/comment/partition_keys keywords, not both"
            )
        return self.catalog.create_table(
            TablePath.of(path),
            descriptor,
            ignore_if_exists=ignore_if_exists,
            log_compaction_grace_ms=self.log_compaction_grace_ms,
        )

    def get_table_info(self, path: str | TablePath) -> TableInfo:
        """The table's current metadata."""
        return self.catalog.get_table_info(TablePath.of(path))

    def drop_table(self, path: str | TablePath, *, ignore_if_not_exists: bool = False) -> None:
        """Drop a table with its log and state."""
        path = TablePath.of(path)
        if not self.table_exists(path):
            if ignore_if_not_exists:
                return
            raise TableNotExistError(f"table {path} does not exist")
        info = self.get_table_info(path)
        self._tables.pop(info.table_id, None)
        self.catalog.drop_table(path)

    def alter_table(
        self,
        path: str | TablePath,
        *,
        add_columns: Mapping[str, DataTypeLike] | None = None,
        set_options: Mapping[str, object] | None = None,
        reset_options: Sequence[str] = (),
    ) -> TableInfo:
        """Add nullable columns at the end and/or change alterable options (Fluss's ALTER TABLE)."""
        new_info = self.catalog.alter_table(
            TablePath.of(path), add_columns=add_columns, set_options=set_options, reset_options=reset_options
        )
        cached = self._tables.get(new_info.table_id)
        if cached is not None:
            cached._runtime.reload(new_info)
        return new_info

    def verify(self, *, repair: bool = False, tables: Sequence[str] | None = None) -> list[IntegrityReport]:
        """Check every stored object of the store (or of `tables`): each table's metadata, logs and state
        (:meth:`Table.verify`), then the jobs' checkpoints. With `repair`, damaged state is rebuilt from the log.

        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp())
        >>> [report.ok for report in conn.verify()]
        [True]
        """
        names = (
            list(tables)
            if tables is not None
            else [f"{db}.{t}" for db in self.list_databases() for t in self.list_tables(db)]
        )
        reports = []
        for name in names:
            try:
                table = self.get_table(name)
            except CorruptedDataError as exc:  # the metadata itself: nothing else can be read
                reports.append(IntegrityReport(name, 1, 0, (damage_of(exc, "metadata"),)))
                continue
            reports.append(table.verify(repair=repair))
        reports.append(verify_jobs(self.store))
        return reports

    def get_table(self, path: str | TablePath) -> Table:
        """A :class:`~fluss_lake.table.Table` to write, scan and look up (one per table per connection)."""
        info = self.get_table_info(path)
        table = self._tables.get(info.table_id)
        if table is None:
            self._context.grace_ms(info)  # a connection asking for another log compaction grace is refused here
            table = self._tables[info.table_id] = Table(self, TableRuntime(self._context, info))
        elif table.info.descriptor != info.descriptor:
            table._runtime.reload(info)
        return table

    # ------------------------------------------------------------ partitions
    def list_partitions(self, path: str | TablePath) -> list[PartitionInfo]:
        """The partitions of a partitioned table, by name."""
        return self.catalog.list_partitions(self.get_table_info(path))

    def get_partition(self, path: str | TablePath, spec: str | Mapping[str, object]) -> PartitionInfo:
        """One partition by name (``"eu$20241111"``) or spec (``{"region": "eu", "day": "20241111"}``)."""
        return self.catalog.get_partition(self.get_table_info(path), spec)

    def create_partition(
        self, path: str | TablePath, spec: str | Mapping[str, object], *, ignore_if_exists: bool = False
    ) -> PartitionInfo:
        """Create a partition (Fluss's ``ALTER TABLE ... ADD PARTITION``); rejects values past auto-partition
        retention."""
        return self.catalog.create_partition(self.get_table_info(path), spec, ignore_if_exists=ignore_if_exists)

    def drop_partition(
        self, path: str | TablePath, spec: str | Mapping[str, object], *, ignore_if_not_exists: bool = False
    ) -> None:
        """Drop a partition with its log and state; no delete records are written (Fluss's DROP PARTITION)."""
        info = self.get_table_info(path)
        cached = self._tables.get(info.table_id)
        if cached is not None:
            cached._runtime.drop_partition(spec, ignore_if_not_exists=ignore_if_not_exists)
        else:
            TableRuntime(self._context, info).drop_partition(spec, ignore_if_not_exists=ignore_if_not_exists)


def connect(
    url: str | os.PathLike | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    local_dir: str | None = None,
    clock: Callable[[], int] | None = None,
    datalake_format: str | None = None,
    snapshot_every: int = 1_000_000,
    dynamic_partition_creation: bool = True,
    max_partition_num: int = 1000,
    log_compaction_grace_ms: int | None = None,
) -> Connection:
    """Open a store: a local folder by default, or ``s3://bucket/prefix`` with fsspec storage options.

    Parameters
    ----------
    url
        Local folder or fsspec URL; defaults to :func:`default_store_url`: ``$FLUSS_LAKE_URL``, else the home's
        store (``$FLUSS_LAKE_HOME/live``, else ``./.fluss-lake/live``).
    storage_options
        Passed to fsspec (for S3: ``key``, ``secret``, ``endpoint_url``, ``client_kwargs``...), except
        ``call_timeout``: seconds one storage call may take (default 120, plus one second per MiB sent) before it
        fails with the retriable :class:`~fluss_lake.StorageUnavailableError`. Raise it for large state
        segments on slow links.
    local_dir
        Where primary-key state segments of a remote store are cached (default: a temporary folder).
    clock
        Epoch-millisecond clock used for commit timestamps (tests set one).
    datalake_format
        Cluster-level ``datalake.format`` stamped on new tables (``"iceberg"`` buckets like Iceberg).
    snapshot_every
        Take a state snapshot of a bucket once this many log offsets were applied since its last one (a new
        process restores the snapshot and replays at most about this many records). Also see
        :meth:`~fluss_lake.table.Table.snapshot`.
    dynamic_partition_creation
        Create missing partitions when rows for them are written (Fluss's
        ``client.writer.dynamic-create-partition.enabled``); when off such a write fails and changes nothing.
    max_partition_num
        Most partitions a table may have (Fluss's ``max.partition.num``).
    log_compaction_grace_ms
        :meth:`~fluss_lake.table.Table.compact_log` merges only batches older than this, and a process whose view
        of a log is older than half of it re-lists before reading on or committing. It is recorded in every table
        this connection creates (default ten minutes) and every process uses the table's value: leave it unset to
        open tables created elsewhere (a different value is refused, since readers would miss batches).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> fl.connect(tempfile.mkdtemp()).list_databases()
    []
    """
    target = url if url is not None else default_store_url()
    if datalake_format not in (None, "iceberg"):
        raise InvalidConfigError(
            f"datalake_format={datalake_format!r} is not supported by fluss-lake (the tiering service writes "
            "Iceberg tables only); use 'iceberg' or None"
        )
    _checked_options(clock, snapshot_every, max_partition_num, log_compaction_grace_ms)  # before the store is opened
    connection = Connection(
        open_store(target, storage_options),
        local_dir=local_dir,
        clock=clock,
        snapshot_every=snapshot_every,
        dynamic_partition_creation=dynamic_partition_creation,
        max_partition_num=max_partition_num,
        log_compaction_grace_ms=log_compaction_grace_ms,
        default_lake_format=datalake_format,
    )
    return connection

"""The lake: a pyiceberg catalog (SQL on sqlite with a local warehouse by default) holding one Iceberg table per
live table, plus a ``<table>__history`` changelog table per primary-key table.

Any pyiceberg catalog works by configuration: pass its properties (``type``, ``uri``, ``warehouse``,
``s3.endpoint``, ...). Lake tables are created with ``commit.retry.num-retries = 0``: pyiceberg 0.12 would
otherwise rebase a stale tiering commit onto a newer one and regress the tiered offsets; a conflict must
reach the tiering round, which re-reads the offsets and plans again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from fluss_lake.exceptions import (
    InvalidConfigError,
    LakeTableMismatchError,
    TableNotExistError,
    TieringConflictError,
)
from fluss_lake.metadata.table_path import TablePath
from tiering.home import Home
from tiering.lake_scan import history_frame
from tiering.lake_snapshot import TABLE_ID_PROPERTY, LakeSnapshot
from tiering.orphans import DEFAULT_ORPHAN_GRACE_S, OrphanReport, remove_orphan_files
from tiering.schema import LakeKind, lake_arrow_schema, system_names
from tiering.snapshot_pins import pinned_snapshot

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

    from fluss_lake.connection import Connection
    from fluss_lake.table import Table

__all__ = ["HISTORY_SUFFIX", "LAKE_DIR", "Lake", "expire_dropped_partitions"]

HISTORY_SUFFIX = "__history"
LAKE_DIR = "_lake"
_KIND_PROPERTY = "fluss.lake-kind"
_TABLE_PROPERTIES = {"commit.retry.num-retries": "0", "write.parquet.compression-codec": "zstd"}


class Lake:
    """A connection to the lake catalog; lake tables are named ``<database>.<table>`` like the live ones.

    Parameters
    ----------
    catalog_properties
        pyiceberg catalog properties. ``type`` picks the catalog (default ``sql``); for S3 give ``warehouse``
        (``s3://bucket/prefix``), ``s3.endpoint`` (with its scheme), ``s3.access-key-id``,
        ``s3.secret-access-key`` and ``s3.region`` (see STACK-NOTES §3). ``None`` (the embedded default):
        a sqlite catalog and a warehouse under ``./fluss-lake-data/_lake``.
    name
        The catalog's name (pyiceberg's).

    Examples
    --------
    >>> import tempfile
    >>> lake = Lake.local(tempfile.mkdtemp())
    >>> lake.properties["type"], lake.properties["warehouse"].startswith("file://")
    ('sql', True)
    """

    def __init__(self, catalog_properties: Mapping[str, str] | None = None, *, name: str = "fluss") -> None:
        if catalog_properties is None:
            catalog_properties = _local_properties(os.path.join("fluss-lake-data", LAKE_DIR))
        props = {str(k): str(v) for k, v in catalog_properties.items()}
        props.setdefault("type", "sql")
        if props["type"] == "sql" and "uri" not in props:
            raise InvalidConfigError(
                "a SQL lake catalog needs a 'uri' property (e.g. 'sqlite:///path/catalog.db'); "
                "or use Lake.local(path) for the embedded default"
            )
        self.properties = props
        self.name = name
        self._catalog: Any = None

    @classmethod
    def local(cls, path: str | os.PathLike) -> Lake:
        """The embedded default: a sqlite catalog ``<path>/catalog.db`` and the warehouse ``<path>/warehouse``."""
        return cls(_local_properties(os.fspath(path)))

    @classmethod
    def for_home(cls, home: str | os.PathLike[str] | Home | None = None) -> Lake:
        """The lake of a home folder (``<home>/lake``): what ``fluss-lake ui``, ``materialize`` and ``tier`` use.

        `home` defaults to ``$FLUSS_LAKE_HOME``, else ``./.fluss-lake`` (see :mod:`tiering.home`). Nothing is
        created until something is tiered: reading a home that has no lake says that the table is not tiered.

        Examples
        --------
        >>> import tempfile
        >>> lake = Lake.for_home(tempfile.mkdtemp())
        >>> lake.properties["uri"].endswith("/lake/catalog.db"), lake.load("c360.payments") is None
        (True, True)
        """
        root = home if isinstance(home, Home) else Home.resolve(home)
        return cls.local(root.lake)

    @classmethod
    def for_connection(cls, connection: Connection, catalog_properties: Mapping[str, str] | None = None) -> Lake:
        """The lake of a live store: `catalog_properties` if given, else the local lake beside the store.

        That is ``<store>/_lake``; for the store of a home (``<home>/live``, whose home has a ``lake/`` folder
        and the store no ``_lake``) it is the home's lake, so ``Lake.for_connection(fl.connect(".fluss-lake/live"))``
        finds what ``fluss-lake ui`` tiered. A store on S3 has no local folder for the default sqlite catalog:
        give `catalog_properties` then.
        """
        if catalog_properties is not None:
            return cls(catalog_properties)
        root = connection.store.local_path("")
        if root is None:
            raise InvalidConfigError(
                f"the live store {connection.url} is not a local folder, so there is no embedded "
                "lake beside it; pass catalog_properties (uri, warehouse, s3.* keys)"
            )
        store = Path(root)
        home = Home(store.parent)
        if not (store / LAKE_DIR).exists() and store == home.live and home.lake.is_dir():
            return cls.for_home(home)
        return cls.local(store / LAKE_DIR)

    # ------------------------------------------------------------ catalog
    @property
    def catalog(self) -> Any:
        """The pyiceberg catalog (loaded on first use)."""
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            from tiering.nested_nulls import install

            install()  # null ARRAY<ROW>/MAP<k, ROW> values stay null in lake files (pyiceberg 0.12 drops them)

            if self.properties.get("type") == "sql" and self.properties["uri"].startswith("sqlite:///"):
                os.makedirs(os.path.dirname(self.properties["uri"][len("sqlite:///") :]) or ".", exist_ok=True)
            for attempt in range(5):
                try:
                    self._catalog = load_catalog(self.name, **self.properties)
                    break
                except Exception as exc:  # two processes creating the SQL catalog's tables at once: the loser retries
                    if "already exists" not in str(exc) or attempt == 4:
                        raise
        return self._catalog

    def _local_catalog_missing(self) -> bool:
        """Whether this is a sqlite catalog on a local file that does not exist yet."""
        uri = self.properties.get("uri", "")
        if self.properties.get("type") != "sql" or not uri.startswith("sqlite:///"):
            return False
        path = uri[len("sqlite:///") :].split("?", 1)[0]
        return path not in ("", ":memory:") and not os.path.exists(path)

    def storage_options(self) -> dict[str, str]:
        """Object-store options for Polars readers (the catalog's ``s3.*`` keys mapped; empty for local files)."""
        mapping = {
            "s3.endpoint": "aws_endpoint_url",
            "s3.access-key-id": "aws_access_key_id",
            "s3.secret-access-key": "aws_secret_access_key",
            "s3.region": "aws_region",
            "s3.session-token": "aws_session_token",
        }
        options = {target: self.properties[key] for key, target in mapping.items() if key in self.properties}
        if options.get("aws_endpoint_url", "").startswith("http://"):
            options["aws_allow_http"] = "true"
        return options

    @staticmethod
    def identifier(path: str | TablePath, kind: LakeKind = "log") -> tuple[str, str]:
        """``(namespace, name)`` of a lake table: the live names; ``<table>__history`` for a history table."""
        path = TablePath.of(path)
        return path.database, path.table + (HISTORY_SUFFIX if kind == "history" else "")

    def load(self, path: str | TablePath, kind: LakeKind = "log") -> IcebergTable | None:
        """The lake table (``kind='history'``: the changelog table), or None if it was never created."""
        from pyiceberg.exceptions import NoSuchTableError

        if self._catalog is None and self._local_catalog_missing():
            return None  # nothing was ever tiered here: say so without creating an empty catalog
        try:
            return self.catalog.load_table(self.identifier(path, kind))
        except NoSuchTableError:
            return None

    def snapshot(self, path: str | TablePath, kind: LakeKind = "log") -> LakeSnapshot:
        """The tiering progress of a lake table (an empty snapshot if it does not exist)."""
        table = self.load(path, kind)
        return LakeSnapshot(None) if table is None else LakeSnapshot.of_table(table)

    def history(
        self, path: str | TablePath, *, snapshot_id: int | None = None, as_of: datetime | date | str | None = None
    ) -> pl.LazyFrame:
        """The changelog history of a primary-key table, as :func:`~tiering.read_history` (which calls this).

        Being a method, it lets the training functions (which do not import the lake) read a history pinned to a
        snapshot: ``training_set(..., lake=lake, snapshot_ids=...)``, ``state_as_of(t, lake=lake, snapshot_id=...)``.
        """
        table = self.load(path, "history")
        if table is None:
            raise TableNotExistError(
                f"the lake has no history table for {TablePath.of(path)} (only primary-key tables "
                "have one; tier the table first with tier_once)"
            )
        return history_frame(self, table, pinned_snapshot(table, snapshot_id=snapshot_id, as_of=as_of))

    def ensure(self, live: Table, kind: LakeKind) -> IcebergTable:
        """Create the lake table of `live` (``kind``: its own kind, or ``history``), or add columns added live."""
        from pyiceberg.exceptions import (
            NamespaceAlreadyExistsError,
        )

        target = lake_arrow_schema(live.schema, kind)
        table = self.load(live.path, kind)
        if table is None:
            namespace, name = self.identifier(live.path, kind)
            try:
                self.catalog.create_namespace(namespace)
            except Exception as exc:  # another tiering run may create it at the same moment (IntegrityError)
                if (
                    not isinstance(exc, NamespaceAlreadyExistsError)
                    and (namespace,) not in self.catalog.list_namespaces()
                ):
                    raise
            properties = {**_TABLE_PROPERTIES, TABLE_ID_PROPERTY: live.info.table_id, _KIND_PROPERTY: kind}
            try:
                table = self.catalog.create_table((namespace, name), schema=target, properties=properties)
            except Exception as exc:  # another tiering run created it first
                table = self.load(live.path, kind)
                if table is None:
                    raise
                del exc
        _check_owner(table, live, kind)
        if table.current_snapshot() is None:  # idempotent: a crash between create and here is repaired here
            if table.spec().is_unpartitioned():  # identity on each partition column, then __bucket (as Fluss)
                with table.update_spec() as spec:
                    for column in (*live.partition_keys, "__bucket"):
                        spec.add_identity(column)
            if kind == "primary-key" and not table.schema().identifier_field_ids:
                with table.update_schema() as update:  # Iceberg identifier fields = the primary key (as Fluss)
                    update.set_identifier_fields(*live.schema.primary_key)
        return self._evolve(table, target, kind)

    @staticmethod
    def _evolve(table: IcebergTable, target: Any, kind: LakeKind) -> IcebergTable:
        """Add live columns the lake lacks, before the system columns (only ADD COLUMN is propagated)."""
        current = {f.name for f in table.schema().fields}
        added = [f.name for f in target if f.name not in current]
        for name in set(current) - set(target.names):
            raise LakeTableMismatchError(
                f"lake table {'.'.join(table.name())} has column {name!r} that the live "
                "table lacks; only added columns are propagated to the lake"
            )
        if added:
            first_system = system_names(kind)[0]
            with table.update_schema() as update:
                update.union_by_name(target)
                for name in added:
                    update.move_before(name, first_system)
        return table

    def expire_partitions(self, live: Table) -> list[str]:
        """Delete the lake data (current state or log, and history) of partitions that no longer exist live.

        By default the lake keeps a dropped partition's data (the lake is the history; Fluss writes no delete
        records when a partition is dropped or expires by ``table.auto-partition.num-retention``). Call this, or
        tier with ``expire_partitions=True``, to mirror drops. Whole data files are removed (the files of one
        Iceberg partition hold one Fluss partition), in one commit per lake table; returns the names removed.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl, tiering
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.ev", schema={"day": "STRING", "v": "INT"}, partition_keys=["day"],
        ...                       options={"table.datalake.enabled": True})
        >>> ev = conn.get_table("d.ev"); _ = ev.append([{"day": "20260101", "v": 1}, {"day": "20260102", "v": 2}])
        >>> lake = tiering.Lake.for_connection(conn); _ = tiering.tier_once(conn, lake)
        >>> ev.drop_partition("20260101"); lake.expire_partitions(ev)
        ['20260101']
        >>> tiering.read_lake(lake, "d.ev").collect()["v"].to_list()
        [2]
        """
        if not live.is_partitioned:
            return []
        return expire_dropped_partitions(live, {kind: self.load(live.path, kind) for kind in ("log", "history")})

    def remove_orphan_files(
        self, path: str | TablePath, *, older_than_s: float = DEFAULT_ORPHAN_GRACE_S, dry_run: bool = False
    ) -> list[OrphanReport]:
        """Delete files of the lake tables of `path` that no snapshot references (left by killed rounds) and that
        are older than `older_than_s`; see :func:`tiering.orphans.remove_orphan_files`."""
        return remove_orphan_files(self, path, older_than_s=older_than_s, dry_run=dry_run)

    def drop(self, path: str | TablePath) -> None:
        """Drop the lake table of a live table and its history table (their files stay until maintenance)."""
        for kind in ("log", "history"):
            if self.load(path, kind) is not None:
                self.catalog.drop_table(self.identifier(path, kind))

    def __repr__(self) -> str:
        return f"<Lake {self.properties.get('type')} {self.properties.get('warehouse', '')}>"


def expire_dropped_partitions(live: Table, tables: Mapping[str, IcebergTable | None]) -> list[str]:
    """:meth:`Lake.expire_partitions` on lake tables already loaded (``{"log": main table, "history": ...}``)."""
    if not live.is_partitioned:
        return []
    existing = {p.name for p in live.list_partitions()}
    removed: set[str] = set()
    for kind in ("log", "history"):
        table = tables.get(kind)
        if table is None or table.current_snapshot() is None:
            continue
        _check_owner(
            table, live, kind if kind == "history" else ("primary-key" if live.is_primary_key_table else "log")
        )
        removed.update(_expire_files(table, live, existing))
    return sorted(removed)


def _check_owner(table: IcebergTable, live: Table, kind: LakeKind) -> None:
    """The lake table must belong to this incarnation of the live table, as a table of `kind`."""
    owner = table.properties.get(TABLE_ID_PROPERTY)
    if owner != live.info.table_id or table.properties.get(_KIND_PROPERTY) != kind:
        raise LakeTableMismatchError(
            f"lake table {'.'.join(table.name())} belongs to live table id {owner}"
            f" ({table.properties.get(_KIND_PROPERTY)}), not to {live.path} (id {live.info.table_id}, {kind}):"
            " the live table was dropped and created again."
            " Drop the old lake table (Lake.drop) or rename it to keep its data, then tier again"
        )


def _local_properties(path: str) -> dict[str, str]:
    """SQL catalog on sqlite + a local warehouse under `path`."""
    root = Path(path).absolute()
    return {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": root.joinpath("warehouse").as_uri()}


def _expire_files(table: IcebergTable, live: Table, existing: set[str]) -> list[str]:
    """Remove the data files of partitions not in `existing` in one commit (re-planned if a tiering round won)."""
    from pyiceberg.exceptions import CommitFailedException

    from tiering.deletes import RowDelta
    from tiering.schema import file_key

    for _attempt in range(20):
        stale = [
            (f, file_key(table, task.file, live.schema, live.partition_keys)[0])
            for task in table.scan().plan_files()
            for f in (task.file, *task.delete_files)
        ]
        stale = list({f.file_path: (f, name) for f, name in stale if name not in existing}.values())
        if not stale:
            return []
        snap = LakeSnapshot.of_table(table)
        keep = LakeSnapshot(
            None,
            {k: o for k, o in snap.offsets.items() if k[0] in existing},
            snap.table_id,
            snap.tiered_at_ms,
            {n: i for n, i in snap.partition_ids.items() if n in existing},
        )
        try:
            with (
                table.transaction() as tx,
                RowDelta(tx, table.io, snapshot_properties=keep.summary_properties()) as delta,
            ):
                for data_file, _ in stale:  # data files and their position-delete files
                    delta.delete_data_file(data_file)
        except CommitFailedException:
            table.refresh()
            continue
        return sorted({name for _, name in stale if name is not None})
    raise TieringConflictError(
        f"expiring dropped partitions of {live.path}: tiering runs committed first 20 times in a row; try again"
    )

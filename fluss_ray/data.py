"""Ray Data readers: a live table (one read task per bucket) and its lake table (Ray's Iceberg reader).

:func:`read_table` gives a primary-key table's current rows (each bucket's state as one block) or a log table's
rows, or, with ``changelog=True``, the change records between offsets (the system columns of
``Table.scan_log`` first: ``_bucket``, ``_offset``, ``_change_type``, ``_commit_timestamp``). The offsets where
the read ends are fixed when the dataset is planned, so every read task of a changelog reads the same cut of
the log. :func:`read_lake` reads what tiering committed, through ``ray.data.read_iceberg`` and the lake's
pyiceberg catalog.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray
import ray.data
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata

from fluss_lake._utils.arguments import check_int, check_offsets
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.metadata.table_path import TablePath
from fluss_ray.store import Store

if TYPE_CHECKING:
    from fluss_lake.table import Table
    from tiering import Lake

__all__ = ["LiveTableDatasource", "read_lake", "read_table"]

#: (partition name or None, bucket)
BucketKey = tuple[str | None, int]


def _read_bucket(
    store: Store,
    path: str,
    partition: str | None,
    bucket: int,
    changelog: bool,
    span: tuple[int, int] | None,
    columns: Sequence[str] | None,
) -> Iterable[pa.Table]:
    """The rows of one bucket (current state, or the changelog records of `span`) as one Arrow table."""
    table = store.connect().get_table(path)
    part = table if partition is None else table.partition(partition)
    if not changelog and part.is_primary_key_table:
        rows = part.bucket_state(bucket).rows
        yield (rows.select(list(columns)) if columns else rows).to_arrow()
        return
    ends = part.end_offsets()
    if span is None:  # a log table's rows: all it retains
        span = (part.earliest_offsets()[bucket], ends[bucket])
    starts = {b: e for b, e in ends.items()}
    stops = dict(starts)
    starts[bucket], stops[bucket] = span
    frame = part.scan_log(start_offsets=starts, end_offsets=stops, columns=list(columns) if columns else None)
    if not changelog:
        frame = frame.select([c for c in frame.columns if not c.startswith("_")] if not columns else list(columns))
    yield frame.to_arrow()


class LiveTableDatasource(Datasource):
    """A Ray Data datasource of one live table: one read task per (partition and) bucket.

    Built by :func:`read_table`; ``ray.data.read_datasource(LiveTableDatasource(store, "db.table"))`` is the same.
    The read tasks (and, for a changelog, the offsets where they stop) are planned here, on the driver.
    """

    def __init__(
        self,
        store: Store,
        path: str,
        *,
        changelog: bool = False,
        start_offsets: Mapping | None = None,
        end_offsets: Mapping | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(store, Store):
            raise InvalidConfigError(
                f"store={store!r}: give a fluss_ray.Store (the URL and options workers connect to)"
            )
        self.store, self.path, self.changelog = store, path, changelog
        self.columns = list(columns) if columns is not None else None
        table = store.connect().get_table(path)
        if self.columns is not None:
            unknown = [c for c in self.columns if c not in table.schema.polars_schema]
            if unknown:
                raise InvalidConfigError(
                    f"{table.path} has no columns {unknown}; its columns are {list(table.schema.polars_schema)}"
                )
        self._plan = _plan(table, changelog=changelog, start_offsets=start_offsets, end_offsets=end_offsets)

    def get_name(self) -> str:
        return f"FlussLake({self.path})"

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        """One read task per (partition, bucket); `parallelism` is ignored (a bucket is the unit of a read)."""
        tasks = []
        for (partition, bucket), span in self._plan.items():
            rows = span[1] - span[0] if span is not None and self.changelog else None
            read = functools.partial(
                _read_bucket, self.store, self.path, partition, bucket, self.changelog, span, self.columns
            )
            meta = BlockMetadata(num_rows=rows, size_bytes=None, exec_stats=None, input_files=None)
            tasks.append(ReadTask(read, meta, per_task_row_limit=per_task_row_limit))
        return tasks


def _plan(
    table: Table, *, changelog: bool, start_offsets: Mapping | None, end_offsets: Mapping | None
) -> dict[BucketKey, tuple[int, int] | None]:
    """Read tasks of a table: (partition, bucket) -> [start, end) of the changelog, or None (current rows)."""
    check_offsets("start_offsets", start_offsets, minimum=0)
    check_offsets("end_offsets", end_offsets, minimum=0)
    if not changelog and (start_offsets is not None or end_offsets is not None):
        raise InvalidConfigError(
            "start_offsets/end_offsets select change records: pass changelog=True, or neither for the current rows"
        )
    parts = table.partition_tables() if table.is_partitioned else [table]
    out: dict[BucketKey, tuple[int, int] | None] = {}
    for part in parts:
        name = part.partition_name
        if not changelog:
            out.update({(name, b): None for b in range(part.bucket_num)})
            continue
        ends, earliest = part.end_offsets(), part.earliest_offsets()
        for b in range(part.bucket_num):
            key: Any = (name, b) if table.is_partitioned else b
            start = (start_offsets or {}).get(key, earliest[b])
            end = (end_offsets or {}).get(key, ends[b])
            if not earliest[b] <= start <= end <= ends[b]:
                raise InvalidConfigError(
                    f"{table.path} bucket {key}: offsets [{start}, {end}) are outside the log "
                    f"[{earliest[b]}, {ends[b]}); read from offsets the table still retains"
                )
            out[(name, b)] = (start, end)
    return out


def read_table(
    path: str | TablePath,
    *,
    store: Store,
    changelog: bool = False,
    start_offsets: Mapping | None = None,
    end_offsets: Mapping | None = None,
    columns: Sequence[str] | None = None,
) -> ray.data.Dataset:
    """A live table as a Ray Dataset, one read task per bucket (per partition and bucket when partitioned).

    Without `changelog`: a primary-key table's current rows, a log table's rows. With ``changelog=True``: the
    change records from `start_offsets` (default: the earliest retained) to `end_offsets` (default: the log end
    when the dataset is planned), keyed by bucket (``(partition name, bucket)`` on a partitioned table).

    Examples
    --------
    >>> ds = read_table("shop.orders", store=Store("s3://bucket/live", options))   # doctest: +SKIP
    >>> ds.count()                                                                  # doctest: +SKIP
    """
    source = LiveTableDatasource(
        store,
        str(TablePath.of(path)),
        changelog=changelog,
        start_offsets=start_offsets,
        end_offsets=end_offsets,
        columns=columns,
    )
    return ray.data.read_datasource(source)


def read_lake(
    lake: Lake,
    path: str | TablePath,
    *,
    history: bool = False,
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    **read_options: Any,
) -> ray.data.Dataset:
    """The lake table of a live table (its history table with `history`) through ``ray.data.read_iceberg``.

    The workers load the lake's pyiceberg catalog from its properties (reachable from every node). Other
    keywords go to ``read_iceberg`` (``row_filter``, ``override_num_blocks``...); `columns` selects columns.
    """
    check_int("snapshot_id", snapshot_id, minimum=None, optional=True, hint="an id from tiering.lake_snapshots")
    namespace, name = lake.identifier(path, "history" if history else "log")
    if lake.load(path, "history" if history else "log") is None:
        from fluss_lake.exceptions import TableNotExistError

        raise TableNotExistError(f"the lake has no table {namespace}.{name}; tier it first (tier_once or tier_on_ray)")
    dataset = ray.data.read_iceberg(
        table_identifier=f"{namespace}.{name}",
        catalog_kwargs={"name": lake.name, **lake.properties},
        snapshot_id=snapshot_id,
        **read_options,
    )
    return dataset.select_columns(list(columns)) if columns is not None else dataset

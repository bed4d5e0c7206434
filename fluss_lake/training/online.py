"""Online features: for each entity row, the values a training set would give for a prediction time of *now*.

The same :class:`~fluss_lake.training.FeatureView` objects as :func:`~fluss_lake.training.training_set`, the same
rules (``docs/TRAINING.md``; the shared ones live in :mod:`fluss_lake.training._rules`), but read from the live
tables' current state: one batched primary-key lookup per table (views of one table share it), never the history.

Why the current state gives the training set's answer at *now*:

* **Commit time**: the state of a key is the fold of its changelog, i.e. its latest ``+I``/``+U``/``-D``, which is
  what the as-of join picks for a prediction time after every commit. The TTL age is measured from the commit
  time of that change: the lookup gives the change's log offset, and the commit time of the batch holding it is
  read from the batch header (cached per batch, so a warm request reads nothing).
* **Event time**: the latest value *by event time* is what the state holds only when the table's merge engine
  keeps it: ``table.merge-engine = versioned`` with the view's event-time column as
  ``table.merge-engine.versioned.ver-column`` (ties go to the later write, as the training set orders them;
  versioned tables take no deletes). Other tables are refused for event-time views, with the fix in the message.
  A current value whose event time is still in the future (after *now*) is not valid yet: the value it replaced
  is no longer in the state, so it is served as null with status ``NOT_YET_VALID`` (the training set would give
  that older value).

Rows stay in input order (duplicates too); a null key, an absent or deleted key, or an expired value gives nulls.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, overload

import numpy as np
import polars as pl
import pyarrow as pa

from fluss_lake import options as opt
from fluss_lake.exceptions import (
    IncompleteHistoryError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    UnsupportedOperationError,
)
from fluss_lake.log.log_tablet import LogTablet
from fluss_lake.metadata.partition import with_partition_names
from fluss_lake.table import Table
from fluss_lake.training._rules import INTERNAL_PREFIX, check_names, common_key_dtype
from fluss_lake.training.feature_log import log_served_features
from fluss_lake.training.feature_view import FeatureView
from fluss_lake.training.history import as_utc, time_expr

__all__ = ["STATUS", "OnlineFeatures", "online_features"]

#: Why a view's values are what they are, per entity row.
STATUS = pl.Enum(["PRESENT", "NOT_FOUND", "OUTSIDE_MAX_AGE", "NOT_YET_VALID"])

_POS = f"{INTERNAL_PREFIX}pos"
_PART = f"{INTERNAL_PREFIX}partition"
#: A commit time the log no longer holds (its batch expired under ``table.log.ttl``).
_EXPIRED = np.iinfo(np.int64).min


@dataclass(frozen=True, slots=True)
class OnlineFeatures:
    """Online features with what a server needs to say about them (``online_features(..., with_status=True)``).

    Attributes
    ----------
    frame
        The entity rows followed by every view's feature columns (what :func:`online_features` returns).
    now
        The prediction time the values are for (UTC).
    status
        Per view (in the order given), a :data:`STATUS` Series aligned with the rows.
    value_times
        Per view, the time each value counts from (UTC, microseconds): the commit time of the key's latest change
        (commit-time views) or the row's event time (event-time views); null where no value is served.
    views
        The views, in the order given.
    request_id
        The id under which the answer was logged (``log=``), else None.
    """

    frame: pl.DataFrame
    now: datetime
    status: tuple[pl.Series, ...]
    value_times: tuple[pl.Series, ...]
    views: tuple[FeatureView, ...]
    request_id: str | None = None


@overload
def online_features(
    entity_rows: Any,
    views: FeatureView | Sequence[FeatureView],
    *,
    now: datetime | date | str | None = None,
    with_status: Literal[False] = False,
    log: Table | None = None,
    request_id: str | None = None,
) -> pl.DataFrame: ...


@overload
def online_features(
    entity_rows: Any,
    views: FeatureView | Sequence[FeatureView],
    *,
    now: datetime | date | str | None = None,
    with_status: Literal[True],
    log: Table | None = None,
    request_id: str | None = None,
) -> OnlineFeatures: ...


def online_features(
    entity_rows: Any,
    views: FeatureView | Sequence[FeatureView],
    *,
    now: datetime | date | str | None = None,
    with_status: bool = False,
    log: Table | None = None,
    request_id: str | None = None,
) -> pl.DataFrame | OnlineFeatures:
    """The feature values of every view for each entity row, as a training set would give them at `now`.

    Parameters
    ----------
    entity_rows
        The entity key columns (and anything else, kept as is): a polars DataFrame, an Arrow table, a dict of
        columns or a list of row dicts.
    views
        :class:`FeatureView` objects with a live table (:meth:`FeatureView.from_table`), exactly those a training
        set takes. Views of a served store (``serving.connect``) are answered by its server.
    now
        The prediction time (naive = UTC). Default: the clock of the first view's connection (the wall clock
        unless the connection was given another). The values are the tables' current ones, so `now` should not
        be earlier than their latest commits.
    with_status
        Return an :class:`OnlineFeatures` (frame, statuses, value times) instead of the frame.
    log, request_id
        Append the answer to this served-feature log table (:func:`~fluss_lake.training.create_feature_log`)
        under `request_id` (default: a new UUID) before returning; a failed log write fails the call.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.training import FeatureView, online_features
    >>> clock = [1_767_225_600_000]  # 2026-01-01 00:00 UTC
    >>> conn = fl.connect(tempfile.mkdtemp(), clock=lambda: clock[0]); conn.create_database("d")
    >>> _ = conn.create_table("d.c", schema={"id": "BIGINT", "tier": "STRING"}, primary_key=["id"])
    >>> customer = conn.get_table("d.c")
    >>> _ = customer.upsert([{"id": 1, "tier": "gold"}, {"id": 2, "tier": "silver"}])
    >>> clock[0] += 3_600_000; _ = customer.upsert([{"id": 2, "tier": "gold"}])
    >>> view = FeatureView.from_table(customer, entity_keys=["customer_id"], ttl="90 min", prefix="c__")
    >>> clock[0] += 3_600_000  # two hours after the first write, one after the second
    >>> online_features({"customer_id": [1, 2, 3]}, view)["c__tier"].to_list()
    [None, 'gold', None]
    """
    views = [views] if isinstance(views, FeatureView) else list(views)
    if not views or not all(isinstance(v, FeatureView) for v in views):
        raise InvalidConfigError("online_features needs one or more FeatureView objects")
    remote = [v for v in views if v.table is not None and not isinstance(v.table, Table)]
    if remote:
        return _delegate(entity_rows, views, remote, now=now, with_status=with_status, log=log, request_id=request_id)
    for view in views:
        _check_online(view)
    entities = _entity_frame(entity_rows)
    check_names(entities.schema, views, None)
    when = _now(views, now)
    outputs: dict[int, tuple[list[pl.Series], pl.Series, pl.Series]] = {}
    for group in _groups(views):  # commit times only where a rule or the caller needs them
        rows = _lookup(entities, group, times=with_status)
        for index, view in group:
            outputs[index] = _view_values(rows, view, when, status=with_status or log is not None)
    columns = [s for i in range(len(views)) for s in outputs[i][0]]
    frame = _with_columns(entities, columns)
    if not with_status and log is None:  # the frame alone: no statuses or value times built
        return frame
    result = OnlineFeatures(
        frame,
        when,
        tuple(outputs[i][1] for i in range(len(views))),
        tuple(outputs[i][2] for i in range(len(views))),
        tuple(views),
    )
    if log is not None:
        request_id = request_id or uuid.uuid4().hex
        log_served_features(log, result, request_id=request_id)
        result = replace(result, request_id=request_id)
    return result if with_status else frame


def _with_columns(frame: pl.DataFrame, columns: list[pl.Series]) -> pl.DataFrame:
    """`frame` with `columns` added (or replacing same-named ones), eagerly: no query plan per request."""
    if not columns:
        return frame
    names = {c.name for c in columns}
    if names.isdisjoint(frame.columns):
        return frame.hstack(columns)
    return frame.with_columns(columns)


def _delegate(
    entity_rows: Any,
    views: list[FeatureView],
    remote: list[FeatureView],
    *,
    now: datetime | date | str | None,
    with_status: bool,
    log: Any,
    request_id: str | None,
) -> pl.DataFrame | OnlineFeatures:
    """Views of a served store: its connection answers (one request for every view)."""
    connections = {id(getattr(v.table, "connection", None)): getattr(v.table, "connection", None) for v in views}
    connection = next(iter(connections.values()))
    answer = getattr(connection, "online_features", None)
    if len(remote) != len(views) or len(connections) != 1 or answer is None:
        raise InvalidConfigError(
            "online_features takes views of one served store, or views of live tables, not a mix; "
            f"got tables {[type(v.table).__name__ for v in views]}"
        )
    result: pl.DataFrame | OnlineFeatures = answer(
        entity_rows, views, now=now, with_status=with_status, log=log, request_id=request_id
    )
    return result


def _check_online(view: FeatureView) -> None:
    """A view online features can answer from its table's current state, or a clear error."""
    table = view.table
    if table is None:
        raise InvalidConfigError(
            f"{view.label} reads a history frame, not a live table: make it with FeatureView.from_table(table, ...) "
            "(lake=... keeps the training history) or pass table= so online features know where to look"
        )
    if not table.is_primary_key_table or table.partition_info is not None:
        raise UnsupportedOperationError(f"{view.label}: online features read a whole primary-key table")
    pk = table.schema.primary_key
    if sorted(view.keys) != sorted(pk):
        raise UnsupportedOperationError(
            f"{view.label}: keys {list(view.keys)} must be the primary key {list(pk)} of {table.path} (online "
            "features are primary-key lookups)"
        )
    if view.event_time is not None:
        options = table.info.options
        if options.get(opt.MERGE_ENGINE) != "versioned" or options.get(opt.VERSIONED_VER_COLUMN) != view.event_time:
            raise UnsupportedOperationError(
                f"{view.label}: an event-time view is served from current state only if that state holds each "
                f"key's latest row by event time, i.e. {table.path} has {opt.MERGE_ENGINE}=versioned with "
                f"{opt.VERSIONED_VER_COLUMN}={view.event_time}; it has {opt.MERGE_ENGINE}="
                f"{options.get(opt.MERGE_ENGINE, 'default (last row)')}. Use a commit-time view (event_time=None) "
                "or a versioned table"
            )


def _entity_frame(entity_rows: Any) -> pl.DataFrame:
    """The entity rows as a polars DataFrame."""
    if isinstance(entity_rows, pl.DataFrame):
        return entity_rows
    if isinstance(entity_rows, pl.LazyFrame):
        return entity_rows.collect()
    if isinstance(entity_rows, pa.Table | pa.RecordBatch):
        frame = pl.from_arrow(entity_rows)
        assert isinstance(frame, pl.DataFrame)
        return frame
    if isinstance(entity_rows, Mapping) or (
        isinstance(entity_rows, Sequence) and not isinstance(entity_rows, str | bytes)
    ):
        try:
            return pl.DataFrame(entity_rows)
        except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
            raise InvalidConfigError(f"entity rows could not be read as a table: {exc}") from None
    raise InvalidConfigError(
        f"entity rows must be a polars DataFrame, an Arrow table, a dict of columns or a list of row dicts, "
        f"got {type(entity_rows).__name__}"
    )


def _now(views: list[FeatureView], now: datetime | date | str | None) -> datetime:
    """The prediction time: `now`, else the first view's connection clock (epoch milliseconds)."""
    if now is not None:
        return as_utc(now, what="now")
    table = views[0].table
    assert table is not None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=table.connection.clock())


def _groups(views: list[FeatureView]) -> list[list[tuple[int, FeatureView]]]:
    """Views that share one lookup: same table, same entity columns for its key."""
    groups: dict[tuple[int, tuple[tuple[str, str], ...]], list[tuple[int, FeatureView]]] = {}
    for index, view in enumerate(views):
        key = (id(view.table), tuple(sorted(view.key_pairs(), key=lambda p: p[1])))
        groups.setdefault(key, []).append((index, view))
    return list(groups.values())


def _lookup(entities: pl.DataFrame, group: list[tuple[int, FeatureView]], *, times: bool) -> pl.DataFrame:
    """One batched lookup for a group's views: the table's row per entity row (input order), with ``_found``
    and, where a view needs commit times, ``__fl_commit_ms`` (epoch ms; :data:`_EXPIRED` if no longer known).

    A commit-time view needs them for its TTL, or for the value times the caller asked for (`times`); without
    either, its statuses are PRESENT or NOT_FOUND whatever the times, so the offsets are not even gathered."""
    view = group[0][1]
    table = view.table
    assert table is not None
    dtypes = table.schema.polars_schema
    keys = {}
    for entity_col, key_col in view.key_pairs():  # Series casts, not a query: this runs once per request
        column = entities.get_column(entity_col)
        if column.dtype != dtypes[key_col]:
            common_key_dtype(column.dtype, dtypes[key_col], f"{view.label} key {key_col!r}")
            column = column.cast(dtypes[key_col], strict=False)
        keys[key_col] = column if column.name == key_col else column.alias(key_col)
    ordered = [keys[c] for c in table.schema.primary_key]
    key_frame = ordered[0].to_frame().hstack(ordered[1:])
    need_times = any(v.event_time is None and (times or v.ttl is not None) for _, v in group)
    if not any(series.null_count() for series in keys.values()):
        rows = table.lookup(key_frame, with_found=True, with_offsets=need_times)
    else:  # null keys (or keys out of the table's range) match nothing: look up the rest
        complete = key_frame.select(pl.all_horizontal(pl.all().is_not_null())).to_series()
        indexed = key_frame.with_row_index(_POS).filter(complete)
        found = table.lookup(indexed.drop(_POS), with_found=True, with_offsets=need_times)
        rows = (
            pl.DataFrame({_POS: np.arange(entities.height, dtype=np.uint32)})
            .join(found.with_columns(indexed.get_column(_POS)), on=_POS, how="left", maintain_order="left")
            .drop(_POS)
            .with_columns(pl.col("_found").fill_null(False))
        )
    if need_times:
        rows = rows.hstack([pl.Series(f"{INTERNAL_PREFIX}commit_ms", _commit_times(table, rows))])
    return rows


_STATUS_NAMES = np.array(STATUS.categories.to_list())
_PRESENT, _NOT_FOUND, _OUTSIDE_MAX_AGE, _NOT_YET_VALID = (
    STATUS.categories.to_list().index(name) for name in ("PRESENT", "NOT_FOUND", "OUTSIDE_MAX_AGE", "NOT_YET_VALID")
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _view_values(
    rows: pl.DataFrame, view: FeatureView, now: datetime, *, status: bool = True
) -> tuple[list[pl.Series], pl.Series, pl.Series]:
    """A view's output columns, status and value times from its table's looked-up rows (without `status`, the
    columns only: the status and value-time Series come back empty).

    The rules are the training set's (:func:`~fluss_lake.training._rules.within_ttl`: an age equal to the TTL
    counts), computed on arrays of epoch microseconds: a served request runs no query plan. A lookup's value
    columns are null where the key is absent, so only values found but not valid (expired, not yet valid, no
    event time) and key columns are masked.
    """
    table = view.table
    assert table is not None
    n = rows.height
    now_us = (now - _EPOCH) // _MICROSECOND
    ttl_us = None if view.ttl is None else view.ttl // _MICROSECOND  # type: ignore[operator]
    found = looked_up = rows.get_column("_found").to_numpy()
    unknown_times = False
    if view.event_time is None and f"{INTERNAL_PREFIX}commit_ms" not in rows.columns:  # not asked for (_lookup)
        assert ttl_us is None
        if not status:  # every value found counts, and the lookup left the others null: only keys need masking
            return _output_columns(rows, view, found, found), _NO_STATUS, _NO_TIMES
        value_us = np.zeros(n, dtype=np.int64)
        expired = future = np.zeros(n, dtype=bool)
        unknown_times = True
    elif view.event_time is None:
        commit = rows.get_column(f"{INTERNAL_PREFIX}commit_ms").to_numpy()
        known = commit != _EXPIRED
        has_time = found & known
        value_us = np.where(has_time, commit, 0) * 1000
        if ttl_us is None:
            expired = np.zeros(n, dtype=bool)
        else:
            _check_expired_known(found & ~known, table, view)
            expired = ~(has_time & (value_us >= now_us - ttl_us)) | (found & ~known)
        future = np.zeros(n, dtype=bool)
    else:
        value_us, has_time = _event_micros(rows, table, view)
        found = found & has_time  # a row without an event time cannot be placed in time
        future = found & (value_us > now_us)
        within = np.ones(n, dtype=bool) if ttl_us is None else value_us >= now_us - ttl_us
        expired = found & ~future & ~within
    valid = found & ~expired & ~future
    if status:
        codes = np.full(n, _PRESENT, dtype=np.int64)
        codes[expired] = _OUTSIDE_MAX_AGE
        codes[future] = _NOT_YET_VALID
        codes[~found] = _NOT_FOUND
        label = view.name or view.prefix
        statuses = pl.Series(label or "status", _STATUS_NAMES[codes]).cast(STATUS)
        times_mask = np.ones(n, dtype=bool) if unknown_times else ~valid  # times not looked up: all null
        times = pl.Series(label or "time", pa.array(value_us, pa.timestamp("us", tz="UTC"), mask=times_mask))
    else:
        statuses, times = _NO_STATUS, _NO_TIMES
    return _output_columns(rows, view, valid, looked_up), statuses, times


def _output_columns(rows: pl.DataFrame, view: FeatureView, valid: np.ndarray, looked_up: np.ndarray) -> list[pl.Series]:
    """A view's feature columns from its looked-up rows, null where the value does not count (`valid` false)."""
    keyed = any(f in view.keys for f in view.features or ())  # a key column is set even where absent
    mask = None if valid.all() or (not keyed and np.array_equal(valid, looked_up)) else pl.Series(valid)
    columns = []
    for feature, name in zip(view.features or (), view.output_names(), strict=True):
        column = rows.get_column(feature).alias(name)
        if mask is not None:  # null where the value does not count (Series ops: no query plan)
            column = column.zip_with(mask, pl.Series(name, dtype=column.dtype).extend_constant(None, rows.height))
        columns.append(column)
    return columns


_NO_STATUS = pl.Series("status", [], dtype=STATUS)
_NO_TIMES = pl.Series("time", [], dtype=pl.Datetime("us", "UTC"))


def _event_micros(rows: pl.DataFrame, table: Any, view: FeatureView) -> tuple[np.ndarray, np.ndarray]:
    """The event time of each row as UTC epoch microseconds (naive datetimes and dates count as UTC, as
    :func:`~fluss_lake.training.history.time_expr` reads them), and where it is set."""
    assert view.event_time is not None
    dtype = table.schema.polars_schema[view.event_time]
    column = rows.get_column(view.event_time)
    if isinstance(dtype, pl.Datetime):  # the physical values are UTC instants whatever the zone
        micros = column.cast(pl.Datetime("us", dtype.time_zone))
    elif dtype == pl.Date:
        micros = column.cast(pl.Datetime("us"))
    else:
        time_expr(view.event_time, dtype, unit="us", what=f"{view.label} event time column {view.event_time!r}")
        raise AssertionError("time_expr refuses every other type")
    present = micros.is_not_null().to_numpy()
    return micros.to_physical().fill_null(0).to_numpy(), present


def _check_expired_known(unknown: np.ndarray, table: Any, view: FeatureView) -> None:
    """A value whose commit time the log no longer holds is expired only if ``table.log.ttl`` >= the view's TTL."""
    if not unknown.any():
        return
    log_ttl = opt.parse_duration_ms(opt.LOG_TTL, table.info.options.get(opt.LOG_TTL, "7 d"))
    ttl = view.ttl
    assert isinstance(ttl, timedelta)
    if log_ttl > 0 and timedelta(milliseconds=log_ttl) >= ttl:
        return  # the batch expired at least table.log.ttl ago, so the value is older than the view's TTL
    raise IncompleteHistoryError(
        f"{view.label}: the commit time of some current rows of {table.path} is no longer in its log "
        f"(table.log.ttl={table.info.options.get(opt.LOG_TTL, '7 d')} expired it, or the rows predate stored "
        f"offsets), so their age against ttl={ttl} is unknown; set table.log.ttl at least as long as the "
        "view's ttl"
    )


# ---------------------------------------------------------------------------------------------- commit times
class _BatchTimes:
    """Commit times of one bucket's log batches, learnt from their headers as offsets ask for them.

    A batch is immutable, so what is learnt stays true (compaction moves batches, never changes them).
    """

    _LIMIT = 1 << 16  # batches remembered per bucket before starting over

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts = np.empty(0, dtype=np.int64)
        self.ends = np.empty(0, dtype=np.int64)
        self.times = np.empty(0, dtype=np.int64)

    def _find(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.searchsorted(self.starts, offsets, side="right") - 1
        hit = at >= 0
        hit[hit] = offsets[hit] < self.ends[at[hit]]
        return at, hit

    def commit_times(self, tablet: LogTablet, offsets: np.ndarray) -> np.ndarray:
        """Epoch-ms commit time of the batch holding each offset (:data:`_EXPIRED` where it expired)."""
        with self.lock:
            at, hit = self._find(offsets)
            if not hit.all():
                self._learn(tablet, np.unique(offsets[~hit]))
                at, hit = self._find(offsets)
            out = np.full(offsets.shape, _EXPIRED, dtype=np.int64)
            out[hit] = self.times[at[hit]]
            return out

    def _learn(self, tablet: LogTablet, missing: np.ndarray) -> None:
        """Read the header of every batch holding a missing offset (one per batch, not per offset)."""
        if len(self.starts) > self._LIMIT:
            self.starts, self.ends, self.times = (np.empty(0, dtype=np.int64) for _ in range(3))
        starts, ends, times = [], [], []
        i = 0
        with tablet.lock:
            if int(missing[-1]) >= tablet.end_offset:
                tablet.refresh()
            while i < len(missing):
                offset = int(missing[i])
                headers: list[Any] = []

                def keep(header: Any, found: list[Any] = headers) -> bool:
                    found.append(header)
                    return False  # the header is enough: never decode the rows

                try:
                    for _ in tablet.read(offset, offset + 1, header_filter=keep):
                        pass
                except OffsetOutOfRangeError:
                    if offset >= tablet.earliest_offset:
                        raise
                    headers = []
                if not headers:  # expired: everything before the earliest retained batch
                    starts.append(0)
                    ends.append(tablet.earliest_offset)
                    times.append(_EXPIRED)
                    i = int(np.searchsorted(missing, tablet.earliest_offset, side="left"))
                    continue
                header = headers[0]
                starts.append(header.base_offset)
                ends.append(header.next_offset)
                times.append(header.commit_ts)
                i = int(np.searchsorted(missing, header.next_offset, side="left"))
        keep_old = ~np.isin(self.starts, starts)
        merged_starts = np.concatenate([self.starts[keep_old], np.asarray(starts, dtype=np.int64)])
        order = np.argsort(merged_starts, kind="stable")
        self.starts = merged_starts[order]
        self.ends = np.concatenate([self.ends[keep_old], np.asarray(ends, dtype=np.int64)])[order]
        self.times = np.concatenate([self.times[keep_old], np.asarray(times, dtype=np.int64)])[order]


_TIMES: weakref.WeakKeyDictionary[LogTablet, _BatchTimes] = weakref.WeakKeyDictionary()
_TIMES_LOCK = threading.Lock()


def _batch_times(tablet: LogTablet) -> _BatchTimes:
    with _TIMES_LOCK:
        times = _TIMES.get(tablet)
        if times is None:
            times = _TIMES[tablet] = _BatchTimes()
        return times


def _commit_times(table: Table, rows: pl.DataFrame) -> np.ndarray:
    """Epoch-ms commit time of each found row's latest change (from ``_bucket``/``_offset``; 0 where absent,
    :data:`_EXPIRED` where the log no longer holds it or the row predates stored offsets)."""
    out = np.zeros(rows.height, dtype=np.int64)
    found = rows.get_column("_found").to_numpy()
    if not found.any():
        return out
    if not table.is_partitioned:  # arrays only (no Polars query): the per-request path of a served feature
        column = rows.get_column("_offset").to_arrow()
        known = np.asarray(column.is_valid(), dtype=bool)
        out[found & ~known] = _EXPIRED
        positions = np.flatnonzero(found & known)
        offsets = np.asarray(column.fill_null(0), dtype=np.int64)[positions]
        buckets = rows.get_column("_bucket").to_numpy()[positions]
        tablets = table._tablets()
        for bucket in np.unique(buckets).tolist():
            where = buckets == bucket
            tablet = tablets.log_tablet(int(bucket))
            out[positions[where]] = _batch_times(tablet).commit_times(tablet, offsets[where])
        return out
    picked = rows.with_row_index(_POS).filter(pl.col("_found"))
    if table.is_partitioned:
        named = with_partition_names(picked, table.partition_keys, table.schema.polars_schema, column=_PART)
        picked = named.collect()
        handles = {name: table.partition(name) for name in picked.get_column(_PART).unique().to_list()}
        scope = [_PART, "_bucket"]
    else:
        handles, scope = {}, ["_bucket"]
    unknown = picked.get_column("_offset").is_null().to_numpy()
    if unknown.any():
        out[picked.get_column(_POS).to_numpy()[unknown]] = _EXPIRED
        picked = picked.filter(pl.col("_offset").is_not_null())
    for key, part in picked.partition_by(scope, as_dict=True).items():
        handle = handles[key[0]] if table.is_partitioned else table
        tablet = handle._tablets().log_tablet(int(key[-1]))
        offsets = part.get_column("_offset").to_numpy().astype(np.int64, copy=False)
        out[part.get_column(_POS).to_numpy()] = _batch_times(tablet).commit_times(tablet, offsets)
    return out

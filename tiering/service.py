"""The tiering service: one round over every lake-enabled table (:func:`tier_once`), or continuously within each
table's ``table.datalake.freshness`` (:class:`TieringService`), with the lag of every table.

A table takes part when ``table.datalake.enabled`` is true (alterable: enabling it later starts tiering on the
next discovery) and its ``table.datalake.format`` is unset or ``iceberg``. The continuous service runs a round
for a table every half freshness (so the lake is at most about one freshness behind), rediscovers tables every
few seconds, keeps going when one table fails (the error is reported and the round retried), and stops cleanly:
:meth:`TieringService.stop` lets the running commit finish.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fluss_lake import options as opt
from fluss_lake._utils.arguments import check_int, check_seconds
from fluss_lake.exceptions import FlussLakeError, InvalidConfigError
from fluss_lake.jobs.shard import Shard
from fluss_lake.metadata.table_path import TablePath
from tiering.committer import TableTieringReport, tier_table
from tiering.compaction import DEFAULT_COMPACTION, CompactionPolicy
from tiering.lake import Lake
from tiering.log_reader import live_offsets

if TYPE_CHECKING:
    from fluss_lake.connection import Connection
    from fluss_lake.table import Table

__all__ = ["DEFAULT_FRESHNESS_MS", "TableLag", "TieringService", "lake_tables", "table_lag", "tier_once"]

DEFAULT_FRESHNESS_MS = 180_000
_REDISCOVER_S = 5.0


@dataclass(frozen=True, slots=True)
class TableLag:
    """How far a lake table is behind its live table: offsets per bucket (``(partition name, bucket)`` for a
    partitioned table), and seconds of commits not in the lake."""

    table: TablePath
    offsets_behind: dict[Any, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total_offsets(self) -> int:
        """Offsets behind, over all buckets."""
        return sum(self.offsets_behind.values())


def lake_enabled(live: Table) -> bool:
    """Whether ``table.datalake.enabled`` is true and the format is Iceberg (or unset)."""
    options = live.info.options
    return (
        options.get(opt.DATALAKE_ENABLED, "false") == "true"
        and options.get(opt.DATALAKE_FORMAT, "iceberg") == "iceberg"
    )


def freshness_ms(live: Table) -> int:
    """``table.datalake.freshness`` in milliseconds (default 3 min, as in Fluss)."""
    raw = live.info.options.get(opt.DATALAKE_FRESHNESS)
    return opt.parse_duration_ms(opt.DATALAKE_FRESHNESS, raw) if raw else DEFAULT_FRESHNESS_MS


def lake_tables(connection: Connection) -> list[TablePath]:
    """Every live table with ``table.datalake.enabled`` (and an Iceberg or unset lake format)."""
    return [live.path for live in _enabled_tables(connection)]


def _enabled_tables(connection: Connection) -> list[Table]:
    """The live tables with the lake enabled, each got once."""
    found = []
    for database in connection.list_databases():
        for name in connection.list_tables(database):
            try:
                live = connection.get_table(TablePath(database, name))
            except FlussLakeError:  # dropped while listing
                continue
            if lake_enabled(live):
                found.append(live)
    return found


def _resolve(connection: Connection, tables: Sequence[str | TablePath] | None) -> list[Table]:
    """The tables a round tiers, each got once (the given ones must have the lake enabled)."""
    if tables is None:
        return _enabled_tables(connection)
    found = []
    for path in [TablePath.of(t) for t in tables]:
        live = connection.get_table(path)
        if not lake_enabled(live):
            raise InvalidConfigError(
                f"{path} is not enabled for the lake; alter it with set_options="
                "{'table.datalake.enabled': True} (and table.datalake.format 'iceberg' or unset)"
            )
        found.append(live)
    return found


def tier_once(
    connection: Connection,
    lake: Lake | None = None,
    *,
    tables: Sequence[str | TablePath] | None = None,
    on_report: Callable[[TableTieringReport], None] | None = None,
    expire_partitions: bool = False,
    compaction: CompactionPolicy | None = DEFAULT_COMPACTION,
    shard: Shard | None = None,
) -> list[TableTieringReport]:
    """One tiering round over the lake-enabled tables (or the given ones); returns one report per table.

    `expire_partitions`: also delete the lake data of partitions dropped live (default: the lake keeps it).
    `compaction`: the policy run on a primary-key table's current state after a round (``None``: never; see
    :func:`~tiering.compact_table`).

    `shard`: tier only the (partition, bucket) pairs of each table this shard owns (see :func:`tier_table`).

    `lake` defaults to the embedded lake beside a local store (:meth:`Lake.for_connection`). A failing table
    raises after the others were tiered (the first error, with the rest attached as notes).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.ev", schema={"v": "INT"}, options={"table.datalake.enabled": True})
    >>> _ = conn.create_table("d.off", schema={"v": "INT"})              # not enabled: not tiered
    >>> _ = conn.get_table("d.ev").append([{"v": 1}])
    >>> [(str(r.table), r.rows) for r in tier_once(conn)]
    [('d.ev', 1)]
    """
    lake = lake or Lake.for_connection(connection)
    reports, errors = [], []
    for live in _resolve(connection, tables):
        try:
            report = tier_table(live, lake, expire_partitions=expire_partitions, compaction=compaction, shard=shard)
        except FlussLakeError as exc:
            errors.append(exc)
            continue
        reports.append(report)
        if on_report is not None:
            on_report(report)
    raise_first(errors)
    return reports


def raise_first(errors: Sequence[BaseException]) -> None:
    """Raise the first of several tables' errors (if any), the others named in its notes."""
    if errors:
        first = errors[0]
        for other in errors[1:]:
            first.add_note(f"also failed: {other}")
        raise first


def table_lag(live: Table, lake: Lake, *, now_ms: int | None = None) -> TableLag:
    """Offsets per bucket not yet in the lake, and for how long the lake has been missing commits (seconds)."""
    now_ms = check_int("now_ms", now_ms, minimum=0, optional=True)
    snap = lake.snapshot(live.path)
    now_offsets = live_offsets(live)
    behind: dict[Any, int]  # keyed by (partition name, bucket), then by bucket alone if unpartitioned
    behind = {k: max(0, o - snap.start(k, now_offsets.ids.get(k[0]))) for k, o in now_offsets.end.items()}  # type: ignore[arg-type]
    if not live.is_partitioned:
        behind = {b: o for (_, b), o in behind.items()}
    now = live.connection.clock() if now_ms is None else now_ms
    if not any(behind.values()):
        return TableLag(live.path, behind, 0.0)
    since = snap.tiered_at_ms if snap.tiered_at_ms is not None else live.info.created_ms
    return TableLag(live.path, behind, max(0.0, (now - since) / 1000))


class TieringService:
    """Tier lake-enabled tables continuously, each within its ``table.datalake.freshness``.

    Parameters
    ----------
    connection, lake
        The live store and the lake (default: the embedded lake beside a local store).
    tables
        Tier only these (default: every lake-enabled table, rediscovered every few seconds).
    on_report
        Called after every round of a table with its report (or with the exception it raised).
    expire_partitions
        Also delete the lake data of partitions dropped live (default: the lake keeps it as history).
    compaction
        Policy for compacting a primary-key table's position deletes after its rounds (``None``: never).
    shard
        Tier only the (partition, bucket) pairs this :class:`~fluss_lake.jobs.Shard` owns; run one service per
        shard (in any processes) to split the tiering of every table.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.ev", schema={"v": "INT"},
    ...                       options={"table.datalake.enabled": True, "table.datalake.freshness": "1 s"})
    >>> service = TieringService(conn).start()
    >>> _ = conn.get_table("d.ev").append([{"v": 1}])
    >>> service.wait_until_caught_up(timeout_s=30)
    True
    >>> service.stop(); service.lag()[TablePath("d", "ev")].total_offsets
    0
    """

    def __init__(
        self,
        connection: Connection,
        lake: Lake | None = None,
        *,
        tables: Sequence[str | TablePath] | None = None,
        on_report: Callable[[TableTieringReport | Exception], None] | None = None,
        expire_partitions: bool = False,
        compaction: CompactionPolicy | None = DEFAULT_COMPACTION,
        shard: Shard | None = None,
    ) -> None:
        if shard is not None and not isinstance(shard, Shard):
            raise InvalidConfigError(f"shard={shard!r}: pass a fluss_lake.jobs.Shard(index, count) (or None for all)")
        self.shard = shard
        self.connection = connection
        self.expire_partitions = expire_partitions
        self.compaction = compaction
        self.lake = lake or Lake.for_connection(connection)
        self._fixed = [TablePath.of(t) for t in tables] if tables is not None else None
        self.on_report = on_report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_due: dict[TablePath, float] = {}
        self._failures: dict[TablePath, int] = {}
        self.last_reports: dict[TablePath, TableTieringReport] = {}
        self.last_errors: dict[TablePath, Exception] = {}
        self.rounds = 0

    # ------------------------------------------------------------ control
    def start(self) -> TieringService:
        """Run in a background thread; returns self."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="fluss-lake-tiering", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop after the round in progress (a commit is never interrupted)."""
        timeout_s = check_seconds("timeout_s", timeout_s)
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        """Whether the service loop is running."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def run(self, *, duration_s: float | None = None) -> None:
        """Run the loop in this thread until :meth:`stop` (or for `duration_s` seconds)."""
        duration_s = check_seconds("duration_s", duration_s, optional=True)
        deadline = time.monotonic() + duration_s if duration_s is not None else None
        tables: list[TablePath] = []
        discovered_at = -_REDISCOVER_S
        while not self._stop.is_set() and (deadline is None or time.monotonic() < deadline):
            now = time.monotonic()
            if now - discovered_at >= _REDISCOVER_S:
                tables = self._discover()
                discovered_at = now
            for path in tables:
                if self._stop.is_set():
                    break
                if self._next_due.get(path, 0.0) <= time.monotonic():
                    self._tier(path)
            wake = min([self._next_due.get(p, 0.0) for p in tables], default=time.monotonic() + 1.0)
            self._stop.wait(min(1.0, max(0.01, wake - time.monotonic())))

    def _discover(self) -> list[TablePath]:
        try:
            return self._fixed if self._fixed is not None else lake_tables(self.connection)
        except FlussLakeError as exc:
            self._emit(exc)
            return []

    def _tier(self, path: TablePath) -> None:
        started = time.monotonic()
        try:
            live = self.connection.get_table(path)
            interval = freshness_ms(live) / 2000
            report = tier_table(
                live, self.lake, expire_partitions=self.expire_partitions, compaction=self.compaction, shard=self.shard
            )
        except Exception as exc:  # noqa: BLE001 - one table failing must not stop the others
            failures = self._failures[path] = self._failures.get(path, 0) + 1
            self.last_errors[path] = exc
            self._next_due[path] = started + min(60.0, 0.5 * 2 ** min(failures, 7))
            self._emit(exc)
            return
        self._failures.pop(path, None)
        self.last_errors.pop(path, None)
        self.last_reports[path] = report
        self.rounds += 1
        self._next_due[path] = started + interval
        self._emit(report)

    def _emit(self, item: TableTieringReport | Exception) -> None:
        if self.on_report is not None:
            self.on_report(item)

    # ------------------------------------------------------------ status
    def lag(self) -> dict[TablePath, TableLag]:
        """The lag of every table the service tiers (offsets per bucket and seconds)."""
        return {live.path: table_lag(live, self.lake) for live in self._tables()}

    def _tables(self) -> list[Table]:
        """The live tables the service tiers, each got once."""
        if self._fixed is None:
            return _enabled_tables(self.connection)
        return [self.connection.get_table(p) for p in self._fixed]

    def wait_until_caught_up(self, *, timeout_s: float = 60.0, poll_s: float = 0.05) -> bool:
        """Wait until every table's lake holds its live log as of this call (a sharded service: the buckets its
        shard owns); False on timeout."""
        timeout_s, poll_s = check_seconds("timeout_s", timeout_s), check_seconds("poll_s", poll_s)
        targets = {live.path: live_offsets(live) for live in self._tables()}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(
                all(
                    self.lake.snapshot(p).start(k, now.ids.get(k[0])) >= o  # type: ignore[arg-type]
                    for k, o in now.end.items()
                    if self.shard is None or self.shard.owns(*k)
                )
                for p, now in targets.items()
            ):
                return True
            time.sleep(poll_s)
        return False

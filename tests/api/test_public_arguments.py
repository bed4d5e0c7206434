"""Every int and float argument of the public API refuses what is not a number of its kind, and changes nothing.

Python's ``bool`` is an ``int`` (``True == 1``): without a check, ``batch_rows=True`` runs one-record steps and
``snapshot_every=True`` snapshots after every write. Negative or zero counts, times and timeouts, floats for
counts, strings, NaN and infinities are refused too, with a :class:`~fluss_lake.FlussLakeError` (mostly
``InvalidConfigError``) that names the argument, before anything is written.

The table below lists the entry points with the values each must refuse and accept; to add a keyword, add a
row. ``test_every_numeric_keyword_is_listed`` inspects the public surface (``__all__`` of ``fluss_lake``,
``fluss_lake.jobs``, ``fluss_lake.training`` and ``tiering``, the classes there and the handles their methods
return) and fails when a parameter annotated ``int`` or ``float`` is in no table: a new keyword must be checked
(a row here) or excused (``NOT_INPUTS``, with why).
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import count
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import duckdb
import pytest

import fluss_lake as fl
import fluss_lake.jobs
import fluss_lake.training
import tiering
from fluss_lake.jobs import Aggregation, DeltaJoin, Job, Join, LookupCache, LookupJoin, StatefulJoin

NAN, INF = float("nan"), float("inf")
#: Modules whose classes are handles a public method may return (their methods are public verbs too).
HANDLE_MODULES = ("fluss_lake.changelog.", "fluss_lake.lookup.", "fluss_lake.write.", "fluss_lake.jobs.", "tiering.")
#: values no count accepts (a count >= 1 also refuses 0, see COUNT)
NOT_WHOLE = (True, False, 1.5, 2.0, "3", NAN)
COUNT = (*NOT_WHOLE, 0, -1)  # a whole number >= 1
NON_NEGATIVE = (*NOT_WHOLE, -1)  # a whole number >= 0 (times in epoch ms, offsets, step limits)
SECONDS = (True, 0, -1, -0.5, "1", NAN, INF)  # a number of seconds > 0
SECONDS_OR_ZERO = (True, -1, -0.5, "1", NAN, INF)  # a number of seconds >= 0


@dataclass(frozen=True)
class Arg:
    """How to call one entry point with a value for one argument, what it must refuse and accept."""

    call: Callable[[SimpleNamespace, Any], object]
    bad: tuple[Any, ...]
    good: tuple[Any, ...]
    error: type[fl.FlussLakeError] = fl.InvalidConfigError
    match: str | None = ""  # "" = the argument's name must be in the message; None = no check


# ---------------------------------------------------------------------------------------------- the environment
@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A store with a primary-key table `a` (2 buckets), `b`, a join result `r`, an aggregation table, a log
    table, a lake-enabled table tiered once, its lake and a (stopped) tiering service."""
    root = tmp_path_factory.mktemp("api")
    conn = fl.connect(str(root / "store"), log_compaction_grace_ms=0)
    conn.create_database("d")
    conn.create_table("d.a", schema={"k": "INT", "v": "INT"}, primary_key=["k"], bucket_num=2)
    conn.create_table("d.b", schema={"k": "INT", "w": "INT"}, primary_key=["k"])
    conn.create_table("d.r", schema={"k": "INT", "v": "INT", "w": "INT"}, primary_key=["k"])
    conn.create_table("d.agg", schema={"k": "INT", "n": "BIGINT"}, primary_key=["k"],
                      options={"table.merge-engine": "aggregation", "fields.n.agg": "sum"})
    conn.create_table("d.log", schema={"k": "INT", "v": "INT"}, bucket_num=2)
    conn.create_table("d.sink", schema={"k": "INT", "v": "INT", "w": "INT"})
    conn.create_table("d.lk", schema={"k": "INT", "v": "INT"}, primary_key=["k"],
                      options={"table.datalake.enabled": True})
    t = conn.get_table
    t("d.a").upsert([{"k": i, "v": i} for i in range(4)])
    t("d.b").upsert([{"k": 1, "w": 1}])
    t("d.log").append([{"k": 1, "v": 1}])
    t("d.lk").upsert([{"k": 1, "v": 1}])
    lake = tiering.Lake.for_connection(conn)
    tiering.tier_once(conn, lake)
    names = count()
    stopped = threading.Event()
    stopped.set()
    return SimpleNamespace(
        root=root, conn=conn, a=t("d.a"), b=t("d.b"), r=t("d.r"), agg=t("d.agg"), log=t("d.log"), sink=t("d.sink"),
        lk=t("d.lk"), lake=lake, service=tiering.TieringService(conn, lake, tables=[]), stopped=stopped,
        name=lambda prefix="x": f"{prefix}{next(names)}",
    )


def _delta(e: SimpleNamespace, **kw: Any) -> DeltaJoin:
    return DeltaJoin(e.r, {"a": e.a, "b": e.b}, [Join("a", "b", ["k"])], name=e.name("job-"), **kw)


# ---------------------------------------------------------------------------------------------- the table
ARGS: dict[tuple[str, str], Arg] = {
    # connections: checked before the store is opened (nothing is created)
    ("fluss_lake.connect", "snapshot_every"): Arg(
        lambda e, v: fl.connect(str(e.root / e.name("c")), snapshot_every=v), COUNT, (1, 500)),
    ("fluss_lake.connect", "max_partition_num"): Arg(
        lambda e, v: fl.connect(str(e.root / e.name("c")), max_partition_num=v), COUNT, (1, 10)),
    ("fluss_lake.connect", "log_compaction_grace_ms"): Arg(
        lambda e, v: fl.connect(str(e.root / e.name("c")), log_compaction_grace_ms=v), NON_NEGATIVE, (0, 1000)),
    ("fluss_lake.connect", "clock"): Arg(
        lambda e, v: fl.connect(str(e.root / e.name("c")), clock=v), (5, "now"), (None, lambda: 0)),
    ("fluss_lake.Connection.__init__", "snapshot_every"): Arg(
        lambda e, v: fl.Connection(e.conn.store, snapshot_every=v), COUNT, (1,)),
    ("fluss_lake.Connection.__init__", "max_partition_num"): Arg(
        lambda e, v: fl.Connection(e.conn.store, max_partition_num=v), COUNT, (1,)),
    ("fluss_lake.Connection.__init__", "log_compaction_grace_ms"): Arg(
        lambda e, v: fl.Connection(e.conn.store, log_compaction_grace_ms=v), NON_NEGATIVE, (0,)),
    ("fluss_lake.Connection.__init__", "clock"): Arg(lambda e, v: fl.Connection(e.conn.store, clock=v), (5,), (None,)),
    ("fluss_lake.Connection.create_table", "bucket_num"): Arg(
        lambda e, v: e.conn.create_table(f"d.{e.name('t')}", schema={"k": "INT"}, bucket_num=v),
        (*COUNT, 5000), (None, 1, 3), match="bucket.num"),
    ("fluss_lake.TableDescriptor.__init__", "bucket_num"): Arg(
        lambda e, v: e.conn.create_table(f"d.{e.name('t')}", fl.TableDescriptor(fl.Schema.of({"k": "INT"}),
                                                                               bucket_num=v)),
        COUNT, (None, 2), match="bucket.num"),
    # table verbs
    ("fluss_lake.Table.auto_partition", "now_ms"): Arg(lambda e, v: e.a.auto_partition(now_ms=v), NON_NEGATIVE,
                                                       (None, 0, 1_731_283_200_000)),
    ("fluss_lake.Table.expire_log", "now_ms"): Arg(lambda e, v: e.log.expire_log(now_ms=v), NON_NEGATIVE, (None, 0)),
    ("fluss_lake.Table.compact_log", "now_ms"): Arg(lambda e, v: e.log.compact_log(now_ms=v), NON_NEGATIVE, (None, 0)),
    ("fluss_lake.Table.compact_log", "target_rows"): Arg(lambda e, v: e.log.compact_log(target_rows=v), COUNT,
                                                         (1, 1000)),
    ("fluss_lake.Table.batch_headers", "bucket"): Arg(lambda e, v: e.a.batch_headers(v), (*NOT_WHOLE, -1, 2), (0, 1)),
    ("fluss_lake.Table.batch_headers", "start_offset"): Arg(lambda e, v: e.a.batch_headers(0, start_offset=v),
                                                            NON_NEGATIVE, (None, 0)),
    ("fluss_lake.Table.bucket_state", "bucket"): Arg(lambda e, v: e.a.bucket_state(v), (*NOT_WHOLE, -1, 2), (0, 1)),
    ("fluss_lake.Table.limit_scan", "limit"): Arg(lambda e, v: e.a.limit_scan(v), COUNT, (1, 3)),
    **{(f"fluss_lake.Table.{verb}", "start_timestamp"): Arg(
        (lambda verb: lambda e, v: getattr(e.a, verb)(start_timestamp=v))(verb), NON_NEGATIVE, (None, 0))
       for verb in ("scan_log", "changelog", "binlog")},
    # offsets: bools and fractions are refused here; an offset outside the log is OffsetOutOfRangeError (which
    # says where the log starts and ends), a bucket the table lacks names the buckets it has
    **{(f"fluss_lake.Table.{verb}", f"{side}_offsets"): Arg(
        (lambda verb, side: lambda e, v: getattr(e.a, verb)(**{f"{side}_offsets": {0: v}}))(verb, side),
        (True, 1.5, "0", -1, 10**6), (0,), error=fl.FlussLakeError, match=None)
       for verb in ("scan_log", "changelog", "binlog") for side in ("start", "end")},
    ("fluss_lake.Table.scan_log", "start_offsets[bucket]"): Arg(
        lambda e, v: e.a.scan_log(start_offsets={v: 0}), (True, -1, 1.5, 7), (0,), match="bucket"),
    # the log scanner a Table hands out
    ("fluss_lake.changelog.log_scanner.LogScanner.poll", "timeout"): Arg(
        lambda e, v: e.log.new_scan().poll(v), SECONDS_OR_ZERO, (0, 0.01)),
    ("fluss_lake.changelog.log_scanner.LogScanner.poll", "interval"): Arg(
        lambda e, v: e.log.new_scan().poll(0, interval=v), SECONDS, (0.01, 1)),
    ("fluss_lake.changelog.log_scanner.LogScanner.subscribe", "offset"): Arg(
        lambda e, v: e.log.new_scan().subscribe(0, v), (True, 1.5, "0"), (0, 1)),
    ("fluss_lake.changelog.log_scanner.LogScanner.subscribe_from_timestamp", "timestamp_ms"): Arg(
        lambda e, v: e.log.new_scan().subscribe_from_timestamp(v), NON_NEGATIVE, (0, 1_731_283_200_000)),
    # jobs: their constructors, run_once and run
    ("fluss_lake.jobs.Job.__init__", "batch_rows"): Arg(
        lambda e, v: Job(e.conn, e.name("job-"), {"a": e.a}, batch_rows=v), COUNT, (1, 100)),
    ("fluss_lake.jobs.DeltaJoin.__init__", "batch_rows"): Arg(lambda e, v: _delta(e, batch_rows=v), COUNT, (1, 10)),
    ("fluss_lake.jobs.StatefulJoin.__init__", "batch_rows"): Arg(
        lambda e, v: StatefulJoin(e.r, {"a": e.a, "b": e.b}, [Join("a", "b", ["k"])], name=e.name("job-"),
                                  batch_rows=v), COUNT, (1, 10)),
    ("fluss_lake.jobs.Aggregation.__init__", "batch_rows"): Arg(
        lambda e, v: Aggregation(e.log, e.agg, group_by=["k"], aggregates={"n": ("count", None)},
                                 name=e.name("job-"), batch_rows=v), COUNT, (1, 10)),
    ("fluss_lake.jobs.LookupJoin.__init__", "batch_rows"): Arg(  # as a job (with a source)
        lambda e, v: LookupJoin(e.b, on=["k"], source=e.log, sink=e.sink, name=e.name("job-"), batch_rows=v),
        COUNT, (1, 10)),
    ("fluss_lake.jobs.join", "batch_rows"): Arg(
        lambda e, v: fluss_lake.jobs.join(e.r, {"a": e.a, "b": e.b}, [Join("a", "b", ["k"])], name=e.name("job-"),
                                          batch_rows=v), COUNT, (None, 1, 10)),
    ("fluss_lake.jobs.Job.run_once", "max_steps"): Arg(lambda e, v: _delta(e).run_once(max_steps=v), NON_NEGATIVE,
                                                       (None, 0, 1)),
    ("fluss_lake.jobs.Job.run", "poll_interval"): Arg(lambda e, v: _delta(e).run(e.stopped, poll_interval=v), SECONDS,
                                                      (0.01, 2)),
    ("fluss_lake.jobs.Job.run", "stop_event"): Arg(lambda e, v: _delta(e).run(v), (None, True, 1), ()),
    # shards of jobs and tiering
    ("fluss_lake.Shard.__init__", "index"): Arg(lambda e, v: fl.Shard(v, 3), NON_NEGATIVE, (0, 2), match="Shard"),
    ("fluss_lake.Shard.__init__", "count"): Arg(lambda e, v: fl.Shard(0, v), COUNT, (1, 4), match="Shard"),
    ("fluss_lake.Shard.all", "count"): Arg(lambda e, v: fl.Shard.all(v), COUNT, (1, 3)),
    ("fluss_lake.Shard.owns", "bucket"): Arg(lambda e, v: fl.Shard(0, 2).owns(None, v), NON_NEGATIVE, (0, 5)),
    ("fluss_lake.Shard.share", "bucket_num"): Arg(lambda e, v: fl.Shard(0, 2).share(v), COUNT, (None, 1, 4)),
    # lookup caches and joins without a source
    ("fluss_lake.jobs.LookupCache.__init__", "max_rows"): Arg(lambda e, v: LookupCache(max_rows=v), (True, 1.5),
                                                              (1,)),
    ("fluss_lake.jobs.LookupCache.__init__", "expire_after_write"): Arg(
        lambda e, v: LookupCache(expire_after_write=v), (True, NAN), (None, 1.0)),
    ("fluss_lake.jobs.LookupJoin.__init__", "batch_rows[no source]"): Arg(
        lambda e, v: LookupJoin(e.b, on=["k"], batch_rows=v), (True, 0, 1.5), (1,), match="batch_rows"),
    # training
    ("fluss_lake.training.create_decision_log", "bucket_num"): Arg(
        lambda e, v: fluss_lake.training.create_decision_log(e.conn, f"d.{e.name('dl')}", bucket_num=v), COUNT,
        (None, 2), match="bucket.num"),
    ("fluss_lake.training.create_feature_log", "bucket_num"): Arg(
        lambda e, v: fluss_lake.training.create_feature_log(e.conn, f"d.{e.name('fl')}", bucket_num=v), COUNT,
        (None, 2), match="bucket.num"),
    ("fluss_lake.training.state_as_of", "offsets"): Arg(
        lambda e, v: fluss_lake.training.state_as_of(e.a, offsets={0: v}).collect(), NON_NEGATIVE, (0, 2),
        match="offsets"),
    ("fluss_lake.training.state_as_of", "snapshot_id"): Arg(
        lambda e, v: fluss_lake.training.state_as_of(e.lk, lake=e.lake, snapshot_id=v).collect(), (True, 1.5, "1"),
        (None,), match="snapshot_id"),
    **{(f"fluss_lake.training.{name}", "snapshot_ids"): Arg(
        (lambda name: lambda e, v: getattr(fluss_lake.training, name)(
            *((duckdb.connect(), "t") if name == "register_training_set" else ()),
            pl.DataFrame({"k": [1], "prediction_ts": [datetime(2030, 1, 1)]}),
            fluss_lake.training.FeatureView.from_table(e.lk), lake=e.lake, snapshot_ids={"d.lk": v}))(name),
        (True, 1.5, "1", None), (), match="snapshot_ids")
        for name in ("training_set", "register_training_set")},
    ("fluss_lake.training.training_set", "key_chunks"): Arg(
        lambda e, v: fluss_lake.training.training_set(
            pl.DataFrame({"k": [1], "prediction_ts": [datetime(2030, 1, 1)]}),
            fluss_lake.training.FeatureView(fluss_lake.training.history_of(e.a), keys=["k"]), key_chunks=v),
        COUNT, (None, 1, 3), match="key_chunks"),
    ("fluss_lake.training.FeatureView.__init__", "ttl"): Arg(
        lambda e, v: fluss_lake.training.FeatureView(fluss_lake.training.history_of(e.a), keys=["k"], ttl=v),
        (True, -1, 0, 1.5, "soon", timedelta(seconds=-1)), (None, "7 d", timedelta(hours=1)), match="ttl"),
    # tiering
    **{("tiering.CompactionPolicy.__init__", name): Arg(
        (lambda name: lambda e, v: tiering.CompactionPolicy(**{name: v}))(name),
        (*COUNT, 1) if name == "max_manifests" else COUNT, (2, 40))
       for name in ("max_delete_files", "max_manifests", "max_history_files", "small_file_rows", "check_every")},
    ("tiering.CompactionPolicy.__init__", "delete_ratio"): Arg(
        lambda e, v: tiering.CompactionPolicy(delete_ratio=v), (True, 0, -0.1, 1.5, "0.3", NAN), (0.3, 1)),
    ("tiering.Lake.remove_orphan_files", "older_than_s"): Arg(
        lambda e, v: e.lake.remove_orphan_files("d.lk", older_than_s=v, dry_run=True), SECONDS_OR_ZERO, (0, 3600)),
    ("tiering.read_lake", "snapshot_id"): Arg(
        lambda e, v: tiering.read_lake(e.lake, "d.lk", snapshot_id=v), (True, 1.5, "1"), (None,)),
    ("tiering.Lake.history", "snapshot_id"): Arg(
        lambda e, v: e.lake.history("d.lk", snapshot_id=v), (True, 1.5, "1"), (None,)),
    ("tiering.read_history", "snapshot_id"): Arg(
        lambda e, v: tiering.read_history(e.lake, "d.lk", snapshot_id=v), (True, 1.5, "1"), (None,)),
    ("tiering.union_read", "snapshot_id"): Arg(
        lambda e, v: tiering.union_read(e.lk, e.lake, snapshot_id=v), (True, 1.5, "1"), (None,)),
    ("tiering.table_lag", "now_ms"): Arg(lambda e, v: tiering.table_lag(e.lk, e.lake, now_ms=v), NON_NEGATIVE,
                                         (None, 0)),
    ("tiering.tier_table", "clock"): Arg(lambda e, v: tiering.tier_table(e.lk, e.lake, clock=v), (5, "now"), (None,)),
    ("tiering.TieringService.run", "duration_s"): Arg(lambda e, v: e.service.run(duration_s=v), SECONDS, (0.01,)),
    ("tiering.TieringService.stop", "timeout_s"): Arg(lambda e, v: e.service.stop(v), SECONDS, (1,)),
    ("tiering.TieringService.wait_until_caught_up", "timeout_s"): Arg(
        lambda e, v: e.service.wait_until_caught_up(timeout_s=v), SECONDS, (0.5,)),
    ("tiering.TieringService.wait_until_caught_up", "poll_s"): Arg(
        lambda e, v: e.service.wait_until_caught_up(poll_s=v), SECONDS, (0.01,)),
}

#: Numeric parameters of public callables that are no user input, with why.
NOT_INPUTS: dict[tuple[str, str], str] = {
    **{("fluss_lake.WriteResult.__init__", p): "a report writes return" for p in ("rows", "records", "offsets")},
    **{("fluss_lake.jobs.JobReport.__init__", p): "a report jobs return"
       for p in ("steps", "records_read", "rows_upserted", "rows_deleted", "rows_appended", "seconds")},
    **{("fluss_lake.jobs.JobStatus.__init__", p): "a report Job.status() returns"
       for p in ("checkpoint", "records_read", "rows_per_second", "lag", "offsets")},
    **{("fluss_lake.TableInfo.__init__", p): "the catalog's metadata, read, never built by users"
       for p in ("created_ms", "modified_ms", "log_compaction_grace_ms")},
    ("fluss_lake.TableInfo.new", "log_compaction_grace_ms"): "the catalog's, from a checked connection option",
    **{("fluss_lake.IntegrityReport.__init__", p): "a report verify() returns" for p in ("checked", "unverified")},
    **{("fluss_lake.Damage.__init__", p): "a report verify() returns" for p in ("bucket", "offsets")},
    **{("fluss_lake.Schema.__init__", p): "assigned by the catalog; users build schemas with Schema.of"
       for p in ("schema_id", "highest_column_id")},
    ("fluss_lake.Column.__init__", "column_id"): "assigned by the catalog; users build schemas with Schema.of",
    **{("tiering.CompactionReport.__init__", p): "a report compaction returns"
       for p in ("snapshot_id", "data_files_rewritten", "rows_rewritten", "rows_dropped", "delete_files_removed",
                 "delete_files_written", "manifests_before", "manifests_after", "seconds")},
    **{("tiering.TableTieringReport.__init__", p): "a report tiering returns"
       for p in ("rows", "history_rows", "start_offsets", "end_offsets", "skipped_offsets", "snapshot_id",
                 "history_snapshot_id", "files_rewritten", "position_deletes", "delete_files", "files_compacted",
                 "history_files_compacted", "conflicts", "seconds")},
    **{("tiering.TableLag.__init__", p): "a report table_lag returns" for p in ("offsets_behind", "seconds")},
    **{("tiering.LakeSnapshot.__init__", p): "a value read from a lake snapshot's summary"
       for p in ("snapshot_id", "offsets", "tiered_at_ms")},
    ("tiering.LakeSnapshot.from_summary", "snapshot_id"): "builds the value from a lake snapshot's summary",
    ("tiering.LakeSnapshot.offset", "bucket"): "a lookup into a snapshot's offsets (an unknown bucket gives 0)",
}

#: Entry points in modules this change could not edit (fluss_lake/jobs/lookup_join.py): strict xfails, so they
#: turn into failures (move them to ARGS) once checked.


# ---------------------------------------------------------------------------------------------- the surface
def _public_callables() -> dict[str, Callable[..., Any]]:
    """Every public function, class constructor and method (and the methods of handles public methods return),
    keyed ``module.Qualname`` by the first public module that exports it; inherited methods once."""
    found: dict[str, Callable[..., Any]] = {}
    queue: list[tuple[str, type, bool]] = []  # (module, class, exported: else a handle a verb returns)
    for module in (fl, fluss_lake.jobs, fluss_lake.training, tiering):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                queue.append((module.__name__, obj, True))
            elif inspect.isfunction(obj):
                found.setdefault(f"{module.__name__}.{name}", obj)
    seen: set[type] = set()
    while queue:
        prefix, cls, exported = queue.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        for attr, fn in inspect.getmembers(cls):
            if attr.startswith("_") and attr != "__init__":
                continue
            fn = getattr(fn, "__func__", fn)
            if not inspect.isfunction(fn):
                continue
            owner = fn.__qualname__.split(".")[0]
            if attr == "__init__" and (owner != cls.__name__ or not exported):
                continue  # object.__init__ or a base's (the base is listed itself), or a handle's (the verb builds it)
            found.setdefault(f"{prefix}.{fn.__qualname__}", fn)
            returned = _returned_class(fn)
            if returned is not None and returned not in seen:
                queue.append((returned.__module__, returned, False))
    return found


def _returned_class(fn: Callable[..., Any]) -> type | None:
    """The class a method returns when it is a handle with verbs of its own (a scanner, a lookuper, a writer): a
    class of fluss_lake's stages, not a value (metadata, reports) nor a frame."""
    annotation = inspect.signature(fn).return_annotation
    if isinstance(annotation, str):
        annotation = vars(sys.modules[fn.__module__]).get(annotation)
    if not inspect.isclass(annotation):
        return None
    module = annotation.__module__
    return annotation if module.startswith(HANDLE_MODULES) else None


def _numeric(annotation: str) -> bool:
    """Whether an annotation names int or float outside a Callable's signature."""
    text = annotation
    while "Callable[" in text:
        start = text.index("Callable[")
        depth, end = 0, start + len("Callable")
        for end in range(start + len("Callable"), len(text)):
            depth += {"[": 1, "]": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = text[:start] + text[end + 1:]
    return re.search(r"\b(int|float)\b", text) is not None


def _numeric_parameters(callables: dict[str, Callable[..., Any]] | None = None) -> set[tuple[str, str]]:
    """``(callable path, parameter)`` of every int/float parameter of `callables` (default: the core's surface)."""
    out = set()
    for path, fn in (_public_callables() if callables is None else callables).items():
        for name, param in inspect.signature(fn).parameters.items():
            annotation = param.annotation if isinstance(param.annotation, str) else repr(param.annotation)
            if name != "self" and _numeric(annotation):
                out.add((path, name))
    return out


def test_every_numeric_keyword_is_listed() -> None:
    """A public int/float parameter no row checks fails here: add it to ARGS (or NOT_INPUTS, saying why)."""
    numeric = _numeric_parameters()
    listed = set(ARGS) | set(NOT_INPUTS)
    assert not numeric - listed, f"unchecked numeric parameters: {sorted(numeric - listed)}"
    assert not set(NOT_INPUTS) - numeric, f"stale NOT_INPUTS rows: {sorted(set(NOT_INPUTS) - numeric)}"
    callables = _public_callables()
    for path, param in ARGS:  # every row names a real parameter (typos would test nothing)
        assert path in callables, path
        assert param.split("[")[0] in inspect.signature(callables[path]).parameters, (path, param)


def test_the_surface_scan_finds_what_it_should() -> None:
    """The inspection sees handles returned by Table verbs and skips Callable[[], int] clocks."""
    numeric = _numeric_parameters()
    assert ("fluss_lake.changelog.log_scanner.LogScanner.poll", "timeout") in numeric
    assert ("fluss_lake.jobs.Job.run_once", "max_steps") in numeric
    assert ("fluss_lake.connect", "clock") not in numeric
    assert _numeric("int | None") and _numeric("Mapping[int, int]") and not _numeric("Callable[[], int] | None")


# ---------------------------------------------------------------------------------------------- the checks
def _fingerprint(root: Path) -> list[tuple[str, int]]:
    """Every file under the store (and the lake inside it) with its size."""
    return sorted((os.path.relpath(os.path.join(d, f), root), os.path.getsize(os.path.join(d, f)))
                  for d, _, files in os.walk(root) for f in files)


def _shown(value: Any) -> str:
    """A test id part that is the same in every process (xdist workers compare ids): no object addresses."""
    return "<callable>" if callable(value) else repr(value)


def _cases(table: dict[tuple[str, str], Arg], which: str) -> list[Any]:
    return [pytest.param(key, value, id=f"{key[0]}:{key[1]}={_shown(value)}")
            for key, arg in table.items() for value in getattr(arg, which)]


@pytest.mark.parametrize(("key", "value"), _cases(ARGS, "bad"))
def test_bad_values_are_refused_and_change_nothing(env: SimpleNamespace, key: tuple[str, str], value: Any) -> None:
    arg = ARGS[key]
    before = _fingerprint(env.root)
    match = re.escape(key[1].split("[")[0]) if arg.match == "" else arg.match
    with pytest.raises(arg.error, match=match):
        arg.call(env, value)
    assert _fingerprint(env.root) == before


@pytest.mark.parametrize(("key", "value"), _cases(ARGS, "good"))
def test_good_values_are_accepted(env: SimpleNamespace, key: tuple[str, str], value: Any) -> None:
    ARGS[key].call(env, value)

"""Runs of the demo from the command line, against a home's Dagster instance (the one ``fluss-lake ui`` shows).

:func:`materialize` runs a job of the code location (``demo_pipeline`` by default: what **Materialize all**
does in the UI), optionally writing several days of event time in that one run; :func:`backfill` builds the
training set of a range of days in one run. Both execute in this process on the home's instance
(``<home>/dagster``, or ``$DAGSTER_HOME``) with the resources resolving to the home (``$FLUSS_LAKE_HOME``), so
their runs, materializations and partitions appear in the UI. They are what ``fluss-lake materialize`` and
``fluss-lake backfill`` call.

A backfill only reads: a home without a lake is a :class:`~tiering.home.StoreNotFoundError` that says what
to run first, and nothing is created.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import dagster as dg

from assets.partitions import add_training_days, lake_payment_days
from assets.resources import DemoScenario, LakeCatalog
from assets.tables import SOURCE_TABLES
from assets.ui import prepare_home
from fluss_lake.exceptions import InvalidConfigError
from tiering.home import HOME_ENV, Home, StoreNotFoundError

__all__ = ["JOBS", "RunOutcome", "backfill", "batches_for_days", "materialize", "open_instance", "training_days"]

#: The jobs ``fluss-lake materialize --job`` runs, with what each does.
JOBS: Mapping[str, str] = {
    "demo_pipeline": "the next batch of every stream, the three zero-state jobs, then tiering (Materialize all)",
    "live_demo": "the next batch of every stream into the live tables only",
    "tiering": "one tiering round of every demo table into the lake",
}
TRAINING_KEY = dg.AssetKey(["training", "fraud_training_set"])
# Dagster's run tags for a run over a range of partitions (what `dagster asset materialize --partition-range` sets).
_RANGE_START_TAG = "dagster/asset_partition_range_start"
_RANGE_END_TAG = "dagster/asset_partition_range_end"
# Dagster's console log stays quiet: the command prints what the run did and why a step failed (the run's whole
# log is in the home's instance: the UI shows it).
_QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What a run did: its id, whether it succeeded, each materialization's metadata, failures and failed checks."""

    run_id: str
    success: bool
    materialized: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    failures: tuple[str, ...] = ()
    failed_checks: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """The run succeeded and every check it ran passed."""
        return self.success and not self.failed_checks


def open_instance(home: Home) -> dg.DagsterInstance:
    """The home's Dagster instance (``$DAGSTER_HOME`` if set, else ``<home>/dagster``; created with telemetry off)."""
    return dg.DagsterInstance.from_config(str(prepare_home(home.root)))


@contextlib.contextmanager
def _home_environment(home: Home) -> Iterator[None]:
    """Resources resolve the embedded default from ``$FLUSS_LAKE_HOME``: point it at `home` during the run."""
    previous = os.environ.get(HOME_ENV)
    os.environ[HOME_ENV] = str(home.root)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = previous


def batches_for_days(days: float, *, window_minutes: int | None = None) -> int:
    """How many demo batches cover `days` of event time (one-hour batches by default: 24 a day).

    Examples
    --------
    >>> batches_for_days(3), batches_for_days(0.5, window_minutes=1440)
    (72, 1)
    """
    if not days > 0:
        raise InvalidConfigError(f"--days {days:g}: give a positive number of days of event time to write")
    window = window_minutes or DemoScenario().batch_window_minutes
    return max(1, math.ceil(days * 24 * 60 / window))


def _outcome(result: dg.ExecuteInProcessResult, seconds: float) -> RunOutcome:
    materialized = {
        event.asset_key.to_user_string(): {k: v.value for k, v in event.materialization.metadata.items()}
        for event in result.get_asset_materialization_events()
        if event.asset_key is not None
    }
    failures = tuple(
        f"{event.step_key}: {_root_cause(event.step_failure_data.error)}"
        for event in result.all_events
        if event.is_step_failure and event.step_failure_data is not None
    )
    failed = tuple(
        f"{e.asset_key.to_user_string()} {e.check_name}" for e in result.get_asset_check_evaluations() if not e.passed
    )
    return RunOutcome(result.run_id, result.success, materialized, failures, failed, round(seconds, 2))


def _root_cause(error: Any) -> str:
    """The innermost error of a step failure (Dagster wraps what the asset raised), as one line."""
    if error is None:
        return "failed"
    while error.cause is not None:
        error = error.cause
    return error.message.strip().splitlines()[0] if error.message.strip() else error.cls_name


def _run_sizes(days: float) -> list[int]:
    """Batches per run for `days` of event time: one run per day (24 one-hour batches), the last one shorter."""
    total, per_day = batches_for_days(days), batches_for_days(1)
    return [per_day] * (total // per_day) + ([total % per_day] if total % per_day else [])


def materialize(
    home: str | os.PathLike[str] | Home | None = None,
    *,
    job: str = "demo_pipeline",
    days: float | None = None,
    select: Sequence[str] = (),
) -> list[RunOutcome]:
    """Run one of :data:`JOBS` on the home's instance: the next batch, or `days` of event time; one outcome per run.

    With `days`, each run writes one day of batches (each source in one vectorized write per run) and runs the
    zero-state jobs once over it, so their results keep a history per day (the training set's spend features are
    as of the last day closed); only the last run tiers, once, everything into the lake. `select` limits the runs
    to some of the job's assets (user strings such as ``lake/payments``; a history key in its earlier spelling
    ``lake/<table>__history`` is accepted). Stops at the first run that fails.
    """
    from assets.definitions import defs
    from assets.lake import LAKE_GROUP, resolve_key

    home = home if isinstance(home, Home) else Home.resolve(home)
    if job not in JOBS:
        raise InvalidConfigError(f"unknown job {job!r}; choose one of {sorted(JOBS)}")
    job_def = defs.resolve_job_def(job)
    in_job = set(job_def.asset_layer.executable_asset_keys)
    keys = [resolve_key(text) for text in select]
    outside = [k.to_user_string() for k in keys if k not in in_job]
    if outside:
        hint = "; the training set is built by `fluss-lake backfill`" if TRAINING_KEY in keys else ""
        raise InvalidConfigError(f"{outside} are not assets of job {job}{hint}")
    selected = set(keys) or in_job
    sources = [name for name in SOURCE_TABLES if dg.AssetKey(name) in selected]
    if days is not None and not sources:
        raise InvalidConfigError(f"--days writes live batches; job {job} writes no live table here (use demo_pipeline)")
    graph = defs.get_repository_def().asset_graph
    before_lake = {key for key in selected if graph.get(key).group_name != LAKE_GROUP}
    sizes = _run_sizes(days) if days is not None else [None]
    instance = open_instance(home)
    outcomes = []
    for i, size in enumerate(sizes):
        last = i == len(sizes) - 1
        run_config: dict[str, Any] = dict(_QUIET)
        if size is not None:
            run_config["ops"] = {name: {"config": {"batches": size}} for name in sources}
        run_keys = selected if last else before_lake
        started = time.perf_counter()
        with _home_environment(home):
            result = job_def.execute_in_process(
                run_config=run_config,
                instance=instance,
                asset_selection=sorted(run_keys, key=str) if run_keys != in_job else None,
                raise_on_error=False,
            )
        outcomes.append(_outcome(result, time.perf_counter() - started))
        if not result.success:
            break
    return outcomes


def _lake(home: Home) -> Any:
    """The lake the code location's resources use for `home` (``<home>/lake`` unless configured otherwise)."""
    import tiering

    with _home_environment(home):
        catalog = LakeCatalog()
        return tiering.Lake(catalog.resolved_properties(), name=catalog.name)


def training_days(home: str | os.PathLike[str] | Home | None = None) -> list[str]:
    """The days the home's lake holds payments for (empty when nothing was tiered); creates nothing."""
    return lake_payment_days(_lake(home if isinstance(home, Home) else Home.resolve(home)))


def _day(text: str, what: str) -> str:
    try:
        return datetime.strptime(text, "%Y-%m-%d").strftime("%Y-%m-%d")
    except ValueError:
        raise InvalidConfigError(f"{what} {text!r} is not a date; write it as YYYY-MM-DD") from None


def backfill(
    home: str | os.PathLike[str] | Home | None = None, *, start: str | None = None, end: str | None = None
) -> tuple[list[str], RunOutcome]:
    """Build the training set of the days ``[start, end]`` (default: every day the lake has payments for) in one
    run; returns the days and the run's outcome.

    Every day in the range must have payments in the lake: a day without any is refused (it would be an empty
    training set), with the days the lake does hold.
    """
    home = home if isinstance(home, Home) else Home.resolve(home)
    lake = _lake(home)
    available = lake_payment_days(lake)
    if not available:
        raise StoreNotFoundError(
            f"the lake of home {home} ({lake!r}) holds no payments yet, so there is no day to build a training set "
            "for; write and tier some days first (`fluss-lake materialize --days 3`) or pass the --home that has them"
        )
    first = _day(start, "--from") if start else available[0]
    last = _day(end, "--to") if end else available[-1]
    if last < first:
        raise InvalidConfigError(f"--to {last} is before --from {first}")
    days = [d for d in available if first <= d <= last]
    span = _calendar(first, last)
    missing = [d for d in span if d not in available]
    if missing:
        raise InvalidConfigError(
            f"the lake has no payments on {_spell(missing)}: it holds {_spell(available)}; write more days "
            "(`fluss-lake materialize --days N`) or narrow --from/--to"
        )
    from assets.definitions import defs

    instance = open_instance(home)
    add_training_days(instance, available)
    job_def = defs.resolve_implicit_job_def_def_for_assets([TRAINING_KEY])
    assert job_def is not None  # the training set is an asset of the code location
    started = time.perf_counter()
    with _home_environment(home):
        result = job_def.execute_in_process(
            run_config=dict(_QUIET),
            instance=instance,
            asset_selection=[TRAINING_KEY],
            tags={_RANGE_START_TAG: days[0], _RANGE_END_TAG: days[-1]},
            raise_on_error=False,
        )
    return days, _outcome(result, time.perf_counter() - started)


def _calendar(first: str, last: str) -> list[str]:
    """Every day from `first` to `last` (both ``YYYY-MM-DD``)."""
    import polars as pl

    start, stop = (datetime.strptime(d, "%Y-%m-%d").date() for d in (first, last))
    return pl.date_range(start, stop, "1d", eager=True).dt.strftime("%Y-%m-%d").to_list()


def _spell(days: Sequence[str]) -> str:
    """Days as a short phrase: ``2026-11-01, 2026-11-03`` or ``2026-11-01 .. 2026-11-09 (7 days)``."""
    return ", ".join(days) if len(days) <= 3 else f"{days[0]} .. {days[-1]} ({len(days)} days)"

"""Lake assets (group ``lake``): every demo table tiered into Iceberg by :func:`tiering.tier_once`.

One asset per live table (``lake/<table>``: a log table's rows, a primary-key table's current state) plus one per
primary-key table's changelog history (``lake/<table>__hist``, the Iceberg table ``<table>__history``), each
downstream of its live table. They are produced together by the multi-asset ``tier_lake`` (a subset tiers only
the tables selected); the ``tiering`` job runs it, ``tiering_every_5_minutes`` schedules it, and
``tiering_lag_sensor`` requests a run for the tables whose lag exceeds their ``table.datalake.freshness``.
Tiering payments also adds the days they were paid on to the training set's partitions (``assets.partitions``).

The sensor's cursor is a JSON object ``{table: {bucket: live end offset}}``: the offsets a run was last requested
for. A table is requested again only once its live log moved past them, and the run key is a digest of the
requested tables and offsets, so the same lag never yields two runs (Dagster also skips a run key it has seen).

Checks on every lake table: tiering lag within freshness, lake/live row parity (at the lake's tiered offsets),
lake schema = live schema + system columns, primary keys unique in the lake.
"""

import hashlib
import json
from typing import TYPE_CHECKING, Any

import dagster as dg
import polars as pl

import tiering
from assets.checks import duplicate_keys
from assets.cluster import RayCluster
from assets.live import open_table
from assets.partitions import add_training_days, days_of
from assets.resources import LakeCatalog, LiveStore
from assets.tables import DEMO_TABLES, LiveTableSpec
from fluss_lake import options as opt
from fluss_lake.exceptions import TableNotExistError
from tiering.lake import HISTORY_SUFFIX
from tiering.schema import HISTORY_COLUMNS, SYSTEM_COLUMNS, LakeKind

if TYPE_CHECKING:
    import fluss_lake as fl

__all__ = [
    "LAKE_ASSETS",
    "LAKE_CHECKS",
    "LAKE_GROUP",
    "LAKE_SCHEDULES",
    "LAKE_SENSORS",
    "HISTORY_KEY_SUFFIX",
    "LEGACY_HISTORY_KEY_SUFFIX",
    "lagging_tables",
    "lake_key",
    "resolve_key",
    "tier_lake",
    "tiering_job",
    "tiering_lag_sensor",
    "tiering_schedule",
]

LAKE_GROUP = "lake"
#: Suffix of a history asset's key. Short, so the lineage graph's truncated labels (18 characters when zoomed
#: out, cut in the middle) still tell ``customer_360__hist`` from ``customer_sp…__hist``; with ``__history``
#: both read ``customer…__history``.
HISTORY_KEY_SUFFIX = "__hist"
#: The suffix history keys had before (``lake/customer_360__history``): still accepted by :func:`resolve_key`.
LEGACY_HISTORY_KEY_SUFFIX = "__history"
_DEFAULT_FRESHNESS_S = 180.0  # Fluss's default table.datalake.freshness


def lake_key(name: str, *, history: bool = False) -> dg.AssetKey:
    """The asset key of a demo table's lake table (``lake/<table>``) or its history (``lake/<table>__hist``).

    The history's Iceberg table keeps its name ``<table>__history`` (asset metadata ``lake_table``).

    Examples
    --------
    >>> lake_key("orders", history=True).to_user_string()
    'lake/orders__hist'
    """
    return dg.AssetKey([LAKE_GROUP, name + (HISTORY_KEY_SUFFIX if history else "")])


def resolve_key(text: str) -> dg.AssetKey:
    """An asset key from its user string; a history key in its earlier spelling maps to the current key.

    Examples
    --------
    >>> resolve_key("lake/customer_360__history").to_user_string()
    'lake/customer_360__hist'
    """
    key = dg.AssetKey.from_user_string(text)
    if len(key.path) == 2 and key.path[0] == LAKE_GROUP and key.path[1].endswith(LEGACY_HISTORY_KEY_SUFFIX):
        return lake_key(key.path[1][: -len(LEGACY_HISTORY_KEY_SUFFIX)], history=True)
    return key


def _table_of(key: dg.AssetKey) -> tuple[str, bool]:
    name = key.path[-1]
    if name.endswith(HISTORY_KEY_SUFFIX):
        return name[: -len(HISTORY_KEY_SUFFIX)], True
    return name, False


def _specs() -> list[dg.AssetSpec]:
    specs = []
    for spec in DEMO_TABLES.values():
        kind = "current state, one row per key" if spec.is_primary_key_table else "every record"
        specs.append(
            dg.AssetSpec(
                lake_key(spec.name),
                deps=[spec.name],
                group_name=LAKE_GROUP,
                skippable=True,
                kinds={"iceberg", "polars"},
                metadata={"lake_table": spec.path},
                description=f"Iceberg copy of {spec.path} ({kind}) + __bucket, __offset, __timestamp",
            )
        )
        if spec.is_primary_key_table:
            specs.append(
                dg.AssetSpec(
                    lake_key(spec.name, history=True),
                    deps=[spec.name],
                    group_name=LAKE_GROUP,
                    skippable=True,
                    kinds={"iceberg", "polars"},
                    metadata={"lake_table": spec.path + HISTORY_SUFFIX},
                    description=f"Changelog history of {spec.path} (+I -U +U -D with offset and "
                    "commit time): what point-in-time training sets read",
                )
            )
    return specs


def _offsets_json(offsets: Any) -> dg.MetadataValue:
    return dg.MetadataValue.json({str(b): int(o) for b, o in dict(offsets).items()})


def _count(frame: pl.LazyFrame) -> int:
    return int(frame.select(pl.len()).collect().item())


@dg.multi_asset(
    specs=_specs(),
    can_subset=True,
    name="tier_lake",
    description="One tiering round (tiering.tier_once) over the selected tables: the live log since the "
    "lake's offsets, committed with the new offsets in one Iceberg snapshot (exactly once)",
)
def tier_lake(context: dg.AssetExecutionContext, live: LiveStore, lake: LakeCatalog, ray: RayCluster) -> Any:
    """Tier the selected demo tables once and report each lake table's snapshot, rows and offsets.

    On a Ray cluster (`ray` has an address) each table's round is one Ray task (``fluss_ray.tier_on_ray``).
    """
    selected = sorted({_table_of(key)[0] for key in context.selected_asset_keys})
    connection, lk = live.connection(), lake.lake()
    for name in selected:
        open_table(connection, DEMO_TABLES[name])  # exists and is lake-enabled (older demo stores get altered)
    paths = [DEMO_TABLES[name].path for name in selected]
    if ray.enabled:
        import fluss_ray

        store = fluss_ray.Store(live.resolved_url(), live.resolved_storage_options())
        reports = fluss_ray.tier_on_ray(store, lk, tables=paths)
    else:
        reports = tiering.tier_once(connection, lk, tables=paths)
    for report in reports:
        name = report.table.table
        spec = DEMO_TABLES[name]
        extra: dict[str, Any] = {}
        if name == "payments" and report.rows:  # the training set's days come from the payments just tiered
            paid = connection.get_table(spec.path).scan_log(
                start_offsets=report.start_offsets, end_offsets=report.end_offsets, columns=["paid_at"]
            )
            extra["training_days_added"] = dg.MetadataValue.json(
                add_training_days(context.instance, days_of(paid["paid_at"]))
            )
        common: dict[str, Any] = {
            "lake_table": str(report.table),
            "committed": report.committed,
            "seconds": round(report.seconds, 3),
            "start_offsets": _offsets_json(report.start_offsets),
            "tiered_offsets": _offsets_json(report.end_offsets),
        }
        key = lake_key(name)
        if key in context.selected_asset_keys:
            yield dg.MaterializeResult(
                asset_key=key,
                metadata={
                    **common,
                    "rows_tiered": report.rows,
                    "snapshot_id": report.snapshot_id,
                    "dagster/row_count": _count(tiering.read_lake(lk, spec.path)),
                    **extra,
                },
            )
        key = lake_key(name, history=True)
        if spec.is_primary_key_table and key in context.selected_asset_keys:
            yield dg.MaterializeResult(
                asset_key=key,
                metadata={
                    **common,
                    "rows_tiered": report.history_rows,
                    "snapshot_id": report.history_snapshot_id,
                    "dagster/row_count": _count(tiering.read_history(lk, spec.path)),
                },
            )


#: Tier every demo table (or the subset a sensor or the UI selects).
tiering_job = dg.define_asset_job(
    "tiering",
    selection=dg.AssetSelection.groups(LAKE_GROUP),
    description="One tiering round of the demo tables into the Iceberg lake",
)

tiering_schedule = dg.ScheduleDefinition(
    name="tiering_every_5_minutes",
    job=tiering_job,
    cron_schedule="*/5 * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
)


def _freshness_s(table: "fl.Table") -> float:
    raw = table.info.options.get(opt.DATALAKE_FRESHNESS)
    return opt.parse_duration_ms(opt.DATALAKE_FRESHNESS, raw) / 1000 if raw else _DEFAULT_FRESHNESS_S


def lagging_tables(connection: "fl.Connection", lake: tiering.Lake, *, now_ms: int | None = None) -> dict[str, Any]:
    """The demo tables whose tiering lag exceeds their ``table.datalake.freshness``.

    Returns ``{table: {"offsets": {bucket: live end offset}, "lag_s": ..., "freshness_s": ...}}``.
    """
    out = {}
    for spec in DEMO_TABLES.values():
        if not connection.table_exists(spec.path):
            continue
        table = connection.get_table(spec.path)
        lag = tiering.table_lag(table, lake, now_ms=now_ms)
        freshness = _freshness_s(table)
        if lag.seconds > freshness:
            out[spec.name] = {
                "offsets": {str(b): int(o) for b, o in table.end_offsets().items()},
                "lag_s": round(lag.seconds, 3),
                "freshness_s": freshness,
            }
    return out


@dg.sensor(
    job=tiering_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Request a tiering run for the tables whose lag exceeds table.datalake.freshness "
    "(cursor: the live end offsets last requested per table)",
)
def tiering_lag_sensor(context: dg.SensorEvaluationContext, live: LiveStore, lake: LakeCatalog) -> Any:
    """One run per new lag: tables already requested at the same live offsets are not requested again."""
    cursor: dict[str, Any] = json.loads(context.cursor) if context.cursor else {}
    lagging = lagging_tables(live.connection(), lake.lake())
    new = {name: info for name, info in lagging.items() if cursor.get(name) != info["offsets"]}
    if not new:
        return dg.SkipReason(
            f"{len(lagging)} table(s) behind their freshness, all already requested"
            if lagging
            else "every table is within its freshness"
        )
    requested = {name: info["offsets"] for name, info in sorted(new.items())}
    run_key = "tier-" + hashlib.sha256(json.dumps(requested, sort_keys=True).encode()).hexdigest()[:20]
    keys = [lake_key(name) for name in requested]
    keys += [lake_key(name, history=True) for name in requested if DEMO_TABLES[name].is_primary_key_table]
    context.update_cursor(json.dumps({**cursor, **requested}, sort_keys=True))
    return dg.RunRequest(run_key=run_key, asset_selection=keys, tags={"fluss-lake/lagging": ",".join(requested)})


# ------------------------------------------------------------------ checks
def _lake_missing(spec: LiveTableSpec, history: bool) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=False,
        description=f"the lake has no {'history of ' if history else ''}{spec.path} yet; materialize lake/{spec.name}",
    )


def _lag_check(spec: LiveTableSpec) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=lake_key(spec.name),
        name="tiering_lag_within_freshness",
        description=f"the lake copy of {spec.path} is at most table.datalake.freshness behind",
    )
    def _check(live: LiveStore, lake: LakeCatalog) -> dg.AssetCheckResult:
        connection = live.connection()
        if not connection.table_exists(spec.path):
            return _lake_missing(spec, False)
        table = connection.get_table(spec.path)
        lag, freshness = tiering.table_lag(table, lake.lake()), _freshness_s(table)
        return dg.AssetCheckResult(
            passed=lag.seconds <= freshness,
            metadata={"lag_seconds": lag.seconds, "freshness_seconds": freshness, "offsets_behind": lag.total_offsets},
        )

    return _check


def _parity_check(spec: LiveTableSpec, history: bool) -> dg.AssetChecksDefinition:
    what = "changelog records" if history else ("rows per key" if spec.is_primary_key_table else "records")

    @dg.asset_check(
        asset=lake_key(spec.name, history=history),
        name="row_parity_with_live",
        description=f"the lake holds exactly the live {what} of {spec.path} below its tiered offsets",
    )
    def _check(live: LiveStore, lake: LakeCatalog) -> dg.AssetCheckResult:
        connection, lk = live.connection(), lake.lake()
        kind: LakeKind = "history" if history else ("primary-key" if spec.is_primary_key_table else "log")
        if not connection.table_exists(spec.path) or lk.load(spec.path, kind) is None:
            return _lake_missing(spec, history)
        table = connection.get_table(spec.path)
        offsets = lk.snapshot(spec.path, kind).bucket_offsets()
        ends = {b: offsets.get(b, 0) for b in table.end_offsets()}
        if history or not spec.is_primary_key_table:
            lake_rows = tiering.read_history(lk, spec.path) if history else tiering.read_lake(lk, spec.path)
            lake_n = _count(lake_rows)
            live_n = table.scan_log(end_offsets=ends, columns=[table.schema.names[0]]).height
            missing = extra = 0
        else:
            from fluss_lake.training import state_as_of

            key = list(spec.primary_key)
            live_keys = state_as_of(table, offsets=ends).select(key).collect()
            lake_keys = tiering.read_lake(lk, spec.path).select(key).collect()
            live_n, lake_n = live_keys.height, lake_keys.height
            missing = live_keys.join(lake_keys, on=key, how="anti").height
            extra = lake_keys.join(live_keys, on=key, how="anti").height
        return dg.AssetCheckResult(
            passed=live_n == lake_n and not missing and not extra,
            metadata={
                "lake_rows": lake_n,
                "live_rows_at_tiered_offsets": live_n,
                "keys_missing_in_lake": missing,
                "keys_only_in_lake": extra,
                "tiered_offsets": _offsets_json(ends),
            },
        )

    return _check


def _schema_check(spec: LiveTableSpec, history: bool) -> dg.AssetChecksDefinition:
    system = list(HISTORY_COLUMNS if history else SYSTEM_COLUMNS)

    @dg.asset_check(
        asset=lake_key(spec.name, history=history),
        name="schema_is_live_plus_system_columns",
        description=f"the lake columns are the live columns of {spec.path} then {', '.join(system)}",
    )
    def _check(live: LiveStore, lake: LakeCatalog) -> dg.AssetCheckResult:
        connection, lk = live.connection(), lake.lake()
        kind: LakeKind = "history" if history else ("primary-key" if spec.is_primary_key_table else "log")
        iceberg = lk.load(spec.path, kind) if connection.table_exists(spec.path) else None
        if iceberg is None:
            return _lake_missing(spec, history)
        fields = iceberg.schema().fields
        found = [f.name for f in fields]
        expected = [*connection.get_table(spec.path).schema.names, *system]
        optional_system = [f.name for f in fields if f.name in system and not f.required]
        return dg.AssetCheckResult(
            passed=found == expected and not optional_system,
            metadata={
                "lake_columns": dg.MetadataValue.json(found),
                "expected": dg.MetadataValue.json(expected),
                "system_columns_not_required": dg.MetadataValue.json(optional_system),
            },
        )

    return _check


def _lake_key_check(spec: LiveTableSpec) -> dg.AssetChecksDefinition:
    key = list(spec.primary_key)

    @dg.asset_check(
        asset=lake_key(spec.name),
        name="primary_key_unique_in_lake",
        description=f"the lake state of {spec.path} holds each {', '.join(key)} once",
    )
    def _check(lake: LakeCatalog) -> dg.AssetCheckResult:
        try:
            rows = tiering.read_lake(lake.lake(), spec.path).select(key)
        except TableNotExistError:
            return _lake_missing(spec, False)
        duplicates = duplicate_keys(rows, key)
        return dg.AssetCheckResult(
            passed=duplicates.height == 0,
            metadata={
                "duplicate_keys": duplicates.height,
                "examples": dg.MetadataValue.json(duplicates.head(5).to_dicts()),
            },
        )

    return _check


def _checks() -> list[dg.AssetChecksDefinition]:
    checks = []
    for spec in DEMO_TABLES.values():
        checks += [_lag_check(spec), _parity_check(spec, False), _schema_check(spec, False)]
        if spec.is_primary_key_table:
            checks += [_lake_key_check(spec), _parity_check(spec, True), _schema_check(spec, True)]
    return checks


LAKE_ASSETS = [tier_lake]
LAKE_CHECKS = _checks()
LAKE_SCHEDULES = [tiering_schedule]
LAKE_SENSORS = [tiering_lag_sensor]

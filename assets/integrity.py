"""Asset checks that verify every stored object of the demo's live tables (``Table.verify()``: checksums,
decoding, offsets without gaps, snapshots naming the segments they recorded), reporting damage by object.

They only read: repair is ``fluss-lake check --repair`` (state rebuilt from the log, log objects from the lake).
"""

import dagster as dg

from assets.resources import LiveStore
from assets.tables import DEMO_TABLES, JOB_TABLES, SOURCE_TABLES, LiveTableSpec

__all__ = ["INTEGRITY_CHECKS", "integrity_check"]


def integrity_check(spec: LiveTableSpec) -> dg.AssetChecksDefinition:
    """Check that every stored object of one live table is whole (an ERROR naming each damaged object if not)."""

    @dg.asset_check(
        asset=dg.AssetKey(spec.name),
        name="stored_objects_intact",
        description=f"every stored object of {spec.path} is whole: checksums match, offsets have no gaps",
        blocking=False,
    )
    def _check(live: LiveStore) -> dg.AssetCheckResult:
        connection = live.connection()
        if not connection.table_exists(spec.path):
            return dg.AssetCheckResult(passed=False, description=f"{spec.path} does not exist yet; materialize it")
        report = connection.get_table(spec.path).verify()
        damaged = [f"{d.kind} {d.key}: {d.problem}" for d in report.unrepaired]
        return dg.AssetCheckResult(
            passed=report.ok,
            severity=dg.AssetCheckSeverity.ERROR,
            description=(
                f"{report.checked} objects checked, all whole"
                if report.ok
                else f"{len(damaged)} damaged object(s); run `fluss-lake check --repair`"
            ),
            metadata={
                "objects_checked": report.checked,
                "objects_without_checksums": report.unverified,
                "damaged": dg.MetadataValue.json(damaged),
            },
        )

    return _check


#: One integrity check per demo table (sources and job results).
INTEGRITY_CHECKS = [integrity_check(DEMO_TABLES[name]) for name in (*SOURCE_TABLES, *JOB_TABLES)]

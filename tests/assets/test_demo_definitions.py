"""The code location loads, holds every demo asset with its lineage, checks, job and schedule; the CLI hook."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from assets.cli import register
from assets.definitions import defs
from assets.tables import DEMO_TABLES, SOURCE_TABLES


def expected_asset_keys() -> set[str]:
    """Every asset of the demo: live tables, job results, lake tables and histories, the training set."""
    lake = {f"lake/{name}" for name in DEMO_TABLES}
    lake |= {f"lake/{name}__hist" for name, spec in DEMO_TABLES.items() if spec.primary_key}
    return set(DEMO_TABLES) | lake | {"training/fraud_training_set"}


def test_the_code_location_loads_with_every_table_as_an_asset_and_lineage_to_the_training_set():
    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    assert {key.to_user_string() for key in graph.get_all_asset_keys()} == expected_asset_keys()
    for name in DEMO_TABLES:
        node = graph.get(dg.AssetKey(name))
        group = "live" if name in SOURCE_TABLES else "jobs"
        assert node.group_name == group and node.description == DEMO_TABLES[name].description
        assert {k.to_user_string() for k in graph.get(dg.AssetKey(["lake", name])).parent_keys} == {name}
    parents = {name: {k.to_user_string() for k in graph.get(dg.AssetKey(name)).parent_keys} for name in DEMO_TABLES}
    assert parents == {"customers": set(), "orders": {"customers"}, "payments": {"orders"},
                       "customer_360": {"customers"}, "orders_enriched": {"orders", "customers"},
                       "fraud_risk": {"payments", "customer_360"}, "customer_spend": {"payments"}}
    training = graph.get(dg.AssetKey(["training", "fraud_training_set"]))
    assert {k.to_user_string() for k in training.parent_keys} == {
        "lake/payments", "lake/customer_360__hist", "lake/customer_spend__hist"}
    # the partitions are the days of the data (dynamic), not a calendar from a fixed date
    assert isinstance(training.partitions_def, dg.DynamicPartitionsDefinition)
    assert training.partitions_def.name == "fraud_training_days"
    # lineage from every source to the training set
    ancestors = dg.AssetSelection.assets(training.key).upstream().resolve(graph)
    assert {"customers", "orders", "payments", "customer_360", "customer_spend"} <= {
        k.to_user_string() for k in ancestors}


def test_checks_jobs_schedules_sensor_and_resources_are_registered():
    repo = defs.get_repository_def()
    checks = {(k.asset_key.to_user_string(), k.name) for k in repo.asset_graph.asset_check_keys}
    expected = {(name, "schema_matches_declaration") for name in DEMO_TABLES}
    expected |= {(name, "stored_objects_intact") for name in DEMO_TABLES}
    expected |= {(name, "primary_key_unique") for name, spec in DEMO_TABLES.items() if spec.primary_key}
    expected |= {("customer_spend", "spend_matches_payments"), ("payments", "payment_ids_unique")}
    expected |= {("training/fraud_training_set", "every_day_has_rows")}
    for name, spec in DEMO_TABLES.items():
        expected |= {(f"lake/{name}", c) for c in ("tiering_lag_within_freshness", "row_parity_with_live",
                                                     "schema_is_live_plus_system_columns")}
        if spec.primary_key:
            expected |= {(f"lake/{name}", "primary_key_unique_in_lake")}
            expected |= {(f"lake/{name}__hist", c) for c in ("row_parity_with_live",
                                                                  "schema_is_live_plus_system_columns")}
    assert checks == expected
    job = repo.get_job("live_demo")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == set(SOURCE_TABLES)
    pipeline = repo.get_job("demo_pipeline")
    assert {k.to_user_string() for k in pipeline.asset_layer.executable_asset_keys} == \
        expected_asset_keys() - {"training/fraud_training_set"}
    tier = repo.get_job("tiering")
    assert {k.to_user_string() for k in tier.asset_layer.executable_asset_keys} == {
        k for k in expected_asset_keys() if k.startswith("lake/")}
    for name, job_name in (("live_demo_every_5_minutes", "live_demo"), ("tiering_every_5_minutes", "tiering")):
        schedule = repo.get_schedule_def(name)
        assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED and schedule.job_name == job_name
    sensor = repo.get_sensor_def("tiering_lag_sensor")
    assert sensor.job_name == "tiering" and sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert set(defs.resources) == {"live", "lake", "demo", "ray"}


def _middle_truncation(text: str, max_length: int) -> str:
    """Dagster UI's ``withMiddleTruncation`` (ui-core/src/app/Util.tsx, dagster-webserver 1.13): how the
    lineage graph shows the last part of an asset key (31 characters, 18 on zoomed-out nodes)."""
    overflow = len(text) - max_length
    if overflow <= 0:
        return text
    if max_length <= 10:
        return text[: max_length - 1] + "…"
    import re

    breakpoints = [m.start() for m in re.finditer("__" if "__" in text else r"[_>.\-]", text)]
    breakpoint = (len(text) + overflow) // 2
    usable = [i for i, bp in enumerate(breakpoints) if bp > overflow + 3]
    if usable:
        breakpoint = breakpoints[max(usable[0], len(breakpoints) // 2)]
    return text[: breakpoint - (overflow + 1)] + "…" + text[breakpoint:]


def test_the_truncation_replica_reproduces_the_reported_clash():
    # the issue: both history assets displayed as customer…__history under the old keys
    assert _middle_truncation("customer_360__history", 18) == _middle_truncation("customer_spend__history", 18) \
        == "customer…__history"


def test_every_asset_of_a_group_has_its_own_label_in_the_lineage_graph():
    graph = defs.get_repository_def().asset_graph
    for max_length in (31, 18):
        labels: dict[tuple[str, str], list[str]] = {}
        for key in graph.get_all_asset_keys():
            label = _middle_truncation(key.path[-1], max_length)
            labels.setdefault((graph.get(key).group_name, label), []).append(key.to_user_string())
        clashes = {label: keys for label, keys in labels.items() if len(keys) > 1}
        assert clashes == {}, (max_length, clashes)
    assert _middle_truncation("customer_spend__hist", 18) == "customer_sp…__hist"


def test_history_keys_of_the_earlier_spelling_still_resolve():
    from assets.lake import lake_key, resolve_key

    for name, spec in DEMO_TABLES.items():
        if spec.primary_key:
            assert resolve_key(f"lake/{name}__history") == lake_key(name, history=True)
            assert resolve_key(f"lake/{name}__hist") == lake_key(name, history=True)
            node = defs.get_repository_def().asset_graph.get(lake_key(name, history=True))
            assert node.metadata["lake_table"] == f"c360.{name}__history"  # the Iceberg table keeps its name
    assert resolve_key("lake/payments") == dg.AssetKey(["lake", "payments"])


def test_ui_subcommand_registers_on_the_fluss_lake_parser():
    parser = argparse.ArgumentParser(prog="fluss-lake")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["ui", "--port", "3999", "--home", "somewhere"])
    assert (args.host, args.port, str(args.home), callable(args.func)) == ("127.0.0.1", 3999, "somewhere", True)


def test_fluss_lake_cli_finds_ui_through_the_entry_point_group(tmp_path):
    # a distribution declaring the entry point the way pyproject.toml does; the core CLI discovers it
    dist = tmp_path / "fluss_lake_assets_probe-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fluss-lake-assets-probe\nVersion: 0\n")
    entries = _declared_commands()
    assert {"ui", "materialize", "backfill", "dagster"} <= set(entries)
    (dist / "entry_points.txt").write_text(
        "[fluss_lake.commands]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items() if v.startswith("assets.")))
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(tmp_path)])}
    for verb, expected in (("ui", "--port"), ("materialize", "--days"), ("backfill", "--from"),
                           ("dagster", "DAGSTER_HOME"), ("jobs", "--ray")):
        out = subprocess.run([sys.executable, "-m", "fluss_lake.cli", verb, "--help"], env=env, cwd=tmp_path,
                             check=False, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert expected in out.stdout, verb


def _declared_commands() -> dict[str, str]:
    """The ``fluss_lake.commands`` entry points pyproject.toml declares."""
    import tomllib

    with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["entry-points"]["fluss_lake.commands"]


def test_the_core_does_not_import_dagster():
    code = "import sys, fluss_lake, fluss_lake.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('dagster', 'pyiceberg', 'assets', 'tiering')))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_dagster_cli_validates_the_code_location(tmp_path, monkeypatch):
    from assets.ui import prepare_home

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env["DAGSTER_HOME"] = str(prepare_home(tmp_path))  # <tmp>/dagster with telemetry off
    out = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-m", "assets.definitions"],
                         env=env, cwd=repo, check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "All code locations passed validation" in out.stdout + out.stderr

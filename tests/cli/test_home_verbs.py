"""The demo's verbs on a home, for real: ``materialize`` (days of history in a few runs), ``backfill`` (the training
set of the days the lake holds), ``dagster`` (the dagster CLI with the home's instance). Each runs as its own
process (``python -m assets.cli VERB``, the same commands ``fluss-lake VERB`` dispatches to), on the embedded
default under a temporary home; the runs land in the home's Dagster instance, as the UI would show them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

import fluss_lake as fl
from assets import generators as gen
from assets.resources import DemoScenario
from assets.training import read_training_set

# one xdist worker builds the home once: the module's tests spread over both workers built it on each (30-55 s)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("home_verbs")]

REPO = Path(__file__).resolve().parents[2]


def _run(*argv: str, cwd: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLUSS_LAKE_", "DAGSTER_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "assets.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory) -> Path:
    """A home with two days of the demo materialized by ``materialize --days 2`` (session-scoped: xdist runs the
    group's tests on one worker, not one after the other, and a module fixture would be built again)."""
    home = tmp_path_factory.mktemp("cli") / "home"
    out = _run("materialize", "--home", str(home), "--days", "2", cwd=home.parent)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 day(s) of event time = 48 batches, a run per day" in out.stdout
    assert "the lake has payments on 2026-11-01 .. 2026-11-02 (2 days)" in out.stdout
    assert "lake/customer_360__hist" in out.stdout and "FAILED" not in out.stdout + out.stderr
    return home


def test_materialize_days_writes_a_run_per_day_into_the_homes_instance(demo_home):
    instance = dg.DagsterInstance.from_config(str(demo_home / "dagster"))
    runs = sorted(instance.get_runs(), key=lambda r: r.run_id)
    assert {r.job_name for r in runs} == {"demo_pipeline"} and len(runs) == 2
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    # the training set's partitions are the days of the data
    assert instance.get_dynamic_partitions("fraud_training_days") == ["2026-11-01", "2026-11-02"]
    scenario = DemoScenario().scenario()
    conn = fl.connect(str(demo_home / "live"))
    assert conn.get_table("c360.payments").scan_log().height == 48 * scenario.orders_per_batch


def test_backfill_builds_a_day_point_in_time_from_the_days_before(demo_home):
    out = _run("backfill", "--home", str(demo_home), "--from", "2026-11-02", "--to", "2026-11-02", cwd=demo_home)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "training/fraud_training_set for 2026-11-02 on home" in out.stdout and "succeeded" in out.stdout
    scenario = DemoScenario().scenario()
    frame = read_training_set(fl.connect(str(demo_home / "live")), "2026-11-02")
    day2 = pl.concat([gen.payments(scenario, b) for b in range(24, 48)])
    assert frame["payment_id"].sort().equals(day2["payment_id"].sort())
    # spend: exactly the payments of the day before (the jobs step once per day of a --days run)
    day1 = pl.concat([gen.payments(scenario, b) for b in range(24)])
    counts = day1.group_by("customer_id").agg(pl.len().cast(pl.Int64).alias("want"))
    got = frame.join(counts, on="customer_id", how="left")
    assert got["spend__order_count"].equals(got["want"], check_names=False)
    # profile: each stream's last value of day 1 (the day-2 images are stamped with the end of day 2)
    sessions = pl.concat([gen.stream(scenario, "sessions", b).with_columns(pl.lit(b).alias("b")) for b in range(24)])
    last = sessions.sort("b").unique("customer_id", keep="last").select("customer_id", "sessions_7d")
    got = frame.join(last, on="customer_id", how="left")
    assert got["c360__sessions_7d"].equals(got["sessions_7d"], check_names=False)
    assert got["c360__sessions_7d"].null_count() < got.height


def test_backfill_refuses_days_without_data_and_a_home_without_a_lake(demo_home, tmp_path):
    out = _run("backfill", "--home", str(demo_home), "--from", "2026-11-02", "--to", "2026-11-04", cwd=tmp_path)
    assert out.returncode == 2
    assert "no payments on 2026-11-03, 2026-11-04: it holds 2026-11-01, 2026-11-02" in out.stderr
    out = _run("backfill", "--home", str(demo_home), "--from", "2026-11-31", cwd=tmp_path)
    assert out.returncode == 2 and "is not a date; write it as YYYY-MM-DD" in out.stderr
    out = _run("backfill", cwd=tmp_path)  # the default home ./.fluss-lake, which does not exist
    assert out.returncode == 2 and "holds no payments yet" in out.stderr and "fluss-lake materialize" in out.stderr
    assert os.listdir(tmp_path) == []  # nothing created


def test_materialize_continues_selects_by_old_or_new_keys_and_refuses_what_it_cannot_do(demo_home, tmp_path):
    out = _run("materialize", "--home", str(demo_home), "--job", "live_demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"payments\s+batch 48,", out.stdout), out.stdout  # the batch after the two days
    # a history key in its earlier spelling still selects the asset
    out = _run("materialize", "--home", str(demo_home), "--select", "lake/customer_360__history",
               "--select", "lake/payments", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "lake/customer_360__hist" in out.stdout and "lake/payments" in out.stdout
    assert "lake/orders " not in out.stdout  # only the selected assets ran
    out = _run("materialize", "--home", str(demo_home), "--job", "tiering", "--days", "1", cwd=tmp_path)
    assert out.returncode == 2 and "writes no live table" in out.stderr
    out = _run("materialize", "--home", str(demo_home), "--select", "training/fraud_training_set", cwd=tmp_path)
    assert out.returncode == 2 and "fluss-lake backfill" in out.stderr


def test_dagster_runs_with_the_homes_instance_even_from_a_relative_dagster_home(demo_home, tmp_path):
    out = _run("dagster", "--home", str(demo_home), "asset", "list", "-m", "assets.definitions", cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "lake/customer_spend__hist" in out.stdout and "training/fraud_training_set" in out.stdout
    # the docs' old recipe failed on a relative DAGSTER_HOME; the command makes it absolute (and creates it)
    out = _run("dagster", "instance", "info", cwd=tmp_path, extra_env={"DAGSTER_HOME": "rel/dagster"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert str(tmp_path / "rel" / "dagster") in out.stdout
    out = _run("dagster", cwd=tmp_path)
    assert out.returncode == 2 and "name a dagster command" in out.stderr


def test_a_failing_run_exits_1_with_its_cause_in_one_line(tmp_path):
    home = tmp_path / "home"
    conn = fl.connect(str(home / "live"))  # an older store whose orders table differs from the declaration
    conn.create_database("c360")
    conn.create_table("c360.orders", schema={"order_id": "BIGINT", "amount": "DOUBLE"}, primary_key=["order_id"])
    out = _run("materialize", "--home", str(home), "--job", "live_demo", cwd=tmp_path)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "FAILED orders: fluss_lake.exceptions.SchemaMismatchError: table c360.orders" in out.stderr
    assert "does not match the demo's declaration" in out.stderr and "Stack Trace" not in out.stderr
    assert "the run's log: `fluss-lake ui`, Runs," in out.stderr

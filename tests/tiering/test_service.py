"""The continuous service (freshness, enabling, lag, clean stop) and the ``tier`` command."""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
import time

import pytest
from tiering_helpers import LAKE_ON, lake_rows

import fluss_lake as fl
import tiering.service as service_module
from fluss_lake.metadata.table_path import TablePath
from tiering import Lake, TieringService, table_lag, tier_once
from tiering.cli import register

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_service_keeps_tables_fresh_honours_enabled_and_stops_cleanly(local, monkeypatch):
    monkeypatch.setattr(service_module, "_REDISCOVER_S", 0.2)
    conn, lake = local
    conn.create_table("d.fast", schema={"v": "INT"}, options={**LAKE_ON, "table.datalake.freshness": "1 s"})
    conn.create_table("d.slow", schema={"v": "INT"}, options={**LAKE_ON, "table.datalake.freshness": "1 h"})
    conn.create_table("d.off", schema={"v": "INT"})
    fast, slow, off = (conn.get_table(f"d.{n}") for n in ("fast", "slow", "off"))
    slow.append([{"v": 0}])
    seen: list[object] = []
    service = TieringService(conn, lake, on_report=seen.append).start()
    try:
        assert service.wait_until_caught_up(timeout_s=30)
        for i in range(5):
            fast.append([{"v": i}])
            slow.append([{"v": i}])
            off.append([{"v": i}])
            time.sleep(0.1)
        deadline = time.monotonic() + 20
        while table_lag(fast, lake).total_offsets and time.monotonic() < deadline:
            time.sleep(0.05)
        assert table_lag(fast, lake).total_offsets == 0  # within its 1 s freshness
        lags = service.lag()
        assert lags[TablePath("d", "slow")].total_offsets == 5 and lags[TablePath("d", "slow")].seconds > 0
        assert TablePath("d", "off") not in lags and lake.load("d.off") is None
        # enabling a table later makes the service pick it up
        conn.alter_table("d.off", set_options={**LAKE_ON, "table.datalake.freshness": "1 s"})
        deadline = time.monotonic() + 20
        while (lake.load("d.off") is None or table_lag(off, lake).total_offsets) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(lake_rows(lake, "d.off")["v"].to_list()) == list(range(5))
    finally:
        service.stop()
    assert not service.running and not service._thread.is_alive()
    assert not [item for item in seen if isinstance(item, Exception)]
    rounds = service.rounds
    fast.append([{"v": 99}])
    time.sleep(0.6)
    assert service.rounds == rounds and table_lag(fast, lake).total_offsets == 1  # stopped means stopped


def test_service_reports_a_failing_table_and_keeps_tiering_the_others(local, monkeypatch):
    conn, lake = local
    conn.create_table("d.good", schema={"v": "INT"}, options={**LAKE_ON, "table.datalake.freshness": "1 s"})
    conn.create_table("d.bad", schema={"v": "INT"}, options={**LAKE_ON, "table.datalake.freshness": "1 s"})
    conn.get_table("d.bad").append([{"v": 1}])
    tier_once(conn, lake)
    conn.drop_table("d.bad")  # recreated: its lake table belongs to the old incarnation
    conn.create_table("d.bad", schema={"v": "INT"}, options={**LAKE_ON, "table.datalake.freshness": "1 s"})
    conn.get_table("d.bad").append([{"v": 2}])
    conn.get_table("d.good").append([{"v": 1}])
    seen: list[object] = []
    service = TieringService(conn, lake, on_report=seen.append)
    service.run(duration_s=1.5)
    assert isinstance(service.last_errors[TablePath("d", "bad")], fl.LakeTableMismatchError)
    assert any(isinstance(item, fl.LakeTableMismatchError) for item in seen)
    assert lake_rows(lake, "d.good")["v"].to_list() == [1]
    assert lake_rows(lake, "d.bad")["v"].to_list() == [1]  # untouched


def test_tier_command_registers_into_argparse_and_runs_once(local):
    conn, lake = local
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    conn.create_table("d.kv", schema={"k": "INT"}, primary_key=["k"], options=LAKE_ON)
    conn.get_table("d.ev").append([{"v": 1}, {"v": 2}])
    conn.get_table("d.kv").upsert([{"k": 1}])
    parser = argparse.ArgumentParser(prog="fluss-lake")
    register(parser.add_subparsers(dest="command", required=True))
    with pytest.raises(SystemExit):  # --once or --continuous is required
        parser.parse_args(["tier", "--store", conn.url])
    args = parser.parse_args(["tier", "--once", "--store", conn.url])
    out = io.StringIO()
    assert args.func(args, out=out) == 0
    text = out.getvalue()
    assert "d.ev" in text and "+2 rows" in text and "d.kv" in text and "history +1" in text
    assert "tiered 2 table(s), 3 rows" in text
    assert lake_rows(lake, "d.ev").height == 2
    out = io.StringIO()
    assert args.func(args, out=out) == 0 and "up to date" in out.getvalue()
    bad = parser.parse_args(["tier", "--once", "--store", conn.url, "--catalog", "no-equals-sign"])
    assert bad.func(bad, out=io.StringIO()) == 2


def test_python_m_tiering_continuous_stops_cleanly_on_sigterm(local):
    conn, lake = local
    conn.create_table("d.ev", schema={"v": "INT"}, options={**LAKE_ON, "table.datalake.freshness": "1 s"})
    conn.get_table("d.ev").append([{"v": 1}])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "tiering", "tier", "--continuous", "--store", conn.url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while lake.snapshot("d.ev").offset(0) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        conn.get_table("d.ev").append([{"v": 2}])
        while lake.snapshot("d.ev").offset(0) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "tiering continuously" in out and "stopped cleanly" in out and "lag d.ev" in out
    assert sorted(lake_rows(lake, "d.ev")["v"].to_list()) == [1, 2]
    assert isinstance(Lake.for_connection(conn), Lake)


def test_fluss_lake_command_finds_tier_through_the_entry_point_group(local, monkeypatch, capsys):
    """The core's ``fluss-lake`` command with the entry point pyproject declares (``tier =
    "tiering.cli:register"`` in ``fluss_lake.commands``). Only the installed-package metadata is stood in for:
    the worktree is not pip-installed here, so ``entry_points`` returns that one real EntryPoint."""
    from importlib.metadata import EntryPoint

    import fluss_lake.cli as core_cli

    conn, lake = local
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    conn.get_table("d.ev").append([{"v": 7}])
    entry = EntryPoint(name="tier", value="tiering.cli:register", group=core_cli.COMMAND_GROUP)
    monkeypatch.setattr(core_cli, "entry_points", lambda group: [entry] if group == core_cli.COMMAND_GROUP else [])
    assert core_cli.main(["tier", "--once", "--store", conn.url]) == 0
    assert "tiered 1 table(s), 1 rows" in capsys.readouterr().out
    assert lake_rows(lake, "d.ev")["v"].to_list() == [7]

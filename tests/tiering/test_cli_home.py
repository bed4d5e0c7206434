"""The home: ``fluss-lake tier`` and ``Lake.for_home`` / ``Lake.for_connection`` find the store and lake that
``fluss-lake ui`` / ``materialize`` keep under one folder, and reading never creates an empty store or lake."""

from __future__ import annotations

import argparse
import io
import os

import pytest
from tiering_helpers import LAKE_ON, lake_rows

import fluss_lake as fl
import tiering
from tiering import Lake
from tiering.cli import register
from tiering.home import HOME_ENV, Home


def _tier(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="fluss-lake")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["tier", *argv])
    out = io.StringIO()
    code = args.func(args, out=out)
    return code, out.getvalue(), capsys.readouterr().err


def _files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No home or store from the environment; the working directory is an empty folder."""
    for name in (HOME_ENV, "FLUSS_LAKE_URL"):
        monkeypatch.delenv(name, raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def _home_with_a_table(root) -> fl.Connection:
    home = Home.resolve(root)
    conn = fl.connect(str(home.live))
    conn.create_database("d")
    conn.create_table("d.ev", schema={"v": "INT"}, options=LAKE_ON)
    conn.get_table("d.ev").append([{"v": 1}, {"v": 2}])
    return conn


def test_tier_without_options_tiers_the_default_home_into_its_lake(clean_env, capsys):
    _home_with_a_table(clean_env / ".fluss-lake")
    code, out, _ = _tier(["--once"], capsys)
    assert code == 0 and "tiered 1 table(s), 2 rows" in out
    assert str(clean_env / ".fluss-lake" / "live") in out
    # the home's lake (what the Dagster resources use), never a folder beside the store or ./fluss-lake-data
    assert lake_rows(Lake.for_home(clean_env / ".fluss-lake"), "d.ev").height == 2
    assert not (clean_env / ".fluss-lake" / "live" / "_lake").exists()
    assert sorted(os.listdir(clean_env)) == [".fluss-lake"]


def test_tier_with_home_or_environment_names_the_same_home(clean_env, tmp_path, monkeypatch, capsys):
    _home_with_a_table(tmp_path / "elsewhere")
    code, out, _ = _tier(["--once", "--home", str(tmp_path / "elsewhere")], capsys)
    assert code == 0 and "2 rows" in out
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "elsewhere"))
    code, out, _ = _tier(["--once"], capsys)
    assert code == 0 and "up to date" in out  # the same lake: nothing left to tier
    with pytest.raises(SystemExit):  # a home or a store, not both
        _tier(["--once", "--home", "h", "--store", "s"], capsys)


def test_tier_refuses_a_missing_store_and_creates_nothing(clean_env, tmp_path, capsys):
    code, out, err = _tier(["--once"], capsys)
    assert code == 2 and out == ""
    assert "has no store" in err and "nothing to tier" in err and "fluss-lake materialize" in err
    code, _, err = _tier(["--once", "--store", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "no store at" in err
    code, _, err = _tier(["--continuous", "--duration", "0", "--home", str(tmp_path / "no-home")], capsys)
    assert code == 2
    assert os.listdir(clean_env) == [] and not (tmp_path / "nowhere").exists() and not (tmp_path / "no-home").exists()


def test_tier_points_at_the_old_default_store_when_it_is_there(clean_env, capsys):
    conn = fl.connect(str(clean_env / "fluss-lake-data"))  # a store the previous version's default created
    conn.create_database("d")
    code, _, err = _tier(["--once"], capsys)
    assert code == 2 and "pass --store fluss-lake-data" in err
    code, out, _ = _tier(["--once", "--store", "fluss-lake-data"], capsys)  # still tiered as before
    assert code == 0 and "has no tables" in out


def test_tier_says_when_a_store_has_no_table_to_tier(clean_env, capsys):
    home = Home.resolve(clean_env / "h")
    conn = fl.connect(str(home.live))
    before = _files(clean_env)
    code, out, _ = _tier(["--once", "--home", str(home)], capsys)
    assert code == 0 and f"nothing to tier: the store {conn.url} has no tables" in out
    conn.create_database("d")
    conn.create_table("d.off", schema={"v": "INT"})
    code, out, _ = _tier(["--once", "--home", str(home)], capsys)
    assert code == 0 and "none of the 1 table(s)" in out and "table.datalake.enabled" in out
    assert not home.has_lake() and not (home.live / "_lake").exists()
    assert [f for f in _files(clean_env) if f not in before and "lake" in f] == []


def test_lake_for_home_and_for_connection_of_a_home_store_read_what_was_tiered(clean_env, tmp_path):
    conn = _home_with_a_table(tmp_path / "home")
    tiering.tier_once(conn, Lake.for_home(tmp_path / "home"))
    # what a user tries first: a connection to the home's store; its lake is the home's, not an empty _lake
    found = Lake.for_connection(fl.connect(str(tmp_path / "home" / "live")))
    assert found.properties == Lake.for_home(tmp_path / "home").properties
    assert tiering.read_lake(found, "d.ev").collect()["v"].sort().to_list() == [1, 2]
    assert not (tmp_path / "home" / "live" / "_lake").exists()
    # a store that is not a home's keeps its lake beside it
    other = fl.connect(str(tmp_path / "plain"))
    assert Lake.for_connection(other).properties["uri"].endswith(os.path.join("plain", "_lake", "catalog.db"))


def test_reading_a_lake_that_was_never_tiered_creates_nothing(clean_env, tmp_path):
    lake = Lake.for_home(tmp_path / "empty-home")
    assert lake.load("d.ev") is None and lake.snapshot("d.ev").offsets == {}
    with pytest.raises(fl.TableNotExistError, match="tier it first"):
        tiering.read_lake(lake, "d.ev")
    assert not (tmp_path / "empty-home").exists()

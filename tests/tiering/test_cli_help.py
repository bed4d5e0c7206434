"""``fluss-lake --help`` and ``fluss-lake tier --help`` say what the verbs do (not how they are plugged in)."""

from __future__ import annotations

import contextlib
import io

import pytest

import fluss_lake.cli as core_cli


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        core_cli.main(argv)
    assert done.value.code == 0
    return " ".join(out.getvalue().split())


VERBS = ("demo", "ui", "materialize", "backfill", "tier", "check", "dagster")


def test_the_command_help_names_every_verb() -> None:
    text = _help(["--help"])
    listed = text.split("{", 1)[1].split("}", 1)[0].split(",")
    assert set(VERBS) <= set(listed), listed  # the installed entry points (pyproject.toml) bring all but demo
    description = text.split("positional arguments")[0]
    for verb in VERBS:
        assert f"'{verb}'" in description, verb
    assert "--home" in description and "FLUSS_LAKE_HOME" in description


def test_tier_help_says_what_tiering_does() -> None:
    text = _help(["tier", "--help"])
    assert "exactly once" in text and "resumes where it left off" in text and "--continuous" in text
    assert "entry-point" not in text and "entry point" not in text


def test_tier_help_says_where_the_store_is_and_that_none_is_created() -> None:
    text = _help(["tier", "--help"])
    assert "--home" in text and "--store" in text and "FLUSS_LAKE_HOME" in text
    assert "never created" in text


def test_the_home_verbs_say_what_they_do() -> None:
    assert "Materialize all" in _help(["materialize", "--help"]) and "--days" in _help(["materialize", "--help"])
    backfill = _help(["backfill", "--help"])
    assert "--from" in backfill and "--to" in backfill and "creates nothing" in backfill
    assert "DAGSTER_HOME" in _help(["dagster", "--help"])

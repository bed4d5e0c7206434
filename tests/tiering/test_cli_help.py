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


def test_the_command_help_names_every_verb() -> None:
    text = _help(["--help"])
    assert "{demo,check,tier,ui}" in text
    for verb in ("'demo'", "'ui'", "'tier'"):
        assert verb in text.split("positional arguments")[0], verb


def test_tier_help_says_what_tiering_does() -> None:
    text = _help(["tier", "--help"])
    assert "exactly once" in text and "resumes where it left off" in text and "--continuous" in text
    assert "entry-point" not in text and "entry point" not in text

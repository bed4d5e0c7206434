"""The damage matrix read by a new process: per kind of object, every damage, read in a child process (a tiny
script printing the answer as JSON, or the exception's class, key and message) by one read path that reads it.

Repaired state (KV segments, index files, manifests) is read twice, each time in a new connection: the first read
repairs and warns, the second finds the repair in the store and warns no more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from integrity_helpers import (
    PATHS,
    TARGETS,
    XFAIL,
    Answer,
    Case,
    CopyStore,
    Objects,
    Pristine,
    connect,
    damage,
    judge,
    untailed,
)

from fluss_lake.exceptions import CorruptedDataError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: The path each kind of object is read by in the child.
REOPEN = {
    "log-batch": "to_polars",
    "log-batch@newest": "scan_log",
    "log-segment": "changelog",
    "pk-log-batch": "scan_log",
    "pk-log-batch@newest": "lookup",
    "pk-log-batch@covered": "to_polars",
    "kv-segment": "lookup",
    "kv-index": "lookup",
    "kv-manifest": "to_polars",
    "job-checkpoint": "delta-join",
    "table-meta": "to_polars",
    "partition-record": "changelog",
}
CHILD = "import sys, integrity_helpers; integrity_helpers.child_main(sys.argv[1:])"


def _run_child(requests: list[list[str]]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *(json.dumps(r) for r in requests)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == len(requests), done.stdout + done.stderr
    return lines


def _answer(reply: dict) -> Answer | BaseException:
    """A child's reply as the parent's judge takes it (JSON-normalised rows, or the error it reported)."""
    if "answer" in reply:
        return Answer(tuple(reply["answer"]["columns"]), tuple(tuple(r) for r in reply["answer"]["rows"]))
    error = reply["error"]
    if error["class"] == CorruptedDataError.__name__:
        return CorruptedDataError(error["message"], key=error["key"])
    return AssertionError(f"the child raised {error['class']}: {error['message']}")


def _normalised(answer: Answer) -> Answer:
    body = answer.to_json()
    return Answer(tuple(body["columns"]), tuple(tuple(r) for r in body["rows"]))


@pytest.mark.parametrize("kind", list(REOPEN))
def test_damage_read_in_a_new_process(kind: str, pristine: Pristine, copy_store: CopyStore, tmp_path: Path) -> None:
    target, path = TARGETS[kind], REOPEN[kind]
    source = pristine(target.store)
    key, partner = target.pick(Objects(source))
    read = PATHS[path]
    expected = _normalised(read(connect(str(copy_store(source, "before")), tmp_path / "s0"), target.table, tmp_path))
    limit = None
    if target.limit:
        never = copy_store(untailed(source), "never-written")
        limit = _normalised(read(connect(str(never), tmp_path / "s1"), target.table, tmp_path / "lake-never"))
    damages = [d for d in target.damages if (kind, d, path) not in XFAIL]
    assert damages
    reads = 2 if target.repaired else 1
    requests = []
    for how in damages:
        after = copy_store(source, f"after-{how}")
        damage(Objects(after), key, how, partner)
        requests += [[str(after), target.table, path, str(tmp_path / f"work-{how}-{n}")] for n in range(reads)]
    replies = iter(_run_child(requests))
    for how in damages:
        first = next(replies)
        judge(expected, _answer(first), Case(target, how, path, tmp_path, key, partner, first["warnings"]), limit=limit)
        if reads == 2:
            second = next(replies)
            assert _answer(second) == expected, f"{how}: the second process does not read the repaired state"
            assert second["warnings"] == [], f"{how}: the repair did not stay: {second['warnings']}"

"""The damage matrix (issue 17, item 7): every kind of stored object, damaged every way, read every way that
reads it, gives the right answer or raises :class:`~fluss_lake.CorruptedDataError` naming the object: never
different data, never a raw Arrow, LZ4, JSON or OS error.

Cells are ``<object kind>/<damage>/<read path>`` (``log-batch/flip@middle/to_polars``):

object kinds
    ``log-batch`` (a loose batch in the middle of a log table's bucket), ``log-batch@newest`` (the newest batch of
    a bucket), ``log-segment`` (a compacted log segment; ``log-segment@oldest``: the first object of a bucket),
    ``pk-log-batch`` (a primary-key table's changelog batch the newest state snapshot covers),
    ``pk-log-batch@newest`` (one after the snapshot), ``pk-log-batch@covered`` (a bucket's newest batch that its
    snapshot covers), ``kv-segment``, ``kv-index`` (a segment's index file), ``kv-manifest`` (a state snapshot
    manifest), ``job-checkpoint`` (a delta join's), ``table-meta`` (the newest table metadata version),
    ``partition-record``.
damages
    truncated to 0 bytes, to half, by its last 8 bytes (exactly the checksum trailer of a binary object); the
    lowest bit of one byte flipped at its start, middle, 8 bytes before its end and at its last byte; deleted;
    its bytes exchanged with another object of the same kind in the same bucket (or folder); for JSON objects also
    one digit changed in their first value (a manifest's offset, a checkpoint's number, an id).
read paths
    ``to_polars``, ``lookup`` (present, updated, deleted, never written keys), ``scan_log``, ``changelog``
    (``$changelog``), ``delta-join`` (the job resumed from its checkpoint and run to the end: its result table), and
    ``tiering`` (one round into a fresh sqlite-catalog lake: the rows read back through pyiceberg; it costs about
    a second, so it runs one damage of each class: ``TIERING_DAMAGES``). Each damaged read runs in a fresh
    connection (``test_reopen.py``: in a new process; ``test_s3.py``: on moto S3).

Expected answers are computed in the same test on an undamaged copy of the store. Damage to state (KV segments,
index files, manifests) must be repaired from the log ("the log is the truth"): the right answer, and a warning on
the ``fluss_lake.integrity`` logger naming the object wherever the object is read.

Known limits, asserted as far as they are detectable:

* Deleting the *newest* batch of a bucket when nothing recorded a later offset (no state snapshot past it, no job
  checkpoint, no lake snapshot, not this process's view of the log) is indistinguishable from a write that never
  happened. Those cells (``*@newest/delete/*``) accept exactly the answer of the store saved right before that
  write (built independently, not by deleting the object), besides the right answer or the error. When a state
  snapshot of a primary-key bucket lies past the batch (``pk-log-batch@covered/delete``) or the process had seen the
  batch (``test_known_limits.py``), the loss is raised.
* A deleted index file is built again in memory without a trace (segments written by older versions have none),
  and a deleted newest snapshot manifest makes the older snapshot restored and the log replayed (a snapshot never
  published looks the same): both answer rightly, without a warning.

Cells that fail today are strict xfails with the precise reason (``integrity_helpers.XFAIL``): deleting a bucket's
oldest object (it looks like TTL expiry), deleting or swapping table metadata versions, deleting a partition record,
and tiering a primary-key bucket whose covered newest batch was deleted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from integrity_helpers import (
    PATHS,
    TARGETS,
    XFAIL,
    Case,
    CopyStore,
    IntegrityLog,
    Objects,
    Pristine,
    cells,
    connect,
    damage,
    judge,
    outcome,
    untailed,
)


def _cells() -> list:
    params = []
    for target, how, path in cells():
        reason = XFAIL.get((target.name, how, path))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(target.name, how, path, id=f"{target.name}/{how}/{path}", marks=marks))
    return params


@pytest.mark.parametrize(("kind", "how", "path"), _cells())
def test_damage(
    kind: str,
    how: str,
    path: str,
    pristine: Pristine,
    copy_store: CopyStore,
    integrity_log: IntegrityLog,
    tmp_path: Path,
) -> None:
    target = TARGETS[kind]
    source = pristine(target.store)
    key, partner = target.pick(Objects(source))
    read = PATHS[path]

    before = copy_store(source, "before")
    expected = read(connect(str(before), tmp_path / "state-before"), target.table, tmp_path / "lake-before")
    limit = None
    if how in target.limit:
        never = copy_store(untailed(source), "never-written")
        limit = read(connect(str(never), tmp_path / "state-never"), target.table, tmp_path / "lake-never")
        assert limit != expected
    assert integrity_log() == [], "an undamaged store read with integrity warnings"

    after = copy_store(source, "after")
    damage(Objects(after), key, how, partner)
    got = outcome(lambda: read(connect(str(after), tmp_path / "state-after"), target.table, tmp_path / "lake-after"))
    judge(expected, got, Case(target, how, path, tmp_path, key, partner, integrity_log()), limit=limit)

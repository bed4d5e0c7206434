"""The known limit of the damage matrix, and where it ends.

Deleting the newest log batch of a bucket when nothing recorded a later offset is indistinguishable from a write
that never happened (``test_damage_matrix``: those cells accept exactly the answer of the store saved before that
write). Once anything did record it, the loss is raised as :class:`~fluss_lake.CorruptedDataError`:

* this process's view of the log (it read up to that offset before the batch vanished);
* a primary-key bucket's state snapshot past the batch (``pk-log-batch@covered/delete`` in the matrix);
* a job checkpoint that consumed it;
* a lake snapshot that tiered it (the round raises ``CorruptedDataError`` naming the missing batch; ``fluss-lake
  check --repair`` restores it from the lake).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from integrity_helpers import (
    TARGETS,
    Case,
    CopyStore,
    Objects,
    Pristine,
    check_error,
    connect,
    damage,
    delta_join,
    read_tiering,
    untailed,
)

from fluss_lake.exceptions import CorruptedDataError


def _case(kind: str, path: str, key: str, partner: str | None, work: Path) -> Case:
    return Case(TARGETS[kind], "delete", path, work, key, partner)


@pytest.mark.parametrize("kind", ["log-batch@newest", "pk-log-batch@newest"])
def test_a_newest_batch_this_process_has_seen_is_missed(
    kind: str, pristine: Pristine, copy_store: CopyStore, tmp_path: Path
) -> None:
    target = TARGETS[kind]
    source = pristine(target.store)
    key, partner = target.pick(Objects(source))
    store = copy_store(source, "store")
    table = connect(str(store), tmp_path / "state").get_table(target.table)
    seen = table.scan_log()
    damage(Objects(store), key, "delete")
    with pytest.raises(CorruptedDataError) as raised:
        table.scan_log()
    check_error(raised.value, _case(kind, "scan_log", key, partner, tmp_path))
    assert "newest batch is gone" in str(raised.value)
    assert seen.height  # what it had read before stays what it was: nothing is answered from the shortened log


def test_a_newest_batch_a_job_consumed_is_missed(pristine: Pristine, copy_store: CopyStore, tmp_path: Path) -> None:
    """The delta join consumed d.pk up to its end; its newest batch then vanishes: the job's checkpoint lies past the
    log end, and the next step says so instead of waiting for offsets the log will hand out again (a later write
    would take the freed offset, and the job would skip it)."""
    target = TARGETS["pk-log-batch@newest"]
    source = pristine(target.store)
    key, partner = target.pick(Objects(source))
    store = copy_store(source, "store")
    delta_join(connect(str(store), tmp_path / "state-1"), batch_rows=100_000).run_once()
    damage(Objects(store), key, "delete")
    with pytest.raises(CorruptedDataError) as raised:
        delta_join(connect(str(store), tmp_path / "state-2")).run_once()
    check_error(raised.value, _case("pk-log-batch@newest", "delta-join", key, partner, tmp_path))


def test_a_newest_batch_the_lake_tiered_is_missed(pristine: Pristine, copy_store: CopyStore, tmp_path: Path) -> None:
    target = TARGETS["log-batch@newest"]
    source = pristine(target.store)
    key, partner = target.pick(Objects(source))
    store = copy_store(source, "store")
    tiered = read_tiering(connect(str(store), tmp_path / "state-1"), target.table, tmp_path / "lake")
    damage(Objects(store), key, "delete")
    with pytest.raises(CorruptedDataError) as raised:
        read_tiering(connect(str(store), tmp_path / "state-2"), target.table, tmp_path / "lake")
    check_error(raised.value, _case("log-batch@newest", "tiering", key, partner, tmp_path))
    assert tiered.rows


@pytest.mark.parametrize("kind", ["log-batch@newest", "pk-log-batch@newest"])
def test_with_nothing_recording_it_the_loss_reads_as_a_write_never_made(
    kind: str, pristine: Pristine, copy_store: CopyStore, tmp_path: Path
) -> None:
    """The accepted limit itself: a fresh process reads the store exactly as it was before the last write (the same
    rows, offsets and commit times as the store saved then), and the next write takes the freed offset."""
    target = TARGETS[kind]
    source = pristine(target.store)
    key, _ = target.pick(Objects(source))
    store = copy_store(source, "store")
    damage(Objects(store), key, "delete")
    never = copy_store(untailed(source), "never")
    damaged = connect(str(store), tmp_path / "state-1").get_table(target.table)
    assert damaged.scan_log().equals(connect(str(never), tmp_path / "state-2").get_table(target.table).scan_log())
    assert damaged.end_offsets() != connect(str(source), tmp_path / "state-3").get_table(target.table).end_offsets()
    row = {"id": 1000, "s": "again"} if kind.startswith("log") else {"id": 20000, "v": "again", "n": 4}
    (damaged.append if kind.startswith("log") else damaged.upsert)([row])
    again = connect(str(store), tmp_path / "state-4").get_table(target.table).scan_log()
    assert again.filter(pl.col("id") == row["id"]).get_column("s" if "s" in row else "v").to_list()[-1] == "again"

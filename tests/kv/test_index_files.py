"""Segment index files: written with every indexed segment, published and collected with it, mapped by every
process (file cache, not process memory), and never trusted when they do not match: a missing, truncated or
foreign index file only means the index is built in memory again, with the same lookup results."""

from __future__ import annotations

import mmap
import os
import time

import numpy as np
import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.exceptions import CorruptedDataError
from fluss_lake.kv.segment import INDEX_SUFFIX, Segment, SegmentIndex, file_crc, index_path

ROWS = 20_000


def _table(path, **options) -> fl.Table:
    conn = fl.connect(path, **options)
    conn.create_database("d", ignore_if_exists=True)
    conn.create_table("d.t", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"], ignore_if_exists=True)
    return conn.get_table("d.t")


def _fill(table: fl.Table, rows: int = ROWS) -> None:
    ids = np.arange(rows)
    table.upsert(pl.DataFrame({"id": ids, "v": pl.Series(ids).cast(pl.String)}))
    table.snapshot()


def _is_mapped(index: SegmentIndex) -> bool:
    base = index.fingerprints.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", getattr(base, "obj", None))
    return isinstance(base, mmap.mmap)


def test_published_segments_carry_index_files_that_a_new_process_maps(tmp_path) -> None:
    _fill(_table(tmp_path))
    reader = fl.connect(tmp_path).get_table("d.t")
    keys = pl.DataFrame({"id": np.arange(0, 2 * ROWS, 3)})
    found = reader.new_lookup().lookup(keys, with_found=True)
    assert found.get_column("_found").to_list() == [k < ROWS for k in range(0, 2 * ROWS, 3)]
    segments = [s for s in reader._tablets().kv_tablet(0).kv.segments if s.rows >= 2048]
    assert segments, "the fill wrote an indexed segment"
    for segment in segments:
        assert os.path.exists(index_path(segment.path)), "published beside its segment"
        index = segment.index()
        assert _is_mapped(index), "mapped from the file, not built in process memory"
        built = SegmentIndex.build(segment.hashes)
        assert np.array_equal(index.starts, built.starts) and np.array_equal(index.fingerprints, built.fingerprints)
        assert index.shift == built.shift


def test_damaged_or_missing_index_files_are_rebuilt_in_memory(tmp_path) -> None:
    _fill(_table(tmp_path))
    shared = _table(tmp_path)._tablets().kv_tablet(0).shared_dir
    files = sorted(n for n in os.listdir(shared) if n.endswith(INDEX_SUFFIX))
    assert files
    damaged = os.path.join(shared, files[0])
    with open(damaged, "r+b") as handle:  # truncated (a torn write)
        handle.truncate(os.path.getsize(damaged) - 4)
    for name in files[1:]:
        os.unlink(os.path.join(shared, name))
    reader = fl.connect(tmp_path).get_table("d.t")
    looked = reader.new_lookup().lookup(pl.DataFrame({"id": [0, 7, ROWS - 1, ROWS]}), with_found=True)
    assert looked.get_column("_found").to_list() == [True, True, True, False]
    assert looked.get_column("v").to_list()[:3] == ["0", "7", str(ROWS - 1)]
    for segment in reader._tablets().kv_tablet(0).kv.segments:
        if segment.rows >= 2048:
            assert not _is_mapped(segment.index())
    segment_file = damaged.removesuffix(INDEX_SUFFIX)
    segment = Segment.open(segment_file, expected_crc=file_crc(segment_file))
    assert SegmentIndex.open(damaged, segment.rows, segment_crc=segment.crc) is not None, "repaired on first use"
    with open(damaged, "r+b") as handle:
        handle.truncate(os.path.getsize(damaged) - 4)
    with pytest.raises(CorruptedDataError, match="segment index"):
        SegmentIndex.open(damaged, segment.rows)
    SegmentIndex.build(segment.hashes).save(damaged, segment_crc=segment.crc)
    assert SegmentIndex.open(damaged, segment.rows, segment_crc=segment.crc) is not None
    with pytest.raises(CorruptedDataError, match="does not fit"):
        SegmentIndex.open(damaged, segment.rows + 1)  # an index of another row count is refused
    with pytest.raises(CorruptedDataError, match="another segment"):
        SegmentIndex.open(damaged, segment.rows, segment_crc=(segment.crc or 0) ^ 1)


def test_index_files_go_with_their_segments(tmp_path) -> None:
    """Merged-away private segments lose their index files; an orphaned index file in the shared folder is
    collected after the grace period, one whose segment is still referenced never is."""
    table = _table(tmp_path, snapshot_every=1)
    for start in range(0, 6 * 4096, 4096):  # several indexed segments, merged as they pile up
        ids = np.arange(start, start + 4096)
        table.upsert(pl.DataFrame({"id": ids, "v": pl.Series(ids).cast(pl.String)}))
        table._tablets().kv_tablet(0).kv.flush_memtable()
    store = table._tablets().kv_tablet(0).kv
    store.wait_for_compaction()
    table.upsert([{"id": -1, "v": "x"}])  # snapshot + collect (retired private segments are deleted)
    store.wait_for_compaction()  # a merge in flight writes its index file just before its segment file
    private = store.directory
    indexes = [n for n in os.listdir(private) if n.endswith(INDEX_SUFFIX) and not n.startswith(".tmp-")]
    assert indexes
    for name in indexes:
        assert os.path.exists(os.path.join(private, name.removesuffix(INDEX_SUFFIX))), "an index outlived its segment"
    shared = table._tablets().kv_tablet(0).shared_dir
    orphan = os.path.join(shared, "seg-crashed-writer.arrow" + INDEX_SUFFIX)
    with open(orphan, "wb") as handle:
        handle.write(b"left behind")
    kept = [n for n in os.listdir(shared) if n.endswith(INDEX_SUFFIX) and n != os.path.basename(orphan)]
    assert kept
    an_hour_ago = time.time() - 3600
    for name in [os.path.basename(orphan), *kept]:
        os.utime(os.path.join(shared, name), (an_hour_ago, an_hour_ago))
    table.upsert([{"id": -2, "v": "y"}])
    assert not os.path.exists(orphan)
    live = {s.name for s in store.segments}
    for name in kept:
        if name.removesuffix(INDEX_SUFFIX) in live:
            assert os.path.exists(os.path.join(shared, name))
    assert fl.connect(tmp_path).get_table("d.t").to_polars().height == 6 * 4096 + 2


@pytest.mark.s3
def test_index_files_travel_with_segments_on_s3(s3_url, tmp_path) -> None:
    """On S3 a segment's index is published as an object beside it, downloaded with it by a new process (which
    then maps it), and deleted with it when the segment is collected."""
    import s3fs

    url, options = s3_url
    writer = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "writer"), snapshot_every=10**9)
    writer.create_database("d")
    writer.create_table("d.t", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"])
    table = writer.get_table("d.t")
    _fill(table)
    fs = s3fs.S3FileSystem(**{k: v for k, v in options.items() if k in ("key", "secret", "endpoint_url",
                                                                         "client_kwargs")})
    root = url.removeprefix("s3://")
    objects = [p for p in fs.find(root) if "/kv/" in p and "/segments/" in p]
    indexes = [p for p in objects if p.endswith(INDEX_SUFFIX)]
    assert indexes and all(p.removesuffix(INDEX_SUFFIX) in objects for p in indexes)

    reader = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "reader")).get_table("d.t")
    looked = reader.new_lookup().lookup(pl.DataFrame({"id": [0, ROWS - 1, ROWS]}), with_found=True)
    assert looked.get_column("_found").to_list() == [True, True, False]
    indexed = [s for s in reader._tablets().kv_tablet(0).kv.segments if s.rows >= 2048]
    assert indexed and all(os.path.exists(index_path(s.path)) and _is_mapped(s.index()) for s in indexed)
    for path in indexes:  # segments published without index objects (an older writer): built locally, once
        fs.rm(path)
    rebuilt = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "rebuilt")).get_table("d.t")
    assert rebuilt.new_lookup().lookup(pl.DataFrame({"id": [7]}), with_found=True).get_column("_found").to_list() == [True]
    local = [s for s in rebuilt._tablets().kv_tablet(0).kv.segments if s.rows >= 2048]
    assert local and all(os.path.exists(index_path(s.path)) and _is_mapped(s.index()) for s in local)
    first = {p.removesuffix(INDEX_SUFFIX) for p in indexes}  # the first segments' objects

    for start in range(ROWS, 5 * ROWS, ROWS):  # more segments, then a full compaction retires the first one
        ids = np.arange(start, start + ROWS)
        table.upsert(pl.DataFrame({"id": ids, "v": pl.Series(ids).cast(pl.String)}))
        table.snapshot()  # published, index objects included
    table.compact()
    for extra in (-1, -2):  # newer snapshots: the ones naming the first segment are dropped, and it is collected
        table.upsert([{"id": extra, "v": "x"}])
        table.snapshot()
    fs.invalidate_cache()
    now = [p for p in fs.find(root) if "/kv/" in p and "/segments/" in p]
    assert first - set(now), "the first segment was merged away and collected"
    assert any(p.endswith(INDEX_SUFFIX) for p in now), "segments written since carry index objects"
    assert all(p.removesuffix(INDEX_SUFFIX) in now for p in now if p.endswith(INDEX_SUFFIX)), \
        "an index object outlived its segment"
    assert fl.connect(url, storage_options=options, local_dir=str(tmp_path / "third")).get_table("d.t") \
        .to_polars().height == 5 * ROWS + 2

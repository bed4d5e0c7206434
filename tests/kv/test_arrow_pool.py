"""fluss-lake allocates its own Arrow buffers from Arrow's jemalloc pool (freed pages go back to the OS) without
changing the process's default pool, unless the process chose one. Each case runs in a fresh interpreter: pool
statistics are per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent("""
    import json, sys, tempfile
    import numpy as np, polars as pl, pyarrow as pa
    import fluss_lake as fl
    from fluss_lake._utils import arrow_pool
    conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    conn.create_table("d.t", schema={"id": "BIGINT", "g": "BIGINT", "s": "STRING"}, primary_key=["g", "id"],
                      bucket_keys=["g"], bucket_num=2)
    t = conn.get_table("d.t")
    for start in range(0, 200_000, 50_000):
        ids = np.arange(start, start + 50_000)
        t.upsert(pl.DataFrame({"id": ids, "g": ids % 997, "s": pl.Series(ids).cast(pl.String)}))
    t.upsert(pl.DataFrame({"id": np.arange(0, 200_000, 3), "g": np.arange(0, 200_000, 3) % 997, "s": "x"}))
    keys = pl.DataFrame({"g": np.arange(0, 200_000, 7) % 997, "id": np.arange(0, 200_000, 7)})
    assert t.new_lookup().lookup(keys, with_found=True)["_found"].all()
    assert t.prefix_lookup(pl.DataFrame({"g": np.arange(500)})).height > 0
    assert t.scan_log().height > 200_000
    print(json.dumps({"default": pa.default_memory_pool().backend_name,
                      "default_max": pa.default_memory_pool().max_memory(),
                      "ours": arrow_pool.pool().backend_name, "ours_max": arrow_pool.pool().max_memory()}))
""")


def _run(env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env.update({"PYTHONPATH": str(REPO), **env_extra})
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def test_writes_lookups_and_log_reads_allocate_from_our_pool() -> None:
    got = _run({})
    if not _has_jemalloc():  # an Arrow build without jemalloc: the default pool for everything
        assert got["ours"] == got["default"]
        return
    assert got["ours"] == "jemalloc"
    assert got["default"] != "jemalloc"  # the process's default pool is left as it was
    # the big buffers went to our pool (the IPC writer compresses changelog batches in the default pool: pyarrow
    # offers no pool option there)
    assert got["ours_max"] > 2 * got["default_max"], got


def test_a_pool_the_process_chose_is_used() -> None:
    got = _run({"ARROW_DEFAULT_MEMORY_POOL": "system"})
    assert got["default"] == "system" and got["ours"] == "system"

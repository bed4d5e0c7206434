"""The Arrow memory pool fluss-lake allocates its own buffers from (takes, concatenations, decoded log batches).

Arrow's default pool in a wheel is its bundled mimalloc, which keeps much of what it frees resident: in a delta-join
process its arena held 63 MiB (54 MiB in transparent huge pages) while Arrow's live allocations never passed
20 MiB. Arrow's jemalloc pool, from the same wheel, hands freed pages back after its decay time and runs the write
path as fast (``docs/WRITE-PATH.md``). fluss-lake therefore uses it for the buffers it allocates itself, without
changing the process's default pool: other code keeps whatever pool it uses. When the process chose a pool
(``ARROW_DEFAULT_MEMORY_POOL``), or Arrow was built without jemalloc, the default pool is used.

>>> pool().backend_name in ("jemalloc", default_pool_name())
True
"""

from __future__ import annotations

import os
from functools import cache

import pyarrow as pa

__all__ = ["default_pool_name", "pool", "release_unused"]


def default_pool_name() -> str:
    """The backend of the process's default Arrow pool."""
    return str(pa.default_memory_pool().backend_name)


@cache
def pool() -> pa.MemoryPool:
    """The pool for fluss-lake's own Arrow allocations (see the module docstring)."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return pa.default_memory_pool()
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # an Arrow build without jemalloc
        return pa.default_memory_pool()


def release_unused() -> None:
    """Ask the pools fluss-lake allocates from to hand freed memory back to the OS now (after big merges)."""
    pa.default_memory_pool().release_unused()
    pool().release_unused()  # the same pool when the process chose one: releasing twice costs nothing

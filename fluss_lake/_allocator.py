"""Allocator settings that must be in place before pyarrow loads (imported first by ``fluss_lake``).

Arrow's bundled mimalloc commits its arenas eagerly, and memory it frees inside an eagerly committed arena stays
resident: a delta-join or write process keeps 50-70 MiB more anonymous memory at its peak than with arenas
committed on demand, at the same speed (measured in ``bench.delta_join`` and ``bench.upsert``; see
``docs/STORAGE.md``). mimalloc reads ``MIMALLOC_ARENA_EAGER_COMMIT`` once, when Arrow first allocates, so the
setting only takes effect if no pyarrow is loaded yet; a value the user set is kept. Polars configures its own
jemalloc the same way when it is imported.
"""

from __future__ import annotations

import os
import sys

__all__ = ["ARENA_EAGER_COMMIT", "configure"]

ARENA_EAGER_COMMIT = "MIMALLOC_ARENA_EAGER_COMMIT"


def configure() -> bool:
    """Commit mimalloc arenas on demand unless pyarrow is already loaded or the variable is set; True if set here."""
    if "pyarrow" in sys.modules or ARENA_EAGER_COMMIT in os.environ:
        return False
    os.environ[ARENA_EAGER_COMMIT] = "0"
    return True


configure()

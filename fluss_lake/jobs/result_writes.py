"""Writing a join's result: the upserts and deletes of one step as one write batch per bucket of the result.

Both join jobs (the delta join and the stateful join) derive the result rows of a step and write them here; every
write is an upsert or delete of the result key, so a step repeated after a crash is harmless.
"""

from __future__ import annotations

import polars as pl

from fluss_lake.table import Table

__all__ = ["write_changes"]


def write_changes(result: Table, upserts: pl.DataFrame, deletes: pl.DataFrame, *, skip_unchanged: bool = True) -> None:
    """Upserts and deletes of distinct result keys as one write batch per bucket. With `skip_unchanged` a result
    row equal to the current one writes nothing (a step repeated after a crash, or a row re-derived from a
    probe, adds no changelog records)."""
    if not upserts.height and not deletes.height:
        return
    writer = result.new_upsert(skip_unchanged=skip_unchanged)
    if upserts.height:
        writer.upsert(upserts)
    if deletes.height:
        writer.delete(deletes)
    writer.flush()

"""Lookups that insert the keys they miss (Fluss's ``lookup.insert-if-not-exists``, primary-key lookups only).

A key a lookup does not find is inserted as a row holding just the key: the other columns are null, except the
auto-increment column, which gets the next value. The lookup then returns the new row. This is Fluss's way to
build a dictionary table on the fly (a string id mapped to a dense integer), e.g. for roaring-bitmap count-distinct
(``rbm32`` / ``rbm64``). The insert is a write of the key columns only: on a key another writer inserted
meanwhile it changes nothing (no changelog), so concurrent lookups of one new key all return the same row.

Every column outside the primary key must be nullable or the auto-increment column; other tables are refused
when the lookuper is made (:func:`check_insertable`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.kv.kv_tablet import ChangeImage, KvTablet
from fluss_lake.kv.merge import LastRowMerger
from fluss_lake.metadata.descriptor import TableInfo
from fluss_lake.runtime.table_runtime import TableRuntime

__all__ = ["KeyInserter", "check_insertable"]


def check_insertable(info: TableInfo) -> None:
    """Refuse insert-if-not-exists on a table whose rows cannot be made from a key alone (Fluss's
    ``TableLookup.createLookuper`` rule: every other column nullable or auto-increment)."""
    if not info.is_primary_key_table:
        raise InvalidConfigError(f"{info.path} is a log table; insert-if-not-exists needs primary-key lookups")
    pk, auto = set(info.schema.primary_key), info.auto_increment_column
    not_null = [c.name for c in info.schema.columns if not c.nullable and c.name not in pk and c.name != auto]
    if not_null:
        raise InvalidConfigError(
            f"lookup with insert-if-not-exists cannot be created for {info.path}: it has NOT NULL columns "
            f"{not_null} that are neither primary-key nor auto-increment columns, and a missing key's new row "
            "cannot fill them; make them nullable or look up without inserting"
        )


class KeyInserter:
    """Inserts the missing keys of one lookup call into their buckets and reads the new rows back."""

    def __init__(self, runtime: TableRuntime) -> None:
        info = runtime.info
        check_insertable(info)
        self.runtime = runtime
        self.schema = info.schema.polars_schema
        # Key columns only: a fresh key gets +I (nulls, the auto-increment value), an existing one nothing.
        self.merger = LastRowMerger(runtime.merge_spec, target_columns=info.schema.primary_key, delete_behavior="allow")
        self.image = ChangeImage(wal=info.options.get(opt.CHANGELOG_IMAGE, "full") == "wal")
        self.inserted = 0
        self._checked = False

    def insert(
        self,
        tablet: KvTablet,
        hashes: np.ndarray,
        keys: pl.DataFrame,
        found: np.ndarray,
        rows: pl.DataFrame,
        *,
        with_offsets: bool,
    ) -> tuple[np.ndarray, pl.DataFrame]:
        """Insert the keys `found` marks absent (caller holds the tablet's lock); the lookup result with their
        new rows in place."""
        missing = np.flatnonzero(~found)
        if missing.size == 0:
            return found, rows
        if not self._checked:  # once per lookup call: a dropped table takes no insert
            self.runtime.check_alive()
            self._checked = True
        new_keys = keys[missing]
        distinct = new_keys.unique(maintain_order=True)  # a key asked twice is inserted once, numbered in order
        batch = distinct.with_columns(
            [pl.lit(None, dtype).alias(name) for name, dtype in self.schema.items() if name not in distinct.columns]
        ).select(self.schema.names())
        tablet.write(batch, np.zeros(batch.height, dtype=bool), self.merger, self.image)
        self.inserted += batch.height
        again, fresh = tablet.kv.lookup(hashes[missing], new_keys, with_offsets=with_offsets)
        take = np.arange(len(found))
        take[missing] = len(found) + np.arange(missing.size)
        found = found.copy()
        found[missing] = again
        return found, pl.concat([rows, fresh], how="vertical")[take]

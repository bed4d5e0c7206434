"""Helpers for the training tests: random valid histories and the brute-force oracles (plain loops, tests only)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from hypothesis import strategies as st

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
VALUE_CHANGES = ("+I", "+U", "-D")


def at(us: int | None) -> datetime | None:
    """EPOCH + `us` microseconds (None stays None)."""
    return None if us is None else EPOCH + timedelta(microseconds=us)


@st.composite
def histories(draw: Any, *, keys: int = 3, buckets: int = 2) -> list[dict[str, Any]]:
    """A valid changelog: per key +I / -U,+U / -D / re-insert; per bucket dense offsets, non-decreasing commit
    times with many ties (several records per write batch, batches often at the same time)."""
    ops = draw(st.lists(st.tuples(st.integers(0, keys - 1), st.sampled_from(["put", "put", "del"]),
                                  st.integers(-3, 3), st.one_of(st.none(), st.integers(-30, 10)),
                                  st.sampled_from([0, 0, 1, 3, 8, 20])),
                        min_size=2, max_size=30))
    state: dict[int, dict[str, Any]] = {}
    clock = {b: 0 for b in range(buckets)}
    offsets = {b: 0 for b in range(buckets)}
    rows: list[dict[str, Any]] = []
    for key, op, value, event, step in ops:
        bucket = key % buckets
        clock[bucket] += step  # step 0: same commit time as the previous batch of this bucket
        ts = clock[bucket]

        def emit(ct: str, image: dict[str, Any], key: int = key, bucket: int = bucket, ts: int = ts) -> None:
            rows.append({"id": key, "v": image["v"], "ev": image["ev"], "__change_type": ct, "__bucket": bucket,
                         "__offset": offsets[bucket], "__timestamp": ts})
            offsets[bucket] += 1

        new = {"v": value, "ev": None if event is None else ts + event}  # event time near the commit time
        if op == "put":
            if key in state:
                emit("-U", state[key])
                emit("+U", new)
            else:
                emit("+I", new)
            state[key] = new
        elif key in state:
            emit("-D", state.pop(key))
    return rows


def history_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows (integer microsecond times) as a history frame."""
    return pl.DataFrame({
        "id": [r["id"] for r in rows], "v": [r["v"] for r in rows], "ev": [at(r["ev"]) for r in rows],
        "__change_type": [r["__change_type"] for r in rows], "__bucket": [r["__bucket"] for r in rows],
        "__offset": [r["__offset"] for r in rows], "__timestamp": [at(r["__timestamp"]) for r in rows],
    }, schema={"id": pl.Int64, "v": pl.Int64, "ev": pl.Datetime("us", "UTC"), "__change_type": pl.String,
               "__bucket": pl.Int32, "__offset": pl.Int64, "__timestamp": pl.Datetime("us", "UTC")})


def oracle_value(rows: list[dict[str, Any]], key: int | None, ts: int | None, *, ttl: int | None = None,
                 event_time: bool = False, committed_only: bool = False) -> int | None:
    """The feature value `v` of `key` as of `ts` by the documented rules, by brute force."""
    if key is None or ts is None:
        return None
    best = None
    best_rank = None
    for r in rows:
        if r["id"] != key or r["__change_type"] not in VALUE_CHANGES:
            continue
        if event_time:
            if r["__change_type"] == "-D":
                eff = max(r["__timestamp"], r["ev"]) if r["ev"] is not None else r["__timestamp"]
            else:
                eff = r["ev"]
            if eff is None or eff > ts or (committed_only and r["__timestamp"] > ts):
                continue
            rank = (eff, r["__timestamp"], r["__bucket"], r["__offset"])
        else:
            if r["__timestamp"] > ts:
                continue
            rank = (r["__timestamp"], r["__bucket"], r["__offset"])
        if best_rank is None or rank > best_rank:
            best, best_rank = r, rank
    if best is None or best["__change_type"] == "-D":
        return None
    if ttl is not None and best_rank[0] < ts - ttl:  # type: ignore[index]
        return None
    return best["v"]


def oracle_state(rows: list[dict[str, Any]], *, ts: int | None = None,
                 offsets: dict[int, int] | None = None) -> dict[int, int | None]:
    """key -> v of the live rows after the changes visible at `ts` / below `offsets`, by replay."""
    visible = [r for r in rows if r["__change_type"] in VALUE_CHANGES
               and (ts is None or r["__timestamp"] <= ts)
               and (offsets is None or r["__bucket"] not in offsets or r["__offset"] < offsets[r["__bucket"]])]
    state: dict[int, int | None] = {}
    for r in sorted(visible, key=lambda r: (r["__timestamp"], r["__bucket"], r["__offset"])):
        if r["__change_type"] == "-D":
            state.pop(r["id"], None)
        else:
            state[r["id"]] = r["v"]
    return state

"""Tiering into Iceberg against pyiceberg called directly, on a local warehouse and on moto S3.

- **log tiering**: a live log table of ``--rows`` rows (4 buckets) is tiered into a fresh lake table
  (``tier_table``: read the live log, convert, write Parquet, commit with the offsets). Peer: pyiceberg
  ``Table.append`` of the very same rows, already in memory in lake form, into a fresh table with the same
  schema and partition spec. Goal: >= 0.5x the peer.
- **primary-key change tiering**: a live primary-key table of ``--rows`` rows (4 buckets) is tiered; then each
  repeat upserts a batch of ``--changes`` rows (half updates of existing keys, half new keys) live and tiers it
  (merge-on-read: position deletes for the old rows, the new rows as new files, plus the history table's append;
  the compaction check runs in each round). Peer:
  pyiceberg ``Table.upsert`` of the same batch into a copy of the same lake table (same rows, same partition
  spec), the two evolving alike. Goal: >= 20x the peer in changed rows per second.
- **partitioned primary-key change tiering** (local warehouse): the same, on a table of ``--rows`` rows partitioned
  by ``day`` over 8 partitions (4 buckets each), each batch changing the newest partition only (the usual shape:
  recent data changes). Peer: pyiceberg ``upsert`` into a copy with the same ``(day, __bucket)`` spec, joined
  on ``id`` (unique over all days; joining on ``(day, id)`` makes pyiceberg build a per-row filter and run at
  about 30 rows/s). Goal: >= 20x the peer.
- **lag after a burst**: a continuous TieringService with ``table.datalake.freshness = 1 s`` runs while a burst of
  ``--burst`` rows is appended; lag = time from the end of the burst to the lake snapshot holding it. Peer: the
  time pyiceberg ``append`` takes to write the same burst directly (the least lag any writer could have).
  Goal: <= 2 s.

The live store is a local folder in every case (the figures are about the lake side); on moto only the
warehouse moves to S3 (PyArrowFileIO, sqlite catalog). Run
``python -m bench.tiering [--quick] [--rows N] [--changes C] [--burst B] [--repeats K] [--skip-moto]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

import fluss_lake as fl
from bench._common import (
    Reporter,
    Result,
    Target,
    bench_args,
    fmt_num,
    interleave,
    log,
    median,
    scatter_keys,
    temp_store_dir,
)
from tiering import Lake, TieringService, compact_table, tier_table
from tiering.schema import lake_arrow_schema, to_lake_rows
from fluss_lake.keys.bucketing import buckets_of

BENCH = "tiering"
FULL_ROWS = 1_000_000
QUICK_ROWS = 100_000
SCHEMA = {"id": "BIGINT", "a": "BIGINT", "b": "DOUBLE", "s": "STRING"}
LAKE_ON = {"table.datalake.enabled": "true"}


def rows_frame(start: int, n: int, seed: int) -> pl.DataFrame:
    """Random rows with distinct scattered int64 keys ``scatter(start..start+n)``."""
    rng = np.random.default_rng(seed)
    return pl.DataFrame({"id": scatter_keys(np.arange(start, start + n)), "a": rng.integers(0, 1 << 40, n),
                         "b": rng.random(n), "s": pl.Series(rng.integers(0, 1_000_000, n)).cast(pl.String)})


@contextmanager
def moto_lake_properties(root: str) -> Iterator[Callable[[str], dict[str, str]]]:
    """A moto S3 server on 127.0.0.1; yields ``props(name)``: catalog properties for a fresh warehouse."""
    import boto3
    from moto.server import ThreadedMotoServer

    for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_DEFAULT_REGION", "us-east-1"), ("AWS_EC2_METADATA_DISABLED", "true")):
        os.environ.setdefault(key, value)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")

    def props(name: str) -> dict[str, str]:
        return {"type": "sql", "uri": f"sqlite:///{root}/{name}.db", "warehouse": f"s3://bench/{name}",
                "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO", "s3.endpoint": endpoint,
                "s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"}
    try:
        yield props
    finally:
        server.stop()


def _peer_table(lake: Lake, name: str, schema: pa.Schema, pk: tuple[str, ...] = (),
                partition_keys: tuple[str, ...] = ()) -> Any:
    """A pyiceberg table shaped like our lake table (same schema, identity(partition keys..., __bucket) spec,
    identifier fields)."""
    catalog = lake.catalog
    if ("peer",) not in catalog.list_namespaces():
        catalog.create_namespace("peer")
    table = catalog.create_table(("peer", name), schema=schema)
    with table.update_spec() as spec:
        for column in (*partition_keys, "__bucket"):
            spec.add_identity(column)
    if pk:
        with table.update_schema() as update:
            update.set_identifier_fields(*pk)
    return table


def bench_log(rep: Reporter, args: argparse.Namespace, root: str, where: str,
              props: Callable[[str], dict[str, str]]) -> None:
    conn = fl.connect(f"{root}/live-log-{where}", local_dir=f"{root}/state")
    conn.create_database("b")
    conn.create_table("b.ev", schema=SCHEMA, bucket_num=4, bucket_keys=["id"], options=LAKE_ON)
    live = conn.get_table("b.ev")
    step = 100_000
    for start in range(0, args.rows, step):
        live.append(rows_frame(start, min(step, args.rows - start), start))
    arrow = to_lake_rows(live.scan_log(), lake_arrow_schema(live.schema, "log"))
    warm = Lake(props("warm-log"))
    tier_table(live, warm)

    def ours(r: int) -> float:
        lake = Lake(props(f"log-ours-{r}-{uuid.uuid4().hex[:6]}"))
        lake.catalog  # noqa: B018 - catalog setup is not the measured work
        start = time.perf_counter()
        report = tier_table(live, lake)
        elapsed = time.perf_counter() - start
        assert report.rows == args.rows
        return elapsed

    def peer(r: int) -> float:
        lake = Lake(props(f"log-peer-{r}-{uuid.uuid4().hex[:6]}"))
        table = _peer_table(lake, "ev", arrow.schema)
        start = time.perf_counter()
        table.append(arrow)
        return time.perf_counter() - start

    times = interleave({"ours": ours, "peer": peer}, args.repeats)
    rates = {k: [args.rows / t for t in v] for k, v in times.items()}
    log(f"  log tiering ({where}) rows/s ours {[fmt_num(x) for x in rates['ours']]} peer {[fmt_num(x) for x in rates['peer']]}")
    rep.add(Result(BENCH, f"log-table tiering, {fmt_num(args.rows)} rows, {where} warehouse", "rows_per_s",
                   median(rates["ours"]), "pyiceberg append (same rows, in memory)", median(rates["peer"]), True,
                   args.rows, args.repeats, targets=(Target("ratio", ">=", 0.5, "ratio >= 0.5"),)))



def _pk_contenders(live: fl.Table, lake: Lake, peer_table: Any, target: pa.Schema, batches: dict[int, pl.DataFrame],
                   bucketing: fl.Table | None = None) -> dict[str, Callable[[int], float]]:
    """The timed contenders of a primary-key round: our tiering round, and pyiceberg's upsert of the same batch
    (with the system columns our lake tables carry; `bucketing`: the table whose buckets the batch goes to)."""

    def ours(r: int) -> float:
        start = time.perf_counter()
        report = tier_table(live, lake)
        elapsed = time.perf_counter() - start
        assert report.committed
        return elapsed

    def peer(r: int) -> float:
        frame = batches[r]
        rows = frame.with_columns(pl.Series("__bucket", buckets_of((bucketing or live).info, frame)).cast(pl.Int32),
                                  pl.lit(0, pl.Int64).alias("__offset"),
                                  pl.lit(0, pl.Int64).cast(pl.Datetime("us", "UTC")).alias("__timestamp"))
        arrow = rows.to_arrow().cast(target)
        start = time.perf_counter()
        peer_table.upsert(arrow, join_cols=["id"])
        return time.perf_counter() - start

    return {"ours": ours, "peer": peer}


def bench_pk(rep: Reporter, args: argparse.Namespace, root: str, where: str,
             props: Callable[[str], dict[str, str]]) -> None:
    conn = fl.connect(f"{root}/live-pk-{where}", local_dir=f"{root}/state-pk-{where}")
    conn.create_database("b")
    conn.create_table("b.kv", schema=SCHEMA, primary_key=["id"], bucket_num=4, options=LAKE_ON)
    live = conn.get_table("b.kv")
    step = 200_000
    for start in range(0, args.rows, step):
        live.upsert(rows_frame(start, min(step, args.rows - start), start))
    lake = Lake(props(f"pk-{where}"))
    tier_table(live, lake)
    target = lake_arrow_schema(live.schema, "primary-key")
    peer_table = _peer_table(lake, "kv", target, ("id",))
    peer_table.append(pa.Table.from_batches(lake.load("b.kv").scan().to_arrow().cast(target).to_batches(), target))
    rng = np.random.default_rng(7)
    next_key = [args.rows]
    batches: dict[int, pl.DataFrame] = {}

    def before(r: int) -> None:
        half = args.changes // 2
        updates = rng.choice(next_key[0], size=half, replace=False)
        frame = pl.concat([rows_frame(0, half, 100 + r).with_columns(pl.Series("id", scatter_keys(updates))),
                           rows_frame(next_key[0], args.changes - half, 200 + r)])
        next_key[0] += args.changes - half
        batches[r] = frame
        live.upsert(frame)  # the live write is not part of tiering's time

    times = interleave(_pk_contenders(live, lake, peer_table, target, batches), args.repeats, before=before)
    rates = {k: [args.changes / t for t in v] for k, v in times.items()}
    log(f"  pk change tiering ({where}) rows/s ours {[fmt_num(x) for x in rates['ours']]} peer {[fmt_num(x) for x in rates['peer']]}")
    same = pl.from_arrow(lake.load("b.kv").scan().to_arrow()).select(list(SCHEMA)).sort("id").equals(
        pl.from_arrow(peer_table.refresh().scan().to_arrow()).select(list(SCHEMA)).sort("id"))
    log(f"  lake state equals the peer's upserted table: {same}")
    start = time.perf_counter()  # the deferred cost of merge-on-read: compacting every delete away at once
    done = compact_table(live, lake, force=True)
    log(f"  forced compaction after {args.repeats} rounds: {time.perf_counter() - start:.2f} s, "
        f"{done.data_files_rewritten} data files ({fmt_num(done.rows_rewritten)} rows) rewritten, "
        f"{done.delete_files_removed} delete files removed")
    rep.add(Result(BENCH, f"primary-key change tiering, {fmt_num(args.changes)} changes into {fmt_num(args.rows)} rows, "
                   f"{where} warehouse", "rows_per_s", median(rates["ours"]), "pyiceberg upsert (same batch)",
                   median(rates["peer"]), True, args.changes, args.repeats,
                   targets=(Target("ratio", ">=", 20, "ratio >= 20"),),
                   note="ours also appends the changelog to the history table in the same round"))


DAYS = [f"202601{d:02d}" for d in range(1, 9)]


def bench_pk_partitioned(rep: Reporter, args: argparse.Namespace, root: str, where: str,
                         props: Callable[[str], dict[str, str]]) -> None:
    conn = fl.connect(f"{root}/live-ppk-{where}", local_dir=f"{root}/state-ppk-{where}")
    conn.create_database("b")
    conn.create_table("b.pkv", schema={"day": "STRING", **SCHEMA}, primary_key=["day", "id"], partition_keys=["day"],
                      bucket_num=4, options=LAKE_ON)
    live = conn.get_table("b.pkv")
    per_day = args.rows // len(DAYS)
    for i, day in enumerate(DAYS):
        live.upsert(rows_frame(i * per_day, per_day, i).with_columns(pl.lit(day).alias("day")))
    lake = Lake(props(f"ppk-{where}"))
    tier_table(live, lake)
    target = lake_arrow_schema(live.schema, "primary-key")
    peer_table = _peer_table(lake, "pkv", target, ("day", "id"), partition_keys=("day",))
    peer_table.append(pa.Table.from_batches(lake.load("b.pkv").scan().to_arrow().cast(target).to_batches(), target))
    newest, rng = DAYS[-1], np.random.default_rng(11)
    first = (len(DAYS) - 1) * per_day
    next_key = [len(DAYS) * per_day]
    batches: dict[int, pl.DataFrame] = {}

    def before(r: int) -> None:
        half = args.changes // 2
        updates = first + rng.choice(per_day, size=half, replace=False)
        frame = pl.concat([rows_frame(0, half, 300 + r).with_columns(pl.Series("id", scatter_keys(updates))),
                           rows_frame(next_key[0], args.changes - half, 400 + r)]).with_columns(
            pl.lit(newest).alias("day")).select("day", *SCHEMA)
        next_key[0] += args.changes - half
        batches[r] = frame
        live.upsert(frame)

    # ids are unique over all days, so the peer joining on id alone is the same upsert, and pyiceberg's fast form
    # (join_cols=["day", "id"] builds a per-row OR filter: about 30 rows/s)
    times = interleave(_pk_contenders(live, lake, peer_table, target, batches, live.partition(newest)),
                       args.repeats, before=before)
    rates = {k: [args.changes / t for t in v] for k, v in times.items()}
    log(f"  partitioned pk change tiering ({where}) rows/s ours {[fmt_num(x) for x in rates['ours']]} "
        f"peer {[fmt_num(x) for x in rates['peer']]}")
    cols = ["day", *SCHEMA]
    same = pl.from_arrow(lake.load("b.pkv").scan().to_arrow()).select(cols).sort("day", "id").equals(
        pl.from_arrow(peer_table.refresh().scan().to_arrow()).select(cols).sort("day", "id"))
    log(f"  lake state equals the peer's upserted table: {same}")
    rep.add(Result(BENCH, f"partitioned primary-key change tiering, {fmt_num(args.changes)} changes into the newest "
                   f"of 8 partitions ({fmt_num(args.rows)} rows), {where} warehouse", "rows_per_s",
                   median(rates["ours"]), "pyiceberg upsert (same batch, same partition spec)",
                   median(rates["peer"]), True, args.changes, args.repeats,
                   targets=(Target("ratio", ">=", 20, "ratio >= 20"),),
                   note="ours also appends the changelog to the history table in the same round"))


def bench_lag(rep: Reporter, args: argparse.Namespace, root: str, where: str,
              props: Callable[[str], dict[str, str]]) -> None:
    conn = fl.connect(f"{root}/live-lag-{where}", local_dir=f"{root}/state-lag-{where}")
    conn.create_database("b")
    conn.create_table("b.ev", schema=SCHEMA, bucket_num=4, bucket_keys=["id"],
                      options={**LAKE_ON, "table.datalake.freshness": "1 s"})
    live = conn.get_table("b.ev")
    lake = Lake(props(f"lag-{where}"))
    service = TieringService(conn, lake).start()
    peer_lake = Lake(props(f"lag-peer-{where}"))
    peer_table = _peer_table(peer_lake, "ev", lake_arrow_schema(live.schema, "log"))
    try:
        time.sleep(1.5)  # first discovery + first (empty) round

        def ours(r: int) -> float:
            frame = rows_frame(10_000_000 * (r + 1), args.burst, r)
            for part in frame.iter_slices(max(1, args.burst // 10)):  # a burst of 10 writes
                live.append(part)
            written = time.perf_counter()
            end = live.end_offsets()
            while not all(lake.snapshot("b.ev").offset(b) >= o for b, o in end.items()):
                time.sleep(0.01)
            return time.perf_counter() - written

        def peer(r: int) -> float:
            arrow = to_lake_rows(live.scan_log(start_offsets=None).head(args.burst), peer_table.schema().as_arrow())
            start = time.perf_counter()
            peer_table.append(arrow)
            return time.perf_counter() - start

        times = interleave({"ours": ours, "peer": peer}, args.repeats)
    finally:
        service.stop()
    log(f"  lag ({where}) s ours {[round(x, 2) for x in times['ours']]} peer {[round(x, 2) for x in times['peer']]}")
    rep.add(Result(BENCH, f"lag after a {fmt_num(args.burst)}-row burst, freshness 1 s, {where} warehouse", "seconds",
                   median(times["ours"]), "pyiceberg append of the burst (write time)", median(times["peer"]), False,
                   args.burst, args.repeats, targets=(Target("value", "<=", 2.0, "<= 2 s"),)))


def main(argv: list[str] | None = None) -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--changes", type=int, default=None, help="changed rows per primary-key round "
                       "(default 100k; 5k with --quick)")
        p.add_argument("--burst", type=int, default=None, help="rows in the lag burst (default 200k; 20k with --quick)")
        p.add_argument("--skip-moto", action="store_true", help="local warehouse only")

    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, argv=argv, description=__doc__,
                      extra=extra, default_repeats=3, quick_repeats=2)
    args.changes = args.changes or (5_000 if args.quick else 100_000)
    args.burst = args.burst or (20_000 if args.quick else 200_000)
    rep = Reporter(BENCH)
    log(f"bench.tiering: {args.rows:,} rows, {args.changes:,} changes per round, {args.burst:,}-row burst, "
        f"{args.repeats} repeats")
    with temp_store_dir(args.tmpdir) as root:
        def local_props(name: str) -> dict[str, str]:
            return Lake.local(f"{root}/lake-{name}").properties

        for where, props_cm in (("local", None), ("moto S3", "moto")):
            if props_cm == "moto" and args.skip_moto:
                continue
            if props_cm is None:
                run_all(rep, args, root, where, local_props)
            else:
                with moto_lake_properties(root) as props:
                    run_all(rep, args, root, "moto-S3", props)
    rep.finish()


def run_all(rep: Reporter, args: argparse.Namespace, root: str, where: str,
            props: Callable[[str], dict[str, str]]) -> None:
    log(f"- {where} warehouse")
    bench_log(rep, args, root, where, props)
    bench_pk(rep, args, root, where, props)
    if where == "local":
        bench_pk_partitioned(rep, args, root, where, props)
    bench_lag(rep, args, root, where, props)


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()

"""Training sets end to end against Feast's DuckDB offline store (``get_historical_features``), same data.

The data of ``bench.training`` (default 100k entity rows, two feature tables of 1M history rows, 10k keys, TTL
1 d / 7 d, commit-time mode; no deletes, which Feast does not have), written as Parquet: each history as the lake's
history table holds it (every changelog record with ``__change_type``, ``__bucket``, ``__offset``,
``__timestamp``), and for Feast the same records without ``-U`` as its ``FileSource`` (built once, untimed: that
preparation is Feast's advantage). Entity rows as Parquet with a row id.

- ours, timed from the Parquet files to the result in memory: ``pl.scan_parquet`` of the two history files and the
  entity file, ``training_set`` with two views;
- Feast 0.67 (DuckDB offline store), timed from reading the entity file to ``to_df()`` (Feast reads its sources).

Feast is not a fluss-lake dependency: it runs in its own virtual environment outside the repo,
``~/.cache/fluss-lake-bench/feast`` (``--feast-venv``), created on first use with ``pip install 'feast[duckdb]'``
(``--no-install``: only use it). Feast runs in a child process that stays up, so its import and ``apply`` are not
timed; the repeats alternate ours / Feast. Before timing the results are checked equal (row by row). If Feast
cannot run, the output says so and reports no ratio. ``python -m bench.training_feast [--quick] [--rows N]
[--entity-rows N] [--repeats K]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import polars as pl

from bench._common import Reporter, Result, Target, bench_args, fmt_num, log, median

BENCH = "training_feast"
FULL_ROWS = 1_000_000
QUICK_ROWS = 60_000
FEAST_VERSION = "0.67.0"
NAMES = ("a", "b")
TTL_DAYS = {"a": 1, "b": 7}


def default_venv() -> Path:
    """Where the Feast environment lives (outside the repo)."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fluss-lake-bench" / "feast"


def ensure_feast(venv: Path, *, install: bool) -> Path | None:
    """The venv's python if it can import feast with its DuckDB store (installing it when allowed), else None."""
    python = venv / "bin" / "python"
    probe = "import feast, duckdb, ibis, polars, pyarrow"

    def works() -> bool:
        return python.exists() and subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0

    if works():
        return python
    if not install:
        return None
    log(f"bench.training_feast: installing feast[duckdb]=={FEAST_VERSION} into {venv} (once)")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", f"feast[duckdb]=={FEAST_VERSION}", "polars",
                           "pyarrow"], capture_output=True, text=True)
    if done.returncode != 0:
        log(done.stderr[-2000:])
    return python if works() else None


# ---------------------------------------------------------------- the Feast side (runs in the Feast venv)
FEAST_CHILD = textwrap.dedent('''
    import json, sys, time
    from datetime import timedelta
    import pandas as pd
    import polars as pl
    from feast import Entity, FeatureStore, Field, FileSource
    from feast import FeatureView as FeastView
    from feast.types import Float64, Int32

    folder, ttls = sys.argv[1], json.loads(sys.argv[2])
    store = FeatureStore(repo_path=f"{folder}/repo")
    entity = Entity(name="entity", join_keys=["entity_id"])
    views = [FeastView(name=f"h_{n}", entities=[entity], ttl=timedelta(days=d),
                       source=FileSource(path=f"{folder}/feast_{n}.parquet", timestamp_field="commit_ts",
                                         created_timestamp_column="created"),
                       schema=[Field(name="x", dtype=Float64), Field(name="n", dtype=Int32)])
             for n, d in ttls.items()]
    store.apply([entity, *views])
    features = [f"h_{n}:{c}" for n in ttls for c in ("x", "n")]
    print("@@" + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        keep = line.strip() == "keep"
        start = time.perf_counter()
        entity_df = pd.read_parquet(f"{folder}/entities.parquet", columns=["row_id", "entity_id", "prediction_ts"])
        entity_df = entity_df.rename(columns={"prediction_ts": "event_timestamp"})
        out = store.get_historical_features(entity_df=entity_df, features=features, full_feature_names=True).to_df()
        seconds = time.perf_counter() - start
        if keep:
            pl.from_pandas(out).write_parquet(f"{folder}/result_feast.parquet")
        print("@@" + json.dumps({"seconds": seconds, "rows": len(out)}), flush=True)
''')


def write_data(folder: Path, rows: int, entity_rows: int, keys: int) -> int:
    """The histories (full, for ours; -U-free, for Feast), the entity rows and Feast's repo; returns one table's
    history rows."""
    from bench.training import make_entities, make_history

    height = 0
    for seed, n in enumerate(NAMES, start=11):
        history = make_history(rows, keys, seed=seed, p_delete=0.0)
        height = history.height
        history.write_parquet(folder / f"hist_{n}.parquet")
        history.filter(pl.col("__change_type") != "-U").select(
            "entity_id", "x", "n", pl.col("__timestamp").alias("commit_ts"),
            pl.col("__timestamp").alias("created")).write_parquet(folder / f"feast_{n}.parquet")
    make_entities(entity_rows, keys, seed=12).with_row_index("row_id").write_parquet(folder / "entities.parquet")
    repo = folder / "repo"
    repo.mkdir()
    (repo / "feature_store.yaml").write_text(textwrap.dedent(f"""\
        project: bench
        registry: {folder}/registry.db
        provider: local
        online_store:
            type: sqlite
            path: {folder}/online.db
        offline_store:
            type: duckdb
        entity_key_serialization_version: 3
        """))
    return height


def ours(folder: Path) -> pl.DataFrame:
    """Ours end to end: the lake-shaped history files and the entity file to the training set in memory."""
    from fluss_lake.training import FeatureView, training_set

    entities = pl.read_parquet(folder / "entities.parquet")
    views = [FeatureView(pl.scan_parquet(folder / f"hist_{n}.parquet"), keys=["entity_id"], features=["x", "n"],
                         ttl=timedelta(days=TTL_DAYS[n]), prefix=f"h_{n}__") for n in NAMES]
    out = training_set(entities, views)
    assert isinstance(out, pl.DataFrame)
    return out


def differing(mine: pl.DataFrame, feast: pl.DataFrame) -> int:
    """Entity rows whose four feature values differ (rows Feast leaves out count as nulls)."""
    cols = [f"h_{n}__{c}" for n in NAMES for c in ("x", "n")]
    theirs = feast.select("row_id", *[pl.col(c).cast(pl.Float64).alias(f"f_{c}") for c in cols])
    both = mine.select("row_id", *[pl.col(c).cast(pl.Float64) for c in cols]).join(theirs, on="row_id", how="left")
    bad = pl.any_horizontal([~pl.col(c).eq_missing(pl.col(f"f_{c}")) for c in cols])
    return both.filter(bad).height


def main(argv: list[str] | None = None) -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--entity-rows", type=int, default=None, help="entity rows (default 100k; 5k quick)")
        p.add_argument("--entities", type=int, default=None, help="distinct keys per table (default 10k; 2k quick)")
        p.add_argument("--feast-venv", default=None, help="Feast's virtual environment (default: the user cache)")
        p.add_argument("--no-install", action="store_true", help="do not create/install the Feast environment")

    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, default_repeats=5, quick_repeats=2,
                      argv=argv, description=__doc__, extra=extra)
    entity_rows = args.entity_rows or (5_000 if args.quick else 100_000)
    keys = args.entities or (2_000 if args.quick else 10_000)
    rep = Reporter(BENCH)
    python = ensure_feast(Path(args.feast_venv) if args.feast_venv else default_venv(), install=not args.no_install)
    if python is None:
        print(json.dumps({"bench": BENCH, "peer": "feast (duckdb offline store)", "status": "not run",
                          "reason": "feast[duckdb] is not installed and could not be installed"}), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="bench-training-feast-", dir=args.tmpdir) as tmp:
        folder = Path(tmp)
        height = write_data(folder, args.rows, entity_rows, keys)
        log(f"bench.training_feast: {fmt_num(entity_rows)} entity rows, 2 x {fmt_num(height)} history rows "
            f"({fmt_num(keys)} keys); Feast from {python}")
        child = subprocess.Popen([str(python), "-c", FEAST_CHILD, str(folder), json.dumps(TTL_DAYS)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=folder)
        assert child.stdin is not None and child.stdout is not None

        def feast_run(keep: bool) -> float:
            child.stdin.write("keep\n" if keep else "run\n")  # type: ignore[union-attr]
            child.stdin.flush()  # type: ignore[union-attr]
            return float(answer()["seconds"])

        def answer() -> dict[str, float]:  # Feast prints to stdout too: our lines start with @@
            for line in child.stdout:  # type: ignore[union-attr]
                if line.startswith("@@"):
                    return json.loads(line[2:])  # type: ignore[no-any-return]
            raise SystemExit("bench.training_feast: the Feast process stopped (see its error above)")

        try:
            if not answer().get("ready"):
                raise SystemExit("bench.training_feast: Feast did not start (see its error above)")
            feast_run(keep=True)
            mine = ours(folder)
            bad = differing(mine, pl.read_parquet(folder / "result_feast.parquet"))
            log(f"results: {bad} of {mine.height:,} entity rows differ; with a value: "
                f"{int(mine['h_a__x'].is_not_null().sum()):,} (a), {int(mine['h_b__x'].is_not_null().sum()):,} (b)")
            if bad:
                raise SystemExit("bench.training_feast: ours and Feast disagree; not timing")
            times: dict[str, list[float]] = {"ours": [], "feast": []}
            for repeat in range(args.repeats):
                for system in ("ours", "feast") if repeat % 2 == 0 else ("feast", "ours"):
                    if system == "ours":
                        start = time.perf_counter()
                        ours(folder)
                        times["ours"].append(time.perf_counter() - start)
                    else:
                        times["feast"].append(feast_run(keep=False))
                    log(f"  repeat {repeat + 1} {system}: {times[system][-1]:.3f} s")
        finally:
            child.stdin.close()
            child.wait(timeout=60)
    case = (f"{fmt_num(entity_rows)} entity rows x 2 feature tables of {fmt_num(height)} history rows "
            f"({fmt_num(keys)} keys, TTL 1d/7d), end to end from Parquet")
    rep.add(Result(BENCH, case, "entity_rows_per_s", entity_rows / median(times["ours"]),
                   "feast 0.67 get_historical_features (duckdb offline store)", entity_rows / median(times["feast"]),
                   True, entity_rows, args.repeats, targets=(Target("ratio", ">=", 10, "vs Feast >= 10x"),),
                   note=f"seconds: ours {median(times['ours']):.3f}, feast {median(times['feast']):.3f}; none differ"))
    rep.finish()


if __name__ == "__main__":
    main()

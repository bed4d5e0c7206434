"""bench.multiway's ways compute the same Customer 360 (partial updates, N-way delta join, a cascade of stateful
joins, the multi-input stateful join), equal to a Polars LEFT join of the inputs, on a small case of the bench's own
data; its fold of Flink's printed changelog keeps each key's last change (checked on a hand-written print output,
since Flink does not run in the test environment)."""

from __future__ import annotations

import polars as pl

import fluss_lake as fl
from bench import multiway


def test_every_way_equals_the_left_join_of_the_inputs(tmp_path):
    n = 3
    records = multiway._setup(str(tmp_path), n, 200, seed=5, flink_dir=str(tmp_path / "flink"))
    conn = fl.connect(str(tmp_path))
    expected = multiway._expected(conn, n)
    assert records > 200 * n and expected.height < 200  # updates, and s0 deleted some customers
    assert expected["s1_x"].null_count() > 0 and expected["s1_x"].is_not_null().sum() > 0  # LEFT-join padding
    for way in multiway.WAYS:
        jobs = multiway._jobs(conn, way, n)
        assert multiway._run_all(jobs) >= records
        got = conn.get_table(f"bench.c360_{way}").to_polars()
        assert multiway._same(got, expected), way
        reopened = multiway._jobs(fl.connect(str(tmp_path)), way, n)  # a restart from the checkpoints
        assert sum(job.run_once().records_read for job in reopened) == 0
    assert not multiway._same(expected.with_columns(pl.col("s2_n") + 1), expected)  # the check can fail
    lines = (tmp_path / "flink" / "s0.json").read_text().splitlines()
    assert len(lines) == conn.get_table("bench.s0").scan_log().filter(pl.col("_change_type") != "-U").height


def test_fold_of_printed_changes_keeps_each_keys_last_change(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text(
        "log line of the driver\n"
        "1> +I[1, 1.5, 10]\n"
        "2> +I[2, 2.5, null]\n"
        "1> -D[1, 1.5, 10]\n"
        "1> +I[1, 7.0, 11]\n"
        "2> -U[2, 2.5, null]\n"
        "2> +U[2, 3.5, null]\n"
        "+I[3, 0.0, 1]\n"
        "-D[3, 0.0, 1]\n"
    )
    folded = multiway._fold_printed(str(out), 1)
    folded = folded.rename({"s0_x": "x", "s0_n": "n"}).sort("cid")
    assert folded.to_dicts() == [{"cid": 1, "x": 7.0, "n": 11}, {"cid": 2, "x": 3.5, "n": None}]

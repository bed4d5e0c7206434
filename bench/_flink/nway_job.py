"""The N-way regular join in PyFlink's local mini-cluster (runs in the Flink venv, not in fluss-lake's).

Reads a JSON config on stdin: ``streams`` (one debezium-json file per stream, in change order), ``columns`` (the
value columns of each stream), ``backend`` (``rocksdb`` or ``hashmap``), ``checkpoint_dir`` and
``checkpoint_ms``. Sources are filesystem tables in ``debezium-json`` (a changelog: ``c`` = +I, ``u`` = -U/+U,
``d`` = -D) with the stream's primary key; the query is ``s0 LEFT JOIN s1 ... LEFT JOIN s{N-1}`` on the key (the
planner's default: a cascade of N-1 binary regular joins); the sink is ``print`` (every +I/-U/+U/-D of the result
on stdout, which the bench folds into the final rows). The job is bounded (the files end) and runs in streaming
mode with periodic full checkpoints; a thread polls the checkpoint folder and keeps the largest complete
checkpoint's size (the operator state). Prints one ``FLINK-RESULT {json}`` line at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


class CheckpointWatcher(threading.Thread):
    """Polls ``<dir>/<job id>/chk-*`` (a checkpoint is complete once its ``_metadata`` exists) and the shared
    folder; keeps the largest complete checkpoint's bytes (full checkpoints: each holds the whole state)."""

    def __init__(self, root: str) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.max_bytes = 0
        self.count = 0
        self.stop = threading.Event()
        self.seen: set[str] = set()

    def poll(self) -> None:
        for job in os.listdir(self.root) if os.path.isdir(self.root) else []:
            base = os.path.join(self.root, job)
            for chk in os.listdir(base):
                path = os.path.join(base, chk)
                if chk.startswith("chk-") and path not in self.seen and os.path.exists(os.path.join(path, "_metadata")):
                    self.seen.add(path)
                    self.count += 1
                    # full checkpoints keep their files in chk-N (state.checkpoints.num-retained keeps them around)
                    self.max_bytes = max(self.max_bytes, _dir_bytes(path))

    def run(self) -> None:
        while not self.stop.wait(0.1):
            with contextlib.suppress(OSError):
                self.poll()


def main() -> None:
    cfg = json.loads(sys.stdin.read())
    t0 = time.perf_counter()
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    conf.set_string("state.backend.type", cfg["backend"])
    conf.set_string("execution.checkpointing.interval", f"{cfg['checkpoint_ms']} ms")
    conf.set_string("execution.checkpointing.dir", "file://" + cfg["checkpoint_dir"])
    conf.set_string("execution.checkpointing.incremental", "false")
    conf.set_string("execution.checkpointing.num-retained", "1000")
    conf.set_string("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION")
    conf.set_string("parallelism.default", str(cfg.get("parallelism", 2)))
    conf.set_string("table.exec.resource.default-parallelism", str(cfg.get("parallelism", 2)))
    settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()
    env = TableEnvironment.create(settings)
    t1 = time.perf_counter()
    key = cfg["key"]
    names = []
    for i, (path, cols) in enumerate(zip(cfg["streams"], cfg["columns"], strict=True)):
        name = f"s{i}"
        names.append(name)
        fields = ", ".join([f"`{key}` BIGINT"] + [f"`{c}` {t}" for c, t in cols])
        env.execute_sql(f"""CREATE TABLE {name} ({fields}, PRIMARY KEY (`{key}`) NOT ENFORCED) WITH (
            'connector' = 'filesystem', 'path' = 'file://{path}', 'format' = 'debezium-json')""")
    out_fields = [f"`{key}` BIGINT"] + [f"`{c}` {t}" for cols in cfg["columns"] for c, t in cols]
    sink = cfg.get("sink", "print")
    env.execute_sql(f"CREATE TABLE c360_out ({', '.join(out_fields)}) WITH ('connector' = '{sink}')")
    select = [f"s0.`{key}`"] + [f"{n}.`{c}`" for n, cols in zip(names, cfg["columns"], strict=True) for c, _ in cols]
    joins = " ".join(f"LEFT JOIN {n} ON s0.`{key}` = {n}.`{key}`" for n in names[1:])
    sql = f"INSERT INTO c360_out SELECT {', '.join(select)} FROM s0 {joins}"
    watcher = CheckpointWatcher(cfg["checkpoint_dir"])
    watcher.start()
    t2 = time.perf_counter()
    result = env.execute_sql(sql)
    result.wait()
    t3 = time.perf_counter()
    watcher.stop.set()
    watcher.join()
    watcher.poll()
    plan = env.explain_sql(sql) if cfg.get("explain") else ""
    sys.stdout.flush()
    print("FLINK-RESULT " + json.dumps({"startup_s": t1 - t0, "job_s": t3 - t2, "state_bytes": watcher.max_bytes,
                                        "checkpoints": watcher.count, "plan": plan}), flush=True)


if __name__ == "__main__":
    main()

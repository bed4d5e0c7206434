"""Shared benchmark helpers: arguments, interleaved timing, medians, JSON lines, memory sampling, child runs.

Every benchmark follows ``design/BENCHMARKS.md``: our code and a peer run on the same data in the same process
run, interleaved (ours, peer, ours, peer, ...); each case reports medians and a ratio where above 1 always
means we are ahead. JSON lines go to stdout, a readable table to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Target", "Result", "Reporter", "bench_args", "interleave", "median", "timed", "temp_store_dir",
    "proc_status", "RssSampler", "run_child", "child_main", "scatter_keys", "fmt_num", "fmt_size",
]

_KEY_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplication mod 2**64 is a bijection


def scatter_keys(index: np.ndarray) -> np.ndarray:
    """Distinct, well-scattered int64 keys for row numbers (a bijection, so no key repeats)."""
    with np.errstate(over="ignore"):
        return (np.asarray(index, dtype=np.uint64) * _KEY_MULT).view(np.int64)


# ---------------------------------------------------------------- arguments
def bench_args(name: str, *, default_rows: int, quick_rows: int, default_repeats: int = 5, quick_repeats: int = 3,
               argv: Sequence[str] | None = None, description: str | None = None,
               extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """Parse ``--quick``, ``--rows N``, ``--repeats K`` (+ module options); fills defaults by mode."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small size for a smoke run (CI)")
    parser.add_argument("--rows", type=int, default=None,
                        help=f"table size (default {default_rows:,}; {quick_rows:,} with --quick)")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"interleaved repeats (default {default_repeats}; {quick_repeats} with --quick)")
    parser.add_argument("--tmpdir", default=None, help="parent folder for temporary stores (local disk)")
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if args.rows is None:
        args.rows = quick_rows if args.quick else default_rows
    if args.repeats is None:
        args.repeats = quick_repeats if args.quick else default_repeats
    if args.rows <= 0 or args.repeats <= 0:
        parser.error("--rows and --repeats must be positive")
    return args


# ---------------------------------------------------------------- timing
def timed(fn: Callable[[], Any]) -> float:
    """Wall seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    return float(statistics.median(values))


def interleave(runners: dict[str, Callable[[int], float]], repeats: int,
               before: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Run every runner once per repeat, in the given order (ours first), `repeats` times.

    Each runner takes the repeat number and returns its measurement for that repeat. `before(r)` runs
    untimed ahead of repeat `r` (e.g. to build that repeat's input). A full GC runs untimed before each call.
    """
    out: dict[str, list[float]] = {name: [] for name in runners}
    for r in range(repeats):
        if before is not None:
            before(r)
        for name, run in runners.items():
            gc.collect()
            out[name].append(float(run(r)))
    return out


# ---------------------------------------------------------------- results
@dataclass(frozen=True)
class Target:
    """A goal from the issue: on the `value` (ours) or on the `ratio`, at least or at most `threshold`."""

    on: str  # "value" or "ratio"
    op: str  # ">=" or "<="
    threshold: float
    label: str = ""

    def check(self, value: float, ratio: float) -> tuple[bool, str]:
        """(met, short verdict); a miss says how far off it is (achieved / target)."""
        x = value if self.on == "value" else ratio
        met = x >= self.threshold if self.op == ">=" else x <= self.threshold
        if met or not np.isfinite(x) or x == 0:
            return met, "met" if met else "MISSED"
        factor = x / self.threshold if self.op == ">=" else self.threshold / x
        return False, f"MISSED ({factor:.2f}x of goal)"

    def describe(self) -> str:
        """Short text such as ``ratio >= 10`` or ``>= 1M rows_per_s``."""
        if self.label:
            return self.label
        what = "ratio" if self.on == "ratio" else "value"
        return f"{what} {self.op} {fmt_num(self.threshold)}"


@dataclass
class Result:
    """One measured case (one JSON line)."""

    bench: str
    case: str
    metric: str
    value: float
    peer: str
    peer_value: float
    higher_is_better: bool
    rows: int
    repeats: int
    targets: tuple[Target, ...] = ()
    note: str = ""
    ratio: float = field(init=False)

    def __post_init__(self) -> None:
        v, p = float(self.value), float(self.peer_value)
        if self.higher_is_better:
            self.ratio = v / p if p else float("inf")
        else:
            self.ratio = p / v if v else float("inf")

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON object (exactly these keys, in this order)."""
        return {"bench": self.bench, "case": self.case, "metric": self.metric, "value": _round(self.value),
                "peer": self.peer, "peer_value": _round(self.peer_value), "ratio": _round(self.ratio),
                "higher_is_better": self.higher_is_better, "rows": int(self.rows), "repeats": int(self.repeats)}

    def verdicts(self) -> list[str]:
        """Target checks, e.g. ``ratio >= 10: MISSED (0.34x of goal)``."""
        return [f"{t.describe()}: {t.check(self.value, self.ratio)[1]}" for t in self.targets]


def _round(x: float) -> float:
    x = float(x)
    if not np.isfinite(x):
        return x
    return float(f"{x:.6g}")


class Reporter:
    """Prints each result as a JSON line on stdout at once, and the readable table on stderr at the end."""

    def __init__(self, bench: str) -> None:
        self.bench = bench
        self.results: list[Result] = []
        self.started = time.perf_counter()

    def add(self, result: Result) -> Result:
        """Record and emit one result."""
        self.results.append(result)
        print(json.dumps(result.to_json()), flush=True)
        log(f"  -> {result.case} | {result.peer}: ours {fmt_num(result.value)} {result.metric}, peer "
            f"{fmt_num(result.peer_value)}, ratio {result.ratio:.3g}" +
            (f" [{'; '.join(result.verdicts())}]" if result.targets else ""))
        return result

    def table(self) -> str:
        """A fixed-width table of every result."""
        head = ("case", "metric", "ours", "peer", "peer value", "ratio", "target")
        rows = []
        for r in self.results:
            rows.append((r.case, r.metric, fmt_num(r.value), r.peer, fmt_num(r.peer_value), f"{r.ratio:.3g}",
                         "; ".join(r.verdicts()) or "-"))
            if r.note:
                rows.append(("  " + r.note, "", "", "", "", "", ""))
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
        line = "  ".join("{:<%d}" % w for w in widths)
        out = [line.format(*head), line.format(*("-" * w for w in widths))]
        out += [line.format(*row) for row in rows]
        return "\n".join(out)

    def finish(self) -> None:
        """Print the table to stderr."""
        elapsed = time.perf_counter() - self.started
        print(f"\n== bench.{self.bench} ({elapsed:.1f} s) ==", file=sys.stderr)
        print(self.table(), file=sys.stderr, flush=True)


def log(message: str) -> None:
    """Progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def fmt_num(x: float) -> str:
    """Compact human number: 1.23M, 45.6k, 12.3."""
    x = float(x)
    if not np.isfinite(x):
        return str(x)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def fmt_size(n: float) -> str:
    """Bytes as MiB/GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


# ---------------------------------------------------------------- storage
@contextlib.contextmanager
def temp_store_dir(parent: str | None = None, prefix: str = "fluss-bench-") -> Iterator[str]:
    """A temporary folder on local disk for a store; removed afterwards."""
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- memory
def proc_status(pid: int | str = "self") -> dict[str, int]:
    """Memory fields of ``/proc/<pid>/status`` in bytes (VmRSS, VmHWM, RssAnon, RssFile, RssShmem)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmPeak", "VmSize"):
                    out[key] = int(rest.split()[0]) * 1024
    except FileNotFoundError:
        pass
    return out


class RssSampler:
    """Samples this process's anonymous memory (``RssAnon``) in a thread; ``peak`` is the highest seen."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        """Read RssAnon now (and fold it into the peak)."""
        anon = proc_status().get("RssAnon", 0)
        self.peak = max(self.peak, anon)
        return anon

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> "RssSampler":
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


# ---------------------------------------------------------------- child processes
def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(module: str, function: str, payload: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    """Run ``bench.<module>.<function>(payload)`` in a fresh interpreter; returns the dict it returned.

    The child also reports its own ``VmHWM`` and final ``/proc/self/status`` figures under ``_status``.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_repo_root(), *filter(None, [env.get("PYTHONPATH")])])
    code = f"from bench._common import child_main; child_main({module!r}, {function!r})"
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(payload), capture_output=True,
                          text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"child bench.{module}.{function} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])


def child_main(module: str, function: str) -> None:
    """Entry point inside the child: read the payload on stdin, call, print the result as one JSON line."""
    import importlib

    payload = json.loads(sys.stdin.read())
    fn = getattr(importlib.import_module(f"bench.{module}"), function)
    result = fn(payload)
    result["_status"] = proc_status()
    print(json.dumps(result), flush=True)

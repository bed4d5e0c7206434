"""fluss-lake on a Ray cluster: job shards as restartable actors, tiering rounds as tasks, Ray Data readers.

Install with the ``ray`` extra (``pip install 'fluss-lake[ray]'``). Workers share nothing but the store and the
lake (on S3 in production): every actor and task opens its own connection from a :class:`Store`. See
``docs/SCALE-OUT.md``.

* :func:`start_job` runs each shard of a job as a Ray actor that processes its inputs continuously; a killed
  actor is restarted by Ray (``max_restarts``) and resumes from the shard's checkpoint. :func:`run_job_once`
  runs every shard once as a Ray task (what a Dagster materialization does).
* :func:`tier_on_ray` runs one tiering round with one Ray task per table (each commits to Iceberg exactly once).
* :func:`read_table` reads a live table as a ``ray.data.Dataset`` (one read task per bucket: current rows, or
  the changelog between offsets); :func:`read_lake` reads its lake table through Ray's Iceberg reader.

This package sits above ``tiering`` and the core (import-linter contracts): neither imports it.

Its names load their module on first use: a shard's worker imports :mod:`fluss_ray.jobs` only, not Ray Data
(:mod:`fluss_ray.data`, about 40 MiB of anonymous memory) nor pyiceberg (:mod:`fluss_ray.rounds`, about 16 MiB),
which it never uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

try:
    import ray as _ray  # noqa: F401
except ImportError as _missing:  # pragma: no cover - the ray extra is installed in CI
    from fluss_lake.exceptions import InvalidConfigError as _InvalidConfigError

    raise _InvalidConfigError(
        "fluss_ray needs Ray: pip install 'fluss-lake[ray]' (or run the job in this process, without --ray)"
    ) from _missing

if TYPE_CHECKING:
    from fluss_ray.data import LiveTableDatasource, read_lake, read_table
    from fluss_ray.jobs import JobFactory, RayJob, ShardStatus, run_job_once, start_job
    from fluss_ray.rounds import tier_on_ray
    from fluss_ray.store import Store

_SUBMODULES = ("data", "jobs", "rounds", "store")
#: where each name of the package lives
_MODULES = {
    "LiveTableDatasource": "fluss_ray.data",
    "read_lake": "fluss_ray.data",
    "read_table": "fluss_ray.data",
    "JobFactory": "fluss_ray.jobs",
    "RayJob": "fluss_ray.jobs",
    "ShardStatus": "fluss_ray.jobs",
    "run_job_once": "fluss_ray.jobs",
    "start_job": "fluss_ray.jobs",
    "tier_on_ray": "fluss_ray.rounds",
    "Store": "fluss_ray.store",
}

__all__ = [
    "JobFactory",
    "LiveTableDatasource",
    "RayJob",
    "ShardStatus",
    "Store",
    "read_lake",
    "read_table",
    "run_job_once",
    "start_job",
    "tier_on_ray",
]


def __getattr__(name: str) -> Any:
    """Load a name's module (or a submodule: ``fluss_ray.jobs``) on first use (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"fluss_ray.{name}")
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'fluss_ray' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES, *_SUBMODULES})

"""The int and float arguments of the layers above the core (``serving``, ``fluss_ray``) refuse what is not a
number of their kind, naming the argument, before anything listens or reaches Ray; good values pass the checks.

As ``test_public_arguments.py`` does for the core: ``test_every_numeric_parameter_is_listed`` scans both packages'
``__all__`` (classes and their public methods) and fails on an int/float parameter that no row checks or excuses.
Ray is never started here: the Ray entry points' checks run before they look for a cluster, so a good value ends at
"call ray.init" (``ray.is_initialized`` is made to answer False, in case another test of this process started Ray).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import fluss_lake as fl
import fluss_ray
import serving
from test_public_arguments import COUNT, NAN, NON_NEGATIVE, SECONDS, _numeric_parameters

INF = float("inf")
CPUS = (True, -1, -0.5, "1", NAN, INF)  # a number of CPUs >= 0 (fractions are Ray's)
PORT = (*NON_NEGATIVE, 65536)


def _store() -> fluss_ray.Store:
    return fluss_ray.Store("/nonexistent-never-opened")


def _make(connection: Any, shard: Any) -> Any:  # a job factory never called: the checks come first
    raise AssertionError("the factory must not run")


def _lake() -> Any:
    import tiering

    return tiering.Lake({"type": "sql", "uri": "sqlite:///:memory:", "warehouse": "file:///tmp/never"})


#: (callable path, parameter) -> (call with the value, values refused, values accepted)
ROWS: dict[tuple[str, str], tuple[Callable[[Any], object], tuple[Any, ...], tuple[Any, ...]]] = {
    ("serving.ServerConfig.__init__", "port"): (lambda v: serving.ServerConfig(port=v).check(), PORT, (0, 8815)),
    ("serving.ServerConfig.__init__", "http_port"): (
        lambda v: serving.ServerConfig(http_port=v).check(), PORT, (None, 0, 8080)),
    ("serving.ServerConfig.__init__", "socket_port"): (
        lambda v: serving.ServerConfig(socket_port=v).check(), PORT, (None, 0, 8816)),
    **{
        ("serving.ServerConfig.__init__", name): (
            lambda v, name=name: serving.ServerConfig(**{name: v}).check(), COUNT, (1, 1 << 20))
        for name in ("max_request_bytes", "max_request_rows", "max_command_bytes")
    },
    **{
        ("serving.ServerConfig.__init__", name): (
            lambda v, name=name: serving.ServerConfig(**{name: v}).check(), SECONDS, (0.5, 30))
        for name in ("request_timeout_s", "log_interval_s")
    },
    ("serving.connect", "timeout"): (lambda v: serving.connect("grpc://127.0.0.1:1", timeout=v), SECONDS, (None, 5)),
    ("serving.RemoteConnection.__init__", "timeout"): (
        lambda v: serving.RemoteConnection("grpc://127.0.0.1:1", timeout=v), SECONDS, (None, 5)),
    ("fluss_ray.start_job", "shards"): (lambda v: fluss_ray.start_job(_make, store=_store(), shards=v), COUNT, (1, 3)),
    ("fluss_ray.start_job", "max_restarts"): (
        lambda v: fluss_ray.start_job(_make, store=_store(), max_restarts=v), (*NON_NEGATIVE[:-1], -2), (-1, 0, 5)),
    ("fluss_ray.start_job", "poll_interval"): (
        lambda v: fluss_ray.start_job(_make, store=_store(), poll_interval=v), SECONDS, (0.1, 2)),
    ("fluss_ray.start_job", "num_cpus"): (
        lambda v: fluss_ray.start_job(_make, store=_store(), num_cpus=v), CPUS, (0, 0.5, 2)),
    ("fluss_ray.start_job", "memtable_bytes"): (
        lambda v: fluss_ray.start_job(_make, store=_store(), memtable_bytes=v), COUNT, (None, 1 << 20)),
    ("fluss_ray.run_job_once", "memtable_bytes"): (
        lambda v: fluss_ray.run_job_once(_make, store=_store(), memtable_bytes=v), COUNT, (None, 8 << 20)),
    ("fluss_ray.run_job_once", "shards"): (
        lambda v: fluss_ray.run_job_once(_make, store=_store(), shards=v), COUNT, (1, 2)),
    ("fluss_ray.run_job_once", "max_steps"): (
        lambda v: fluss_ray.run_job_once(_make, store=_store(), max_steps=v), NON_NEGATIVE, (None, 0, 3)),
    ("fluss_ray.run_job_once", "max_retries"): (
        lambda v: fluss_ray.run_job_once(_make, store=_store(), max_retries=v), NON_NEGATIVE, (0, 3)),
    ("fluss_ray.run_job_once", "num_cpus"): (
        lambda v: fluss_ray.run_job_once(_make, store=_store(), num_cpus=v), CPUS, (0, 1.5)),
    ("fluss_ray.tier_on_ray", "shards"): (lambda v: fluss_ray.tier_on_ray(_store(), _lake(), shards=v), COUNT, (1, 2)),
    ("fluss_ray.tier_on_ray", "max_retries"): (
        lambda v: fluss_ray.tier_on_ray(_store(), _lake(), max_retries=v), NON_NEGATIVE, (0, 3)),
    ("fluss_ray.tier_on_ray", "num_cpus"): (
        lambda v: fluss_ray.tier_on_ray(_store(), _lake(), num_cpus=v), CPUS, (0, 1)),
    ("fluss_ray.RayJob.status", "timeout_s"): (lambda v: fluss_ray.RayJob("j", [], 1).status(timeout_s=v), SECONDS, ()),
    ("fluss_ray.RayJob.stop", "timeout_s"): (lambda v: fluss_ray.RayJob("j", [], 1).stop(timeout_s=v), SECONDS, ()),
    ("fluss_ray.RayJob.wait_caught_up", "timeout_s"): (
        lambda v: fluss_ray.RayJob("j", [], 1).wait_caught_up(timeout_s=v), SECONDS, ()),
    ("fluss_ray.RayJob.wait_caught_up", "poll_s"): (
        lambda v: fluss_ray.RayJob("j", [], 1).wait_caught_up(poll_s=v), SECONDS, ()),
    ("fluss_ray.read_lake", "snapshot_id"): (
        lambda v: fluss_ray.read_lake(_lake(), "d.t", snapshot_id=v), (True, 1.5, "3", NAN), ()),
}

#: Numeric parameters that are not inputs to check, and why.
NOT_INPUTS = {
    **{("fluss_ray.ShardStatus.__init__", name): "a report the shard builds, never an input"
       for name in ("shard", "shards", "checkpoint", "offsets", "lag", "records_read", "rows_per_s", "steps", "pid")},
    ("fluss_ray.RayJob.__init__", "shards"): "built by start_job from its checked shards",
    ("fluss_ray.LiveTableDatasource.get_read_tasks", "parallelism"): "Ray Data calls it with its own plan",
    ("fluss_ray.LiveTableDatasource.get_read_tasks", "per_task_row_limit"): "Ray Data calls it with its own plan",
    ("fluss_ray.LiveTableDatasource.prepare_read", "parallelism"): "Ray Data's own interface (inherited)",
    ("serving.RemoteTable.limit_scan", "limit"): "sent to the server, whose library call checks it (tests/serving)",
    ("serving.RemoteTable.changelog", "start_timestamp"): "sent to the server, whose library call checks it",
    ("serving.RemoteTable.scan_log", "start_timestamp"): "sent to the server, whose library call checks it",
}


def _callables() -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    for module in (serving, fluss_ray):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for attr, fn in inspect.getmembers(obj):
                    fn = getattr(fn, "__func__", fn)
                    if (attr.startswith("_") and attr != "__init__") or not inspect.isfunction(fn):
                        continue
                    if attr == "__init__" and fn.__qualname__.split(".")[0] != obj.__name__:
                        continue
                    found.setdefault(f"{module.__name__}.{name}.{attr}", fn)
            elif inspect.isfunction(obj):
                found.setdefault(f"{module.__name__}.{name}", obj)
    return found


def test_every_numeric_parameter_is_listed() -> None:
    numeric = _numeric_parameters(_callables())
    listed = set(ROWS) | set(NOT_INPUTS)
    assert not numeric - listed, f"unchecked numeric parameters: {sorted(numeric - listed)}"
    assert not listed - numeric, f"stale rows: {sorted(listed - numeric)}"


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)


def _cases(which: int) -> list[Any]:
    return [pytest.param(key, value, id=f"{key[0]}:{key[1]}={value!r}")
            for key, row in ROWS.items() for value in row[which]]


@pytest.mark.parametrize(("key", "value"), _cases(1))
def test_bad_values_are_refused_naming_the_argument(key: tuple[str, str], value: Any) -> None:
    with pytest.raises(fl.InvalidConfigError, match=key[1]):
        ROWS[key][0](value)


@pytest.mark.parametrize(("key", "value"), _cases(2))
def test_good_values_pass_the_checks(key: tuple[str, str], value: Any) -> None:
    try:
        ROWS[key][0](value)
    except fl.FlussLakeError as exc:  # what comes after the checks: no cluster here, no server there
        assert "ray.init" in str(exc) or key[0].startswith("serving."), exc
        assert f"{key[1]}=" not in str(exc), exc

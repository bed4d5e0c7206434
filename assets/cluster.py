"""The Ray cluster the demo's jobs and tiering run on, by configuration (a dagster-ray resource).

:class:`RayCluster` is a :class:`dagster_ray.RayResource` (connection lifecycle, ``ray_init_options``,
``env_vars`` for the workers) for a cluster that already runs (the one the platform teams keep), reached at
``address``: ``ray://head:10001`` (Ray Client) or ``head:6379`` (the GCS, from a node of the cluster). With no
address (the default, and ``$FLUSS_LAKE_RAY_ADDRESS`` unset) nothing connects and the assets run their jobs in
their own process, as before. dagster-ray's own resources either create clusters (KubeRay) or start a local
Ray (``LocalRay``); connecting to an existing address is what this subclass adds.

With an address, each job asset runs its job's ``shards`` as Ray tasks (``fluss_ray.run_job_once``) and the
tiering asset runs one task per table (``fluss_ray.tier_on_ray``); each is still one asset in the UI.

Examples
--------
>>> RayCluster().enabled, RayCluster(address="ray://head:10001", shards=2).enabled
(False, True)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator
from typing import Any

import dagster as dg
from dagster_ray import RayResource
from pydantic import Field, PrivateAttr

from fluss_lake._utils.arguments import check_int

__all__ = ["RAY_ADDRESS_ENV", "RayCluster"]

#: The environment variable naming the cluster when the resource does not.
RAY_ADDRESS_ENV = "FLUSS_LAKE_RAY_ADDRESS"


class RayCluster(RayResource):
    """An existing Ray cluster for the demo's jobs and tiering (no address: run in the asset's process)."""

    address: str | None = Field(
        default=None,
        description=f"Ray address (ray://host:10001 or host:6379; default: ${RAY_ADDRESS_ENV}, else no Ray)",
    )
    shards: int = Field(default=1, description="Shards (Ray tasks) each job runs as; each shard has its checkpoint")

    _owns_connection: bool = PrivateAttr(default=False)

    @property
    def resolved_address(self) -> str | None:
        return self.address or os.environ.get(RAY_ADDRESS_ENV) or None

    @property
    def enabled(self) -> bool:
        """Whether the jobs run on Ray (an address is configured)."""
        return self.resolved_address is not None

    @property
    def host(self) -> str:
        address = self.resolved_address or "127.0.0.1"
        return address.removeprefix("ray://").split(":")[0]

    @property
    def name(self) -> str:
        return f"Ray cluster at {self.resolved_address}"

    @property
    def ray_address(self) -> str:
        return self.resolved_address or ""

    @property
    def created(self) -> bool:
        return True  # it exists already: never created nor deleted here

    @property
    def ready(self) -> bool:
        return True

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Generator[RayCluster, None, None]:
        check_int("RayCluster(shards)", self.shards, minimum=1, hint="shards each job runs as")
        if not self.enabled:
            yield self
            return
        with super().yield_for_execution(context) as resource:
            yield resource

    def connect(self, context: Any) -> Any:  # type: ignore[override]
        """Connect (``ray.init``), unless this process is connected already (then it stays so afterwards)."""
        import ray

        if ray.is_initialized():
            return None
        self._owns_connection = True
        return super().connect(context)

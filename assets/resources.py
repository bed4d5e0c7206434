"""Dagster resources: the live store, the lake catalog and the demo scenario, with embedded defaults.

With no configuration everything lives under one local folder, the *home*: ``$FLUSS_LAKE_HOME`` or
``./.fluss-lake``. The live store is ``<home>/live``; the lake catalog is sqlite at ``<home>/lake/catalog.db``
with its warehouse at ``<home>/lake/warehouse``. Each value can be set on the resource or by environment:

============================  ===================================  =====================================
resource field                environment variable                 default
============================  ===================================  =====================================
``LiveStore.url``             ``FLUSS_LAKE_URL``                   ``<home>/live``
``LiveStore.storage_options`` ``FLUSS_LAKE_STORAGE_OPTIONS`` (JSON) ``{}`` (fsspec/s3fs options for S3)
``LakeCatalog.uri``           ``FLUSS_LAKE_CATALOG_URI``           ``sqlite:///<home>/lake/catalog.db``
``LakeCatalog.warehouse``     ``FLUSS_LAKE_WAREHOUSE``             ``file://<home>/lake/warehouse``
``LakeCatalog.properties``    ``FLUSS_LAKE_CATALOG_PROPERTIES``    ``{}`` (``type: rest``, ``s3.*`` ...)
============================  ===================================  =====================================
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import dagster as dg
from pydantic import Field, PrivateAttr

import fluss_lake as fl
from assets.generators import Scenario
from fluss_lake.exceptions import InvalidConfigError
from tiering.home import HOME_ENV, Home

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    import tiering

__all__ = ["HOME_ENV", "DemoScenario", "LakeCatalog", "LiveStore", "fluss_lake_home"]


def fluss_lake_home() -> Path:
    """The embedded default's folder: ``$FLUSS_LAKE_HOME`` or ``./.fluss-lake`` (absolute; see tiering.home)."""
    return Home.resolve().root


def _json_object(text: str | None, what: str) -> dict[str, Any]:
    """Parse a JSON object given as configuration; a clear error otherwise."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(
            f"{what} is not valid JSON ({exc.msg} at character {exc.pos}); give an object "
            'such as {"endpoint_url": "http://127.0.0.1:9000"}'
        ) from None
    if not isinstance(value, dict):
        raise InvalidConfigError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


class LiveStore(dg.ConfigurableResource):
    """The fluss-lake store holding the live tables: a local folder by default, ``s3://`` by configuration.

    Examples
    --------
    >>> import tempfile
    >>> LiveStore(url=tempfile.mkdtemp()).connection().list_databases()
    []
    """

    url: str | None = Field(
        default=None, description="Store folder or fsspec URL (default: $FLUSS_LAKE_URL, else <home>/live)"
    )
    storage_options: str | None = Field(
        default=None, description="fsspec storage options as a JSON object (default: $FLUSS_LAKE_STORAGE_OPTIONS)"
    )
    local_dir: str | None = Field(
        default=None, description="Cache folder for primary-key state segments (default: a temporary folder)"
    )

    _connection: fl.Connection | None = PrivateAttr(default=None)

    def resolved_url(self) -> str:
        """Where the store lives after applying the environment and the embedded default."""
        return self.url or os.environ.get("FLUSS_LAKE_URL") or str(fluss_lake_home() / "live")

    def resolved_storage_options(self) -> dict[str, Any]:
        """fsspec options after applying the environment."""
        text = (
            self.storage_options if self.storage_options is not None else os.environ.get("FLUSS_LAKE_STORAGE_OPTIONS")
        )
        return _json_object(text, "storage_options")

    def connection(self) -> fl.Connection:
        """A connection to the store (one per resource instance)."""
        if self._connection is None:
            self._connection = fl.connect(
                self.resolved_url(), storage_options=self.resolved_storage_options(), local_dir=self.local_dir
            )
        return self._connection


class LakeCatalog(dg.ConfigurableResource):
    """The Iceberg catalog the lake tables live in: pyiceberg's SQL catalog on sqlite by default.

    ``properties`` (JSON) adds or overrides pyiceberg catalog properties: ``{"type": "rest", "uri": ...}`` for
    a REST catalog, ``s3.endpoint`` / ``s3.access-key-id`` / ``s3.secret-access-key`` / ``s3.region`` for an
    S3 warehouse (give all four: see STACK-NOTES §3).
    """

    name: str = Field(
        default="fluss", description="Catalog name (tiering's default, so `fluss-lake tier` sees the same tables)"
    )
    uri: str | None = Field(
        default=None,
        description="Catalog URI (default: $FLUSS_LAKE_CATALOG_URI, else sqlite:///<home>/lake/catalog.db)",
    )
    warehouse: str | None = Field(
        default=None, description="Warehouse location (default: $FLUSS_LAKE_WAREHOUSE, else <home>/lake/warehouse)"
    )
    properties: str | None = Field(
        default=None, description="More catalog properties as a JSON object (default: $FLUSS_LAKE_CATALOG_PROPERTIES)"
    )

    _lake: Any = PrivateAttr(default=None)

    def resolved_properties(self) -> dict[str, str]:
        """Every catalog property after applying the environment and the embedded default."""
        lake = fluss_lake_home() / "lake"
        extra = _json_object(
            self.properties if self.properties is not None else os.environ.get("FLUSS_LAKE_CATALOG_PROPERTIES"),
            "catalog properties",
        )
        kind = str(extra.get("type", "sql"))
        uri = self.uri or os.environ.get("FLUSS_LAKE_CATALOG_URI")
        warehouse = self.warehouse or os.environ.get("FLUSS_LAKE_WAREHOUSE")
        if kind == "sql":  # the embedded default; other catalogs (REST...) get only what was configured
            uri = uri or f"sqlite:///{lake / 'catalog.db'}"
            warehouse = warehouse or (lake / "warehouse").as_uri()
        props = {"type": kind, **({"uri": uri} if uri else {}), **({"warehouse": warehouse} if warehouse else {})}
        props.update({key: str(value) for key, value in extra.items()})
        return props

    def lake(self) -> tiering.Lake:
        """The lake as :class:`tiering.Lake` (one per resource instance): what tiering and lake reads take.

        Local sqlite and warehouse folders of the embedded default are created as needed.
        """
        if self._lake is None:
            import tiering

            props = self.resolved_properties()
            if props["type"] == "sql" and props.get("warehouse", "").startswith("file:"):
                Path(url2pathname(urlparse(props["warehouse"]).path)).mkdir(parents=True, exist_ok=True)
            self._lake = tiering.Lake(props, name=self.name)
        return self._lake

    def catalog(self) -> Catalog:
        """The pyiceberg catalog of :meth:`lake` (loaded on first use)."""
        return self.lake().catalog


class DemoScenario(dg.ConfigurableResource):
    """Sizes, seed and event clock of the Customer 360 demo generators (see :class:`assets.generators.Scenario`)."""

    seed: int = 7
    customers: int = Field(default=2_000, description="Customers created by batch 0")
    new_customers_per_batch: int = 25
    orders_per_batch: int = 600
    epoch: str = Field(default="2026-11-01T00:00:00+00:00", description="Start of batch 0's event-time window")
    batch_window_minutes: int = Field(default=60, description="Event time covered by one batch")

    def scenario(self) -> Scenario:
        """The generators' scenario."""
        try:
            epoch = datetime.fromisoformat(self.epoch)
        except ValueError:
            raise InvalidConfigError(
                f"epoch={self.epoch!r} is not an ISO timestamp; write e.g. '2026-11-01T00:00:00+00:00'"
            ) from None
        return Scenario(
            seed=self.seed,
            customers=self.customers,
            new_customers_per_batch=self.new_customers_per_batch,
            orders_per_batch=self.orders_per_batch,
            epoch=epoch,
            batch_window_ms=self.batch_window_minutes * 60_000,
        )

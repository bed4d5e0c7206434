"""A Dagster resource for a store served by ``fluss-lake serve``: the same ``connection()`` as :class:`LiveStore`,
so an asset reads and writes a served store or a local one without change (``docs/SERVING.md``).

=========================  ==============================  ================================================
resource field             environment variable            meaning
=========================  ==============================  ================================================
``ServedStore.url``        ``FLUSS_LAKE_SERVE_URL``        ``grpc://host:port`` (``grpc+tls://`` with TLS)
``ServedStore.token``      ``FLUSS_LAKE_SERVE_TOKEN``      the bearer token
``ServedStore.tls_root``   ``FLUSS_LAKE_SERVE_TLS_ROOT``   PEM file of the certificate(s) to trust
=========================  ==============================  ================================================
"""

from __future__ import annotations

import os

import dagster as dg
from pydantic import Field, PrivateAttr

import serving
from fluss_lake.exceptions import InvalidConfigError

__all__ = ["ServedStore"]


class ServedStore(dg.ConfigurableResource):
    """A store behind ``fluss-lake serve``: :meth:`connection` gives a :class:`serving.RemoteConnection` whose
    tables have the verbs of local tables (lookups, scans, changelogs, writes) and answer online features.

    Examples
    --------
    >>> ServedStore(url="grpc://127.0.0.1:8815").resolved_url()
    'grpc://127.0.0.1:8815'
    """

    url: str | None = Field(default=None, description="grpc://host:port of the server (default: $FLUSS_LAKE_SERVE_URL)")
    token: str | None = Field(default=None, description="bearer token (default: $FLUSS_LAKE_SERVE_TOKEN)")
    tls_root: str | None = Field(default=None, description="PEM file to trust (default: $FLUSS_LAKE_SERVE_TLS_ROOT)")
    timeout_s: float = Field(default=60.0, description="seconds each call may take")

    _connection: serving.RemoteConnection | None = PrivateAttr(default=None)

    def resolved_url(self) -> str:
        """The server's URL after applying the environment."""
        url = self.url or os.environ.get("FLUSS_LAKE_SERVE_URL")
        if not url:
            raise InvalidConfigError("ServedStore needs url= (or $FLUSS_LAKE_SERVE_URL), e.g. grpc://127.0.0.1:8815")
        return url

    def connection(self) -> serving.RemoteConnection:
        """A connection to the server (one per resource instance)."""
        if self._connection is None:
            self._connection = serving.connect(
                self.resolved_url(),
                token=self.token or os.environ.get("FLUSS_LAKE_SERVE_TOKEN"),
                tls_root_certs=self.tls_root or os.environ.get("FLUSS_LAKE_SERVE_TLS_ROOT"),
                timeout=self.timeout_s,
            )
        return self._connection

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Close the channel when the run ends."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

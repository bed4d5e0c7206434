"""Serving: an Arrow Flight server over a fluss-lake store, its Python client, and a Feast-shaped HTTP endpoint.

Layered on the core (``fluss_lake``), never imported by it. ``fluss-lake serve --store PATH`` (or
``python -m serving serve ...``) starts :class:`FlussLakeServer`; :func:`connect` gives a
:class:`RemoteConnection` whose tables have the verbs of local ones. ``docs/SERVING.md`` has the whole story.
"""

from serving.auth import Token, TokenSet
from serving.client import RemoteConnection, RemoteTable, connect
from serving.errors import (
    AuthenticationError,
    MalformedRequestError,
    PermissionDeniedError,
    RequestTimeoutError,
    RequestTooLargeError,
    ServerUnavailableError,
    ServingError,
)
from serving.server import FlussLakeServer, ServerConfig

__all__ = [
    "connect",
    "RemoteConnection",
    "RemoteTable",
    "FlussLakeServer",
    "ServerConfig",
    "Token",
    "TokenSet",
    "ServingError",
    "AuthenticationError",
    "PermissionDeniedError",
    "MalformedRequestError",
    "RequestTooLargeError",
    "RequestTimeoutError",
    "ServerUnavailableError",
]

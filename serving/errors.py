"""The server's own errors: leaves of the :class:`~fluss_lake.FlussLakeError` tree, so a client catches them as it
catches the library's (every library error crosses the wire as itself: see :mod:`serving.protocol`)."""

from __future__ import annotations

from fluss_lake.exceptions import FlussLakeError

__all__ = [
    "AuthenticationError",
    "MalformedRequestError",
    "PermissionDeniedError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "ServerUnavailableError",
    "ServingError",
]


class ServingError(FlussLakeError):
    """Root of the errors of the Flight server and its client."""


class AuthenticationError(ServingError):
    """No bearer token, or one the server does not know: send ``Authorization: Bearer <token>``."""


class PermissionDeniedError(ServingError):
    """The token does not cover this table, or only for reading: ask for a token with that scope."""


class MalformedRequestError(ServingError, ValueError):
    """A request the server cannot read (bad JSON, unknown verb, missing field, wrong shape)."""


class RequestTooLargeError(ServingError, ValueError):
    """A request over the server's size limits (bytes or rows): split it into smaller batches."""


class RequestTimeoutError(ServingError):
    """A request that took longer than the server's time limit; it may be retried, smaller."""

    retriable = True


class ServerUnavailableError(ServingError):
    """The server could not be reached, or is shutting down: retry, or check that it runs."""

    retriable = True

"""One classifier says whether an exception means "the storage did not answer": ``is_storage_unavailable``.

The live store turns such errors into ``StorageUnavailableError`` and tiering into ``LakeUnavailableError``
(both retriable); every other error stays what it is. The shapes below are the ones the two former classifiers
recognised (the store's: botocore/aiohttp/s3fs class names, socket errnos, S3 5xx and throttling answers; the
lake's: pyarrow's AWS SDK/curl messages, client-library classes by module and name, anywhere in the
``__cause__``/``__context__`` chain), and ones that must not count as outages.
"""

from __future__ import annotations

import errno

import botocore.exceptions as boto
import pytest
import urllib3.exceptions
from aiohttp import ClientOSError, ServerDisconnectedError
from fsspec.exceptions import FSTimeoutError
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

import fluss_lake as fl
from fluss_lake.exceptions import LakeTableMismatchError, StorageError, StorageUnavailableError
from fluss_lake.io.store import FsspecStore, is_storage_unavailable


def _client_error(code: str, status: int) -> boto.ClientError:
    return boto.ClientError({"Error": {"Code": code, "Message": "..."}, "ResponseMetadata": {"HTTPStatusCode": status}},
                            "PutObject")


def _named(name: str, module: str, base: type[BaseException] = Exception) -> BaseException:
    """An exception of a class called `name` defined in `module` (libraries we do not import here)."""
    return type(name, (base,), {"__module__": module})("...")


def _chained(outer: BaseException, inner: BaseException, *, implicit: bool = False) -> BaseException:
    """`outer` raised from `inner` (``raise ... from``), or while handling it (implicit context)."""
    try:
        try:
            raise inner
        except BaseException:
            if implicit:
                raise outer  # noqa: B904 - the implicit __context__ is the point
            raise outer from inner
    except BaseException as caught:
        return caught


def _deep(inner: BaseException, depth: int) -> BaseException:
    exc = inner
    for level in range(depth):
        exc = _chained(RuntimeError(f"level {level}"), exc)
    return exc


OUTAGES = {
    # builtins and socket errnos
    "connection refused": ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
    "connection reset": ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    "timeout": TimeoutError("timed out"),
    "oserror ECONNREFUSED": OSError(errno.ECONNREFUSED, "refused"),
    "oserror ETIMEDOUT": OSError(errno.ETIMEDOUT, "no answer"),
    # botocore / aiobotocore / aiohttp / urllib3 / s3fs classes
    "botocore endpoint": boto.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    "botocore connect timeout": boto.ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"),
    "botocore read timeout": boto.ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
    "botocore connection closed": boto.ConnectionClosedError(endpoint_url="http://127.0.0.1:1"),
    "aiohttp server disconnected": ServerDisconnectedError(),
    "aiohttp client os error": ClientOSError(errno.EPIPE, "broken pipe"),
    "aiohttp connector (by name)": _named("ClientConnectorError", "aiohttp.client_exceptions"),
    "urllib3 new connection": urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection"),
    "aiobotocore endpoint (by module)": _named("AioEndpointHiccup", "aiobotocore.endpoint"),
    "any *Timeout* class": _named("ReadTimeout", "requests.exceptions"),
    "fsspec deadline": FSTimeoutError(),
    # S3 answers: 5xx, throttling
    "s3 503 SlowDown": _client_error("SlowDown", 503),
    "s3 500 InternalError": _client_error("InternalError", 500),
    "s3 502 other code": _client_error("BadGateway", 502),
    "s3 throttling 400": _client_error("ThrottlingException", 400),
    "s3 RequestTimeout 400": _client_error("RequestTimeout", 400),
    # pyarrow's S3 filesystem (AWS SDK over curl)
    "pyarrow network": OSError("When reading information for key 'k' in bucket 'b': AWS Error NETWORK_CONNECTION "
                               "during HeadObject operation: curlCode: 7, Couldn't connect to server"),
    "pyarrow curl timeout": OSError("AWS Error UNKNOWN (HTTP status 0) during PutObject operation: curlCode: 28, "
                                    "Timeout was reached"),
    "could not connect": OSError("Could not connect to 127.0.0.1:9000"),
    "socket timed out": OSError("read timed out"),
    "reset text": OSError("Connection reset while writing"),
    # anywhere in the chain
    "cause": _chained(CommitFailedException("commit failed"), ConnectionRefusedError("refused")),
    "context": _chained(ValueError("while handling"), _client_error("ServiceUnavailable", 503), implicit=True),
    "deep chain": _deep(ConnectionResetError("reset"), 15),
}

NOT_OUTAGES = {
    "none": None,
    "missing object": FileNotFoundError(errno.ENOENT, "no such key"),
    "exists": FileExistsError(errno.EEXIST, "exists"),
    "permission": PermissionError(errno.EACCES, "denied"),
    "disk full": OSError(errno.ENOSPC, "No space left on device"),
    "value error mentioning a timeout": ValueError("timed out"),
    "key error": KeyError("x"),
    "s3 404": _client_error("NoSuchKey", 404),
    "s3 403": _client_error("AccessDenied", 403),
    "s3 412 conditional put lost": _client_error("PreconditionFailed", 412),
    "botocore no credentials": boto.NoCredentialsError(),
    "botocore bad parameters": boto.ParamValidationError(report="bad"),
    "connect-ish name outside client libraries": _named("EndpointMisconfigured", "myapp.settings"),
    "iceberg commit conflict": CommitFailedException("branch main has changed"),
    "iceberg no table": NoSuchTableError("t"),
    "lake mismatch": LakeTableMismatchError("other table id"),
    "storage error": StorageError("failed to write"),
    "chain without an outage": _deep(ValueError("bad"), 3),
}


@pytest.mark.parametrize("exc", OUTAGES.values(), ids=OUTAGES.keys())
def test_outages_are_recognised(exc):
    assert is_storage_unavailable(exc)


@pytest.mark.parametrize("exc", NOT_OUTAGES.values(), ids=NOT_OUTAGES.keys())
def test_other_errors_are_not_outages(exc):
    assert not is_storage_unavailable(exc)


def test_a_cyclic_chain_ends():
    a, b = ValueError("a"), KeyError("b")
    a.__context__, b.__context__ = b, a
    assert not is_storage_unavailable(a)
    c = RuntimeError("c")
    c.__cause__, a.__context__ = a, ConnectionResetError("reset")
    assert is_storage_unavailable(c)


@pytest.mark.parametrize(("raised", "expected"), [
    (OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 7"), StorageUnavailableError),
    (_client_error("SlowDown", 503), StorageUnavailableError),
    (PermissionError(errno.EACCES, "denied"), StorageError),
])
def test_the_store_classifies_with_it(raised, expected, monkeypatch):
    store = FsspecStore("memory://outage-classifier")
    store.put("k", b"v")

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(store.fs, "cat_file", fail)
    with pytest.raises(StorageError) as failure:
        store.get("k")
    assert type(failure.value) is expected
    assert failure.value.retriable == (expected is StorageUnavailableError)


@pytest.mark.parametrize(("raised", "unavailable"), [
    (_client_error("ServiceUnavailable", 503), True),
    (_chained(RuntimeError("load failed"), OSError("curlCode: 7, Could not connect")), True),
    (ValueError("not an outage"), False),
])
def test_tiering_classifies_with_it(raised, unavailable, tmp_path, monkeypatch):
    from tiering import Lake, tier_table

    conn = fl.connect(str(tmp_path / "store"))
    conn.create_database("d")
    conn.create_table("d.ev", schema={"v": "INT"}, options={"table.datalake.enabled": True})
    ev = conn.get_table("d.ev")
    ev.append([{"v": 1}])
    lake = Lake.for_connection(conn)

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(Lake, "ensure", fail)
    with pytest.raises(Exception) as failure:
        tier_table(ev, lake)
    if unavailable:
        assert isinstance(failure.value, fl.LakeUnavailableError) and failure.value.retriable
        assert failure.value.__cause__ is raised
    else:
        assert failure.value is raised

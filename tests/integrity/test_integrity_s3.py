"""A subset of the damage matrix on S3 (the session's moto server on 127.0.0.1): the pristine store is uploaded
twice to a fresh bucket, one copy read in a fresh connection for the expected answer, the other damaged through
boto3 (objects overwritten, deleted, exchanged) and read again in another fresh connection (its own local folder:
state segments are downloaded again, damage included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from integrity_helpers import (
    PATHS,
    TARGETS,
    XFAIL,
    Case,
    IntegrityLog,
    Objects,
    Pristine,
    S3Objects,
    connect,
    damage,
    judge,
    outcome,
    untailed,
)

pytestmark = pytest.mark.s3

#: One or two damages of each class per kind of object, read by the paths that tell them apart.
CELLS = [
    ("log-batch", "flip@middle", "to_polars"),
    ("log-batch", "truncate@-8", "scan_log"),
    ("log-batch", "delete", "changelog"),
    ("log-batch", "swap", "to_polars"),
    ("log-batch", "flip@middle", "tiering"),
    ("log-batch@newest", "delete", "scan_log"),
    ("log-segment", "truncate@half", "to_polars"),
    ("log-segment", "flip@end-8", "scan_log"),
    ("pk-log-batch", "flip@middle", "changelog"),
    ("pk-log-batch", "delete", "scan_log"),
    ("pk-log-batch@covered", "delete", "to_polars"),
    ("kv-segment", "flip@middle", "lookup"),
    ("kv-segment", "truncate@half", "to_polars"),
    ("kv-segment", "delete", "to_polars"),
    ("kv-segment", "swap", "lookup"),
    ("kv-index", "flip@middle", "lookup"),
    ("kv-index", "truncate@-8", "lookup"),
    ("kv-manifest", "flip@middle", "to_polars"),
    ("kv-manifest", "swap", "lookup"),
    ("job-checkpoint", "flip@middle", "delta-join"),
    ("job-checkpoint", "swap", "delta-join"),
    ("table-meta", "flip@middle", "to_polars"),
    ("partition-record", "truncate@half", "scan_log"),
]
assert not [c for c in CELLS if c in XFAIL]


@pytest.mark.parametrize(("kind", "how", "path"), [pytest.param(*c, id="/".join(c)) for c in CELLS])
def test_damage_on_s3(
    kind: str,
    how: str,
    path: str,
    pristine: Pristine,
    s3_url: tuple[str, dict[str, Any]],
    moto_endpoint: str,
    integrity_log: IntegrityLog,
    tmp_path: Path,
) -> None:
    target = TARGETS[kind]
    source = pristine(target.store)
    key, partner = target.pick(Objects(source))
    read = PATHS[path]
    url, options = s3_url
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    S3Objects(client, bucket, "before").upload(source)  # read paths write (a job's checkpoints, repairs)
    before = f"s3://{bucket}/before"
    expected = read(connect(before, tmp_path / "state-before", options), target.table, tmp_path / "lake-before")
    objects = S3Objects(client, bucket, prefix)
    objects.upload(source)
    limit = None
    if how in target.limit:
        never = S3Objects(client, bucket, "never")
        never.upload(untailed(source))
        limit = read(connect(f"s3://{bucket}/never", tmp_path / "s-never", options), target.table, tmp_path / "l-n")
    assert integrity_log() == []

    damage(objects, key, how, partner)
    got = outcome(lambda: read(connect(url, tmp_path / "state-after", options), target.table, tmp_path / "lake-after"))
    judge(expected, got, Case(target, how, path, tmp_path, key, partner, integrity_log()), limit=limit)

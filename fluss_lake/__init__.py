"""fluss-lake: Apache Fluss-style streaming tables on Polars/Arrow whose state lives in storage.

Log tables (append-only, bucketed, dense offsets) and primary-key tables (merge engines, changelog) on a
local folder or S3; see :func:`connect`.

Examples
--------
>>> import tempfile, fluss_lake as fl
>>> conn = fl.connect(tempfile.mkdtemp())
>>> conn.create_database("shop")
>>> _ = conn.create_table("shop.spend", schema={"user": "INT", "total": "BIGINT"}, primary_key=["user"],
...                       options={"table.merge-engine": "aggregation", "fields.total.agg": "sum"})
>>> spend = conn.get_table("shop.spend")
>>> _ = spend.upsert([{"user": 1, "total": 5}, {"user": 1, "total": 7}])
>>> spend.to_polars().to_dicts()
[{'user': 1, 'total': 12}]
"""

from fluss_lake import jobs
from fluss_lake.connection import Connection, connect
from fluss_lake.exceptions import *  # noqa: F403 - the exception tree is public
from fluss_lake.exceptions import __all__ as _exceptions
from fluss_lake.jobs.shard import Shard
from fluss_lake.metadata.descriptor import TableDescriptor, TableInfo
from fluss_lake.metadata.schema import Column, Schema
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.runtime.verification import Damage, IntegrityReport
from fluss_lake.table import Table
from fluss_lake.write.write_result import WriteResult

__version__ = "0.1.0"

__all__ = [
    "jobs",
    "connect",
    "Connection",
    "Table",
    "TableDescriptor",
    "TableInfo",
    "TablePath",
    "Schema",
    "Column",
    "WriteResult",
    "IntegrityReport",
    "Damage",
    "Shard",
    *_exceptions,
]

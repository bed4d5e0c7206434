"""Zero-state jobs: delta joins, lookup joins and aggregation push-down, checkpointed as offsets in the store.

See ``docs/JOBS.md``. A job reads the changelogs of its inputs from the offsets of its last checkpoint (kept in
the store under ``.jobs/<name>/``), writes a result table, and commits the offsets it consumed. A job can be split
into shards (:class:`Shard`) that each read a disjoint set of the inputs' buckets (``docs/SHARDS.md``).
"""

from fluss_lake.jobs.aggregation import Aggregation
from fluss_lake.jobs.delta_join import DeltaJoin
from fluss_lake.jobs.job import Job, JobReport, JobStatus
from fluss_lake.jobs.join_job import explain_join, join
from fluss_lake.jobs.join_plan import Explanation, Join
from fluss_lake.jobs.lookup_join import LookupCache, LookupJoin
from fluss_lake.jobs.shard import Shard
from fluss_lake.jobs.stateful_join import StatefulJoin

__all__ = [
    "Aggregation",
    "DeltaJoin",
    "Explanation",
    "Job",
    "JobReport",
    "JobStatus",
    "Join",
    "LookupCache",
    "LookupJoin",
    "Shard",
    "StatefulJoin",
    "explain_join",
    "join",
]

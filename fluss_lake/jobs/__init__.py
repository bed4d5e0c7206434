"""Zero-state jobs: delta joins, lookup joins and aggregation push-down, checkpointed as offsets in the store."""

from fluss_lake.jobs.delta_join import DeltaJoin
from fluss_lake.jobs.job import Job, JobReport
from fluss_lake.jobs.join_job import explain_join, join
from fluss_lake.jobs.join_plan import Explanation, Join
from fluss_lake.jobs.stateful_join import StatefulJoin

__all__ = ["DeltaJoin", "Explanation", "Job", "JobReport", "Join", "StatefulJoin", "explain_join", "join"]

"""Point-in-time training sets, online features, state as of a time, and the decision log, from one definition.

The engine is pure Polars/Arrow: it reads *history frames* (a table's changelog with ``__change_type``,
``__bucket``, ``__offset``, ``__timestamp``; see :mod:`fluss_lake.training.history`) from the lake's history
table or from a live table's log, and never imports the lake library. ``docs/TRAINING.md`` has the rules.
"""

from fluss_lake.training.decision_log import (
    DECISION_LOG_SCHEMA,
    create_decision_log,
    log_decision,
    log_decisions,
    reconstruct_decisions,
)
from fluss_lake.training.feature_log import (
    FEATURE_LOG_SCHEMA,
    create_feature_log,
    log_served_features,
    served_features,
)
from fluss_lake.training.feature_view import FeatureView
from fluss_lake.training.history import SYSTEM_COLUMNS, history_of, history_source
from fluss_lake.training.online import STATUS, OnlineFeatures, online_features
from fluss_lake.training.state import state_as_of
from fluss_lake.training.training_set import register_training_set, training_set

__all__ = [
    "DECISION_LOG_SCHEMA",
    "FEATURE_LOG_SCHEMA",
    "STATUS",
    "SYSTEM_COLUMNS",
    "FeatureView",
    "OnlineFeatures",
    "create_decision_log",
    "create_feature_log",
    "history_of",
    "history_source",
    "log_decision",
    "log_decisions",
    "log_served_features",
    "online_features",
    "reconstruct_decisions",
    "served_features",
    "register_training_set",
    "state_as_of",
    "training_set",
]

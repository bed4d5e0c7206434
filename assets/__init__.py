"""Dagster code location of fluss-lake: the Customer 360 and fraud-signals demo as assets.

A thin shell over :mod:`fluss_lake` (``fluss_lake`` never imports Dagster). The definitions are in
:mod:`assets.definitions`; ``fluss-lake ui`` starts the Dagster UI on them (see ``docs/DAGSTER.md``).
"""

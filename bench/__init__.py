"""fluss-lake benchmarks: ours vs a real peer on the same data, interleaved, medians and ratios.

See ``bench/README.md`` and ``design/BENCHMARKS.md``. Run ``python -m bench.<name>`` or ``python -m bench``.
"""

"""Build glue that pyproject.toml cannot say quietly: the inner loops compiled with Cython at install time.

The KV read path (probe, gather, key hashing), the row hashes (MurmurHash3, XXH64) and the training sets' as-of
join by key. They are declared here
rather than as ``[tool.setuptools] ext-modules``, which setuptools marks experimental with a warning that pip
passes on even under ``pip install -q``. setuptools also announces every editable install with an "Editable
installation." notice (that folders named like a package may shadow it: this flat layout is meant to be imported
from the checkout); it is filtered here, so that ``pip install -q -e .`` prints only what needs attention.
"""

import warnings

from setuptools import Extension, setup

warnings.filterwarnings("ignore", message="Editable install", module="setuptools")

setup(
    ext_modules=[
        Extension("fluss_lake.kv._kernels", ["fluss_lake/kv/_kernels.pyx"]),
        Extension("fluss_lake.keys._hash_kernels", ["fluss_lake/keys/_hash_kernels.pyx"]),
        Extension("fluss_lake.training._kernels._asof", ["fluss_lake/training/_kernels/_asof.pyx"]),
    ]
)

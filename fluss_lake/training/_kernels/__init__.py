"""The training sets' compiled inner loops (:mod:`._asof`), in a package of their own: importing them does not
import :mod:`fluss_lake.training`, whose face imports the modules that use them."""

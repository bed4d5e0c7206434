"""The PyFlink peer of ``bench.multiway``: its own venv (outside the repo) and the job it runs there."""

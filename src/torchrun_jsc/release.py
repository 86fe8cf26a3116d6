"""This package's version: the one source (pyproject.toml reads it from here; the package and
the plan import it)."""

__version__ = "0.2.0"

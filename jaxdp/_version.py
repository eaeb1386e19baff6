"""The package version: the one source (``pyproject.toml`` reads it from here)."""

__version__ = "0.2.0"

"""``gpupool``: the portal's REST API (``/api/v1/``) from a terminal (``docs/cli.md``)."""

__version__ = "0.1.0"

"""The ``taskret`` command line: a thin layer over the Python API (``main`` the entry point)."""

from .main import app, main

__all__ = ["app", "main"]

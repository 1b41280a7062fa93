"""Serve an index over HTTP (``taskret serve``): ``create_app`` builds the FastAPI app over an index folder
(:mod:`taskret.retrieval.index`: ``save_index`` / ``load_index``), with a page to try it at ``/`` (the static files
under ``static/``, shipped as package data).

FastAPI and uvicorn are optional (``pip install 'taskret[serve]'``); the index functions need neither.
"""

from __future__ import annotations

from ..retrieval.index import InvalidIndex, LoadedIndex, load_index, save_index

__all__ = ["InvalidIndex", "LoadedIndex", "create_app", "load_index", "save_index"]


def __getattr__(name: str):
    if name == "create_app":
        try:
            from . import app
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError(f"taskret.serve.{name} needs FastAPI and uvicorn: pip install 'taskret[serve]' "
                              f"({err})") from err
        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""taskret: learned, task-aware retrieval.

Pipeline modules, in order: ``data`` -> ``retrieval`` (candidates, indexes) -> ``lm`` (scoring,
generation) -> ``prompt`` -> ``inference`` -> ``evaluation``.
"""

__version__ = "0.1.0"

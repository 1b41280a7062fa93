"""taskret: learned, task-aware retrieval (EPR prompt retrieval, TART instruction-following retrieval).

The pipeline, one module or subpackage a stage::

    data, io          tasks of examples and retrieval tasks; files with located errors, atomic writes
    formats           the texts the models see (demonstrations, scoring pairs, instructed queries)
    retrieval/        retrievers by name (random, bm25, dense, ...) and the one on-disk index format
    backends/         language models by name (transformers in process, OpenAI-compatible server, vLLM)
    icl/              prompt assembly, inference, in-context-learning evaluation
    training/         configs, batching, encoders, losses and the one fit loop every model uses
    epr/, tart/       the two methods' own stages (candidates -> scoring -> labels; tasks -> negatives)
    serve/, cli/      the HTTP service and the command line, thin layers over the above

One factory per kind of component, by name, each imported only when used::

    import taskret
    retriever = taskret.make_retriever("bm25")          # or "dense:minilm-l6", "epr:runs/epr", a saved index
    lm = taskret.load_lm("smollm2-135m")                # or "openai:http://host:8000/v1#name", "vllm:..."
    reranker = taskret.load_reranker("runs/tart/full")  # a TART-full folder (taskret.rerank)
    corpus = taskret.load_corpus("my-corpus/")          # a BEIR folder (qrels optional), a JSONL or CSV file
    setup = taskret.resolve_setup("docs-rerank")        # a named setup: .retriever, .rerank, .spec
"""

from __future__ import annotations

from importlib import import_module

from ._version import __version__

_FACTORIES = {
    "make_retriever": "taskret.retrieval",
    "load_lm": "taskret.backends.base",
    "load_reranker": "taskret.rerank",
    "load_task": "taskret.data",
    "load_retrieval_task": "taskret.tart.tasks",
    "load_corpus": "taskret.tart.tasks",
    "resolve_setup": "taskret.setups",
    "save_index": "taskret.retrieval.index",
    "load_index": "taskret.retrieval.index",
    "search_index": "taskret.tart.search",
}

__all__ = ["__version__", *_FACTORIES]


def __getattr__(name: str):
    if name in _FACTORIES:
        return getattr(import_module(_FACTORIES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""TART: instruction-following retrieval (Asai et al., 2022, "Task-aware Retrieval with Instructions").

``tasks``: retrieval tasks (BEIR layout, and MTOP / Break / AmbigQA / SciFact cast as retrieval) with
their instructions; ``ict``: a task drawn from a corpus without queries (inverse cloze task); ``evaluation``: NDCG@10 / Recall@100 / MRR@10 of any retriever, with or without
instructions, on each task's own corpus (closed) or on all corpora pooled, optionally reranked;
``training_data``: rows of (instruction, query, positive, negatives); ``dual``: TART-dual;
``cross_encoder``: TART-full (its reranking: :mod:`taskret.rerank`); ``distil``: TART-full distilled into a dual
encoder; ``search``: a saved index searched with an instruction; ``pipeline``: ``taskret tart run``;
``cli``: ``taskret tart ...``.
"""

from ..formats import format_query
from .evaluation import METRICS, compute_metrics, evaluate_retriever
from .tasks import (
           RETRIEVAL_TASKS,
           Document,
           RetrievalTask,
           doc_text,
           load_retrieval_task,
           read_beir,
           read_instructions,
)

__all__ = ["METRICS", "RETRIEVAL_TASKS", "Document", "RetrievalTask", "compute_metrics", "doc_text",
           "evaluate_retriever", "format_query", "load_retrieval_task", "read_beir", "read_instructions"]

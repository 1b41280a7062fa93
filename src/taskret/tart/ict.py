"""Retrieval training data from an unlabelled corpus: the inverse cloze task (ICT; Lee et al. 2019, ORQA).

Each sampled document gives one query, one of its sentences; the relevant document is the same document with
that sentence taken out (kept with probability ``keep_sentence``, so that the retriever learns the context of a
statement and not only its words). A user who holds documents of a domain but no queries gets a task in it; the
benchmarks use it to add statement -> scientific-text pairs, which berri-lite lacks, from corpora other than
the evaluation's.

Two ways to use it:

* in a training config, the task spec ``ict:SOURCE`` (``ict:berri-lite/scitldr``, ``ict:path/to/beir``), built in
  memory, deterministically from ``seed``; its ``train`` split holds the training queries and ``dev`` (also
  ``test``) the held-out ones;
* ``taskret tart ict SOURCE --out DIR`` writes the same task as a BEIR folder (with ``instructions.json``), to read,
  edit or share.

Public API::

    split_sentences(text)                        # -> list of sentences (a rule, no model)
    draw_ict(corpus, settings)                   # -> IctDraw: both splits' queries, drawn once
    inverse_cloze_task(corpus, split=..., ...)   # -> RetrievalTask
    ict_task(source, data_dir, split)            # the ict:SOURCE spec
    write_ict_folder(draw, out, ...)             # -> out (BEIR layout, written whole or not at all)
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

from ..io import write_json, write_jsonl
from .tasks import ICT_PREFIX, RETRIEVAL_TASKS, Document, RetrievalTask, load_corpus

__all__ = ["ICT_PREFIX", "ICT_INSTRUCTIONS", "IctSettings", "IctDraw", "split_sentences", "draw_ict",
           "inverse_cloze_task", "ict_task", "source_corpus", "write_ict_folder"]

#: Instructions of an ICT task (the first is the evaluation one), phrased for any kind of text.
ICT_INSTRUCTIONS = [
    "Retrieve the passage that this sentence was taken from",
    "Given a statement, find the document that makes it, in context",
    "Find the text this sentence comes from",
    "Retrieve a document that contains and explains this statement",
]

# A sentence ends at . ! or ? followed by space and an upper-case letter, a digit or an opening quote/bracket;
# abbreviations such as "e.g. the" (lower case next) therefore do not split.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, by punctuation and capitalisation."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


@dataclass(frozen=True)
class IctSettings:
    """How queries are drawn: documents with at least ``min_sentences`` sentences give one query each, a
    sentence of ``min_words``..``max_words`` words; ``n_dev`` of them are held out (the ``dev`` split), the next
    ``n_train`` (None: all the rest) train; a sentence found in more than one document is never a query.
    ``keep_sentence`` is the chance the sentence stays in its document."""

    n_train: int | None = None
    n_dev: int = 50
    min_words: int = 8
    max_words: int = 60
    min_sentences: int = 3
    keep_sentence: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.keep_sentence <= 1.0:
            raise ValueError(f"keep_sentence must be in [0, 1], got {self.keep_sentence}")
        if self.min_words < 1 or self.max_words < self.min_words:
            raise ValueError(f"need 1 <= min_words <= max_words, got {self.min_words} and {self.max_words}")
        if self.min_sentences < 2:
            raise ValueError("min_sentences must be >= 2: a document of one sentence leaves nothing to retrieve")
        if self.n_dev < 0 or (self.n_train is not None and self.n_train < 1):
            raise ValueError("n_dev must be >= 0 and n_train >= 1 (or None for all)")


class IctDraw(NamedTuple):
    """One draw of the inverse cloze task over a corpus: the corpus with the drawn sentences taken out,
    ``{query id: sentence}``, ``{query id: the document it came from}`` and the query ids of each split
    (``train``, ``dev``), in drawing order."""

    corpus: dict[str, Document]
    queries: dict[str, str]
    sources: dict[str, str]
    splits: dict[str, list[str]]

    def qrels(self, split: str) -> dict[str, dict[str, int]]:
        return {q: {self.sources[q]: 1} for q in self.splits[split]}


def draw_ict(corpus: Mapping[str, Document], settings: IctSettings | None = None) -> IctDraw:
    """Draw one query from each usable document of ``corpus`` and split the queries (see :class:`IctSettings`)."""
    settings = settings or IctSettings()
    split = {doc_id: split_sentences(doc.text) for doc_id, doc in corpus.items()}
    # Boilerplate (a sentence found in several documents) has no one source to retrieve: never a query.
    seen = Counter(s for sentences in split.values() for s in set(sentences))
    drawn: dict[str, tuple[str, Document]] = {}
    for doc_id, doc in corpus.items():
        sentences = split[doc_id]
        if len(sentences) < settings.min_sentences:
            continue
        usable = [i for i, s in enumerate(sentences)
                  if settings.min_words <= len(s.split()) <= settings.max_words and seen[s] == 1]
        if not usable:
            continue
        # One generator per document, seeded by its id: a document's query does not depend on the others.
        rng = random.Random(f"{settings.seed}:{doc_id}")
        pick = rng.choice(usable)
        kept = sentences if rng.random() < settings.keep_sentence else sentences[:pick] + sentences[pick + 1:]
        drawn[doc_id] = (sentences[pick], Document(doc.id, doc.title, " ".join(kept)))
    order = sorted(drawn)
    random.Random(settings.seed).shuffle(order)
    query_ids = [f"ict-{d}" for d in order]
    rest = query_ids[settings.n_dev:]
    return IctDraw(corpus={doc_id: drawn[doc_id][1] if doc_id in drawn else doc for doc_id, doc in corpus.items()},
                   queries={q: drawn[d][0] for q, d in zip(query_ids, order)},
                   sources=dict(zip(query_ids, order)),
                   splits={"train": rest if settings.n_train is None else rest[:settings.n_train],
                           "dev": query_ids[:settings.n_dev]})


def inverse_cloze_task(corpus: Mapping[str, Document], *, name: str = "ict", split: str = "train",
                       settings: IctSettings | None = None,
                       instructions: Sequence[str] = tuple(ICT_INSTRUCTIONS)) -> RetrievalTask:
    """The ICT task of ``corpus``: the ``train`` or ``dev`` (``test``: the same) split's queries, each judged
    relevant to the document it was taken from; the corpus (identical for both splits) has every drawn
    sentence taken out. Raises ``ValueError`` if the split would be empty."""
    settings = settings or IctSettings()
    if split == "test":
        split = "dev"
    if split not in ("train", "dev"):
        raise ValueError(f"an ICT task has splits train and dev (test reads dev), not '{split}'")
    draw = draw_ict(corpus, settings)
    ids = draw.splits[split]
    if not ids:
        raise ValueError(f"ICT task '{name}': no {split} queries (of {len(corpus)} documents, {len(draw.queries)} "
                         f"have >= {settings.min_sentences} sentences and one of {settings.min_words}-"
                         f"{settings.max_words} words; {settings.n_dev} go to dev)")
    return RetrievalTask(name, draw.corpus, {q: draw.queries[q] for q in ids}, draw.qrels(split), list(instructions))


def source_corpus(source: str, data_dir: str | os.PathLike | None = None) -> tuple[str, dict[str, Document]]:
    """(name, corpus) of an ICT source: ``berri-lite/TASK``, a built-in task (its first split's corpus), a
    BEIR folder or a corpus file (:func:`~taskret.tart.tasks.load_corpus`)."""
    split = next(iter(RETRIEVAL_TASKS[source].splits)) if source in RETRIEVAL_TASKS else "train"
    corpus = load_corpus(source, data_dir, split)
    return corpus.name, corpus.documents


def ict_task(source: str, data_dir: str | os.PathLike | None = None, split: str = "train",
             settings: IctSettings | None = None) -> RetrievalTask:
    """The task spec ``ict:SOURCE`` (``SOURCE`` without the prefix): named ``{source name}-ict``."""
    name, corpus = source_corpus(source, data_dir)
    return inverse_cloze_task(corpus, name=f"{name}-ict", split=split, settings=settings)


def write_ict_folder(draw: IctDraw, out: str | os.PathLike, *,
                     instructions: Sequence[str] = tuple(ICT_INSTRUCTIONS)) -> Path:
    """Write a draw (:func:`draw_ict`) to ``out`` in the BEIR layout (``corpus.jsonl``, ``queries.jsonl``,
    ``qrels/train.tsv``, ``qrels/dev.tsv`` when it has dev queries, ``instructions.json``), all of it or nothing."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out}: already exists; choose a new folder")
    if not draw.splits["train"]:
        raise ValueError(f"no ICT queries drawn from {len(draw.corpus)} documents (see IctSettings)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_jsonl(tmp / "corpus.jsonl", ({"_id": d.id, "title": d.title, "text": d.text} for d in draw.corpus.values()))
        kept = set(draw.splits["train"]) | set(draw.splits["dev"])
        write_jsonl(tmp / "queries.jsonl", ({"_id": q, "text": text} for q, text in draw.queries.items() if q in kept))
        (tmp / "qrels").mkdir()
        for split, ids in draw.splits.items():
            if ids:
                lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{draw.sources[q]}\t1" for q in ids]
                (tmp / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        write_json(tmp / "instructions.json", list(instructions))
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out

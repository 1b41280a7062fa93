"""BM25 over example inputs, outputs or both, with bm25s (sparse scores, stemmed, English stop words).

BM25 reads the query alone: an instructed query ``"{instruction} [SEP] {query}"`` loses its instruction
(:func:`taskret.formats.split_query`), as a hybrid's BM25 component does, since an instruction's words only add
noise to a lexical match (on a medical QA corpus, 39.0 NDCG@10 instructed against 58.2 bare).
``read_instruction=True`` (spec ``bm25?read_instruction=1``) keeps it.

Retrieval runs on bm25s's numpy backend or its numba one (``backend``). Numba is the faster by far (top 10 of 1M
documents: 0.75 ms against 29 ms; of 100K: 0.14 against 3.0; ``benchmarks/results/scale.json``) and ranks by the same
scores (equal scores in corpus order on both: :meth:`BM25Retriever._ranked`), but compiles for ~5 s once per process.
``auto`` (the default) chooses by the index's size, so that an index always ranks the same way: numba from
:data:`NUMBA_FROM` documents on, where it pays back its compile within a few thousand queries; a service compiles it
as it starts (:meth:`~taskret.retrieval.base.Retriever.warm_up`), a one-off search at its first query.

``backend="pisa"`` (spec ``bm25?backend=pisa``; the ``pisa`` extra) finds the top k with PISA's MaxScore over bm25s's
own scores and re-scores it exactly (:mod:`taskret.retrieval.bm25_pisa`): bm25s's ranking, ids and scores, without
scoring every document a query touches. Its index is saved beside bm25s's (``pisa/``) and made at load for an index
saved without it. ``auto`` saves an index of :data:`PISA_FROM` documents or more with one too, where pyterrier-pisa is
installed, and searches a loaded index on it where it has one: the ranking is the same either way.

A build streamed with a shard folder (``taskret tart index``, ``taskret index``: :meth:`index_stream` with a
:class:`~taskret.retrieval.shards.ShardPlan`) runs in segments on disk (:mod:`taskret.retrieval.bm25_segments`): its
memory stays flat in the corpus size and its index is the one the in-memory build makes, file for file."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from ..allocator import keep_freed_blocks
from ..data import Example
from . import bm25_pisa
from .base import RetrievalResult, Retriever, example_text, unique_ids
from .bm25_segments import TOKEN_PATTERN
from .budget import MemoryBudget
from .hybrid import strip_instructions

BACKENDS = ("auto", "numpy", "numba", "pisa")
#: How much deeper than k a search looks for documents tied with its k-th score (:meth:`BM25Retriever._ranked`).
TIE_MARGIN = 10
#: How much deeper than k a search on PISA first looks (:meth:`BM25Retriever._ranked_on_pisa`; a deeper search, x4,
#: starts again). At 10M documents tie groups of copied documents outran 10 (386 of 1,000 real queries searched again);
#: 30 sent 14 again, 100 none. Chosen on 500 queries, held out on 500 (benchmarks/results/bm25_pisa_depth.json, 2-core
#: Xeon): 30 against 10 0.86x a query (0.83-0.89), p50 6.7 against 7.9 ms, p99 73 against 125; 100 and 300 no faster.
PISA_MARGIN = 30
#: The same for each part of an index in parts (module bm25_pisa), every part searched that deep: a part's own top k
#: holds every document of the top k that it has, and ties spread over the parts. k + 30 a part was 1.25x k + 0's time
#: a query (1.23-1.28) at 10M in 7 parts (benchmarks/results/bm25_pisa_parts.json, 500 queries, 2-core Xeon).
PISA_PART_MARGIN = 0
#: ``auto`` retrieves on numba from this many indexed documents on. On 2 AMD EPYC cores numpy takes ~29 ns per
#: document and query (3.0 ms a query over 100K documents) and numba's compile ~5 s: from 100K documents on it pays
#: back within ~1,700 queries (a service's first seconds, or one batch search), and saves most of a served query.
NUMBA_FROM = 100_000
#: ``auto`` saves an index of this many documents or more with its PISA index too (where pyterrier-pisa is installed),
#: and searches a loaded index on PISA where it has one (same ranking: module bm25_pisa). One thread, each query alone,
#: 1,000 real queries paired (benchmarks/results/bm25_pisa.json, 2-core Xeon): at 10M documents PISA 8.1 ms p50 against
#: bm25s's 18.5 (0.44x a query); at 1M 1.25 against 1.43, within noise by the signed-rank test (p 0.10), its p99 2.7x
#: bm25s's (queries whose ties send it deeper). Sizes between were not measured: from 10M, where it was shown to win.
PISA_FROM = 10_000_000


def numba_available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def _quiet_bm25s() -> None:
    # bm25s sets its own logger to DEBUG, so every index build reaches the application's handlers.
    logging.getLogger("bm25s").setLevel(logging.WARNING)


def _tokenize(texts: Sequence[str], return_ids: bool = True):
    import bm25s
    import Stemmer

    return bm25s.tokenize(list(texts), stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False,
                          return_ids=return_ids)


class _TokenStream:
    """bm25s.tokenize (lower-cased, English stop words out, stemmed) one text at a time, for a corpus read in a pass:
    each text becomes a compact array of term ids (4 bytes a token) and the texts are not kept. Terms are stemmed
    once at the end, as bm25s stems its vocabulary, so the index scores exactly as one built from the texts at once
    (its term ids are numbered otherwise, which no score depends on)."""

    def __init__(self):
        import re

        from bm25s.stopwords import STOPWORDS_EN

        self.split = re.compile(TOKEN_PATTERN).findall
        self.stopwords = set(STOPWORDS_EN)
        self.terms: dict[str, int] = {}
        self.docs: list = []

    def add(self, text: str) -> None:
        from array import array

        terms, stop = self.terms, self.stopwords
        self.docs.append(array("i", (terms.setdefault(token, len(terms)) for token in self.split(text.lower())
                                     if token not in stop)))

    def tokenized(self):
        """bm25s's ``Tokenized(ids, vocab)`` of every text added, their terms stemmed."""
        from array import array

        import Stemmer
        from bm25s.tokenization import Tokenized

        stems = Stemmer.Stemmer("english").stemWords(list(self.terms))
        vocab = {stem: n for n, stem in enumerate(dict.fromkeys(stems))}
        stem_of = array("i", (vocab[stem] for stem in stems))
        docs, self.docs, self.terms = self.docs, [], {}
        for n, doc in enumerate(docs):
            docs[n] = array("i", (stem_of[term] for term in doc))
        return Tokenized(ids=docs, vocab=vocab)


def _no_terms(n: int, first: str | None) -> ValueError:
    example = f" (e.g. {first[:80]!r})" if first is not None else ""
    return ValueError(f"bm25: the {n} indexed texts have no terms after English stop-word removal "
                      f"and stemming{example}; BM25 needs content words: index another field "
                      f"(bm25:output, bm25:both) or use another retriever (sbert, dense:ENCODER)")


class BM25Retriever(Retriever):
    name = "bm25"

    def __init__(self, field: str = "input", k1: float = 1.5, b: float = 0.75, read_instruction: bool = False,
                 backend: str = "auto", corpus_statistics: dict | None = None):
        """``backend``: bm25s's ``numpy`` or ``numba`` retrieval, or ``auto`` (module docstring); either ranks by
        the same scores. ``corpus_statistics`` (``{"n_docs", "total_length"}``): what a shard indexed with its whole
        corpus's statistics records of them (:meth:`index_shard`)."""
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"bm25: unknown backend '{backend}'; expected one of {BACKENDS}")
        if backend == "numba" and not numba_available():
            raise ImportError("bm25 backend 'numba' needs the numba package: pip install numba")
        if backend == "pisa" and not bm25_pisa.pisa_available():
            raise ImportError("bm25 backend 'pisa' needs pyterrier-pisa: pip install 'taskret[pisa]'")
        self.backend = backend
        self.read_instruction = bool(read_instruction)
        example_text(Example("", "", ""), field)  # validates the field name
        self.field = field
        self.k1 = k1
        self.b = b
        self._bm25 = None
        self.corpus_statistics = corpus_statistics
        self._built: Path | None = None  # a segmented build's folder until the index is saved
        self._pisa: bm25_pisa.PisaCandidates | None = None  # backend pisa: its index, opened at the first search
        self._pisa_folder: Path | None = None  # where that index is (a saved index's folder, else a temporary one)
        self._pisa_tmp = None

    @property
    def reads_instruction(self) -> bool:
        return self.read_instruction

    def _index_texts(self, texts: list[str]) -> None:
        self._fit(_tokenize(texts), texts[0] if texts else None, len(texts))

    def _index_stream(self, texts, n: int, plan) -> None:
        """Tokenize the texts as they are read (:class:`_TokenStream`): what is held is their term ids, never the
        texts; one progress line (rate, ETA) under :func:`~taskret.progress.reporting`. With a shard folder
        (``plan.directory``), in segments on disk there (:meth:`_index_in_segments`)."""
        from ..progress import stage

        if plan is not None and plan.directory is not None:
            self._index_in_segments(texts, n, Path(plan.directory) / "bm25", budget=plan.memory_budget)
            return
        stream, first = _TokenStream(), None
        with stage(n, f"tokenizing {n} texts for BM25", unit="texts") as advance:
            for text in texts():
                first = text if first is None else first
                stream.add(text)
                advance(1)
        if len(stream.docs) != n:
            raise ValueError(f"{n} ids but {len(stream.docs)} texts")
        self._fit(stream.tokenized(), first, n)

    def index_shard(self, ids, texts, statistics, work: Path, budget: MemoryBudget = MemoryBudget()) -> "BM25Retriever":
        """Index one shard of a corpus (``texts()`` yields its texts in ``ids``' order) scored with the whole
        corpus's ``statistics`` (:class:`~taskret.retrieval.bm25_segments.CorpusStatistics`): its documents score
        as in one index over the corpus (:mod:`taskret.retrieval.sharded`). ``work`` holds the segments, cut to
        ``budget`` (a :class:`~taskret.retrieval.budget.MemoryBudget`)."""
        held = unique_ids(ids)
        self._index_in_segments(texts, len(held), Path(work), statistics, budget)
        self.corpus_statistics = {"n_docs": statistics.n_docs, "total_length": statistics.total_length}
        self.ids = held
        return self

    def _index_in_segments(self, texts, n: int, folder: Path, statistics=None,
                           budget: MemoryBudget = MemoryBudget()) -> None:
        """:func:`~taskret.retrieval.bm25_segments.build_segmented` into ``folder/bm25s`` (moved into the index
        when it is saved), then that index memory-mapped; ``statistics``: the whole corpus's, for a shard;
        ``budget``: the :class:`~taskret.retrieval.budget.MemoryBudget` whose segment and merge sizes it builds with
        (8 GiB unless given)."""
        import bm25s

        from ..progress import stage
        from .bm25_segments import NoTerms, build_segmented

        seen = {"n": 0, "first": None}

        def read():
            with stage(n, f"tokenizing {n} texts for BM25", unit="texts") as advance:
                for text in texts():
                    seen["first"] = text if seen["first"] is None else seen["first"]
                    seen["n"] += 1
                    advance(1)
                    yield text

        built = folder / "bm25s"
        try:
            build_segmented(read(), built, folder / "segments", self.k1, self.b, segment_docs=budget.bm25_segment_docs,
                            merge_pairs=budget.bm25_merge_pairs, statistics=statistics)
        except NoTerms:
            if seen["n"] == n:
                raise _no_terms(n, seen["first"]) from None
            raise ValueError(f"{n} ids but {seen['n']} texts") from None
        if seen["n"] != n:
            raise ValueError(f"{n} ids but {seen['n']} texts")
        _quiet_bm25s()
        self._bm25 = bm25s.BM25.load(built, mmap=True)
        self._built = built
        self._pisa = self._pisa_folder = None

    def _fit(self, tokens, first: str | None, n: int) -> None:
        import bm25s

        _quiet_bm25s()
        if not tokens.vocab:
            # bm25s would divide by a zero mean length (a numpy warning) and fail on max() of an empty vocabulary.
            raise _no_terms(n, first)
        self._bm25 = bm25s.BM25(k1=self.k1, b=self.b)
        self._bm25.index(tokens, show_progress=False)
        self._built = None
        self._pisa = self._pisa_folder = None

    def retrieve(self, queries: Sequence[str], k: int, exclude: Sequence[str | None] | None = None) -> RetrievalResult:
        # Here, not in _search: a hybrid calls _search with the queries its own read_instruction chose.
        if not self.read_instruction:
            queries = strip_instructions(queries)
        return super().retrieve(queries, k, exclude)

    def uses_numba(self) -> bool:
        """Whether this index retrieves on numba (``backend``, or with ``auto`` its size: module docstring; ``pisa``
        scores on bm25s only for the rare query with fewer than k matching documents, and there by size)."""
        if self.backend in ("numpy", "numba"):
            return self.backend == "numba"
        return len(self.ids) >= NUMBA_FROM and numba_available()

    def _search(self, queries: Sequence[str], k: int):
        tokens = _tokenize(queries, return_ids=False)
        self._bm25.backend = "numba" if self.uses_numba() else "numpy"
        # bm25s allocates a score per document for each query and frees it: past ~8M documents glibc would map and
        # fault in that array anew for every query (allocator module docstring)
        keep_freed_blocks(len(self.ids) * np.dtype(getattr(self._bm25, "dtype", None) or "float32").itemsize)
        # bm25s ranks queries whose words are all unknown arbitrarily; their scores are all zero.
        rows, scores = self._ranked_on_pisa(tokens, k) if self.uses_pisa() else self._ranked(tokens, k)
        return rows.tolist(), np.asarray(scores, dtype=np.float32)

    def uses_pisa(self) -> bool:
        """Whether this index searches on PISA: ``backend="pisa"``, or ``auto`` with a PISA index made when it was
        saved (:data:`PISA_FROM` documents or more, pyterrier-pisa installed)."""
        if self.backend != "auto":
            return self.backend == "pisa"
        return self._pisa_folder is not None and bm25_pisa.built(self._pisa_folder) and bm25_pisa.pisa_available()

    def _pisa_candidates(self) -> bm25_pisa.PisaCandidates:
        """The PISA index (:mod:`~taskret.retrieval.bm25_pisa`) of this bm25s index: a saved index's, made at save
        or at its first load; an index not saved gets one in a temporary folder, made at its first search."""
        if self._pisa is None:
            if self._pisa_folder is None or not bm25_pisa.built(self._pisa_folder):
                import tempfile

                self._pisa_tmp = tempfile.TemporaryDirectory(prefix="taskret-pisa-")
                self._pisa_folder = Path(self._pisa_tmp.name) / bm25_pisa.FOLDER
                self._build_pisa(self._pisa_folder)
            self._pisa = bm25_pisa.PisaCandidates(self._pisa_folder)
        return self._pisa

    def __getstate__(self) -> dict:
        # PISA's open index is a C handle, and a temporary PISA folder belongs to this process: another process
        # (a Ray task, a pickled copy) opens the saved one itself, or makes its own at its first search
        state = dict(self.__dict__)
        if state.get("_pisa_tmp") is not None:
            state["_pisa_folder"] = None
        state["_pisa"] = state["_pisa_tmp"] = None
        return state

    def _build_pisa(self, folder: Path) -> None:
        scores = self._bm25.scores
        bm25_pisa.build(scores["data"], scores["indices"], scores["indptr"], int(scores["num_docs"]), folder)

    def _ranked_on_pisa(self, tokens: list[list[str]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_ranked`'s rows and scores, the candidates found by PISA (module bm25_pisa): each query's top
        ``k + PISA_MARGIN`` by quantized score (``k + PISA_PART_MARGIN`` of each part of an index in parts),
        re-scored exactly and ordered by (score, row), searched deeper until no document left out can reach the k-th
        score. A query with fewer than ``k`` matching documents goes to
        :meth:`_ranked` (bm25s fills it with unmatched ones in its own order)."""
        pisa, scores = self._pisa_candidates(), self._bm25.scores
        data, indices, indptr = scores["data"], scores["indices"], scores["indptr"]
        n = len(self.ids)
        out_rows = np.zeros((len(tokens), k), dtype=np.int64)
        out_scores = np.zeros((len(tokens), k), dtype=data.dtype)
        to_bm25s = []
        for q, query in enumerate(tokens):
            term_ids = self._bm25.get_tokens_ids(query)
            depth = min(n, k + (PISA_MARGIN if pisa.parts == 1 else PISA_PART_MARGIN))
            while k > 0:
                found = pisa.search(term_ids, depth) if term_ids else None
                if found is None or len(found.rows) < k:  # every matching document is in (each part holds >= k)
                    to_bm25s.append(q)
                    break
                exact = bm25_pisa.exact_scores(data, indices, indptr, term_ids, found.rows)
                order = np.lexsort((found.rows, -exact))[:k]
                if found.left_out_at_most is None or depth >= n or bm25_pisa.certain(
                        exact[order[-1]], found.left_out_at_most, len(term_ids), pisa.unit):
                    out_rows[q], out_scores[q] = found.rows[order], exact[order]
                    break
                depth = min(n, depth * 4)
        if to_bm25s:
            self._bm25.backend = "numba" if self.uses_numba() else "numpy"
            rows, found = self._ranked([tokens[q] for q in to_bm25s], k)
            out_rows[to_bm25s], out_scores[to_bm25s] = rows, found
        return out_rows, out_scores

    def _ranked(self, tokens: list[list[str]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's top ``k`` rows and scores, equal scores in corpus order (the lower row first, as PISA and
        Lucene walk their postings). bm25s leaves equal scores in whatever order its partial sort left them, and a
        corpus with repeated documents has many: a copy outranking its original, judged document costs NDCG (at 1M
        documents, benchmarks/results/bm25_ties.json: bm25s's order against corpus order), and shards merged by
        score could not give the single index's order. So each query's top is searched deeper than ``k`` until the
        deepest score falls below the k-th (the whole tie at rank k is then inside), and ordered by (score, row).
        A query with fewer than ``k`` matching documents is filled with unmatched ones (score 0) in bm25s's order:
        they are no match, and corpus order there would make every small corpus's first documents the hard negatives
        a miner draws."""
        def retrieve(queries: list[list[str]], depth: int) -> tuple[np.ndarray, np.ndarray]:
            # n_threads=0: a plain loop; any other count starts a thread pool per call, which cost a single query
            # (the service's case) more than its scoring did.
            rows, scores = self._bm25.retrieve(queries, k=depth, show_progress=False, n_threads=0)
            return np.asarray(rows), np.asarray(scores)

        n = len(self.ids)
        depth = min(n, k + TIE_MARGIN)
        rows, scores = retrieve(tokens, depth)
        out_rows, out_scores = np.empty((len(tokens), k), dtype=rows.dtype), np.zeros((len(tokens), k), scores.dtype)
        for q in range(len(tokens)):
            q_rows, q_scores, q_depth = rows[q], scores[q], depth
            # a tie running past the depth: search that query deeper (rare: a score shared by > TIE_MARGIN documents)
            while k > 0 and q_depth < n and q_scores[-1] > 0 and q_scores[-1] >= q_scores[k - 1]:
                q_depth = min(n, q_depth * 4)
                deeper_rows, deeper_scores = retrieve(tokens[q:q + 1], q_depth)
                q_rows, q_scores = deeper_rows[0], deeper_scores[0]
            matched = q_scores > 0
            m_rows, m_scores = q_rows[matched], q_scores[matched]
            order = np.lexsort((m_rows, -m_scores))[:k]
            top = m_rows[order]
            out_rows[q, :len(top)], out_scores[q, :len(top)] = top, m_scores[order]
            if len(top) < k:  # every matching document is in (a zero was reached): then bm25s's unmatched ones
                out_rows[q, len(top):] = q_rows[~matched][:k - len(top)]
        return out_rows, out_scores

    def config(self) -> dict:
        config = {"field": self.field, "k1": self.k1, "b": self.b, "read_instruction": self.read_instruction}
        if self.corpus_statistics is not None:  # a shard's: its scores read the whole corpus's statistics
            config["corpus_statistics"] = self.corpus_statistics
        if self.backend == "pisa":  # an index of its own on disk (numpy and numba are how a search runs)
            config["backend"] = self.backend
        return config

    def _save_index(self, directory: Path) -> None:
        if getattr(self, "_built", None) is not None:  # a segmented build's files: moved, not written again
            import os

            target = directory / "bm25s"
            target.mkdir(parents=True, exist_ok=True)
            for file in self._built.iterdir():
                os.replace(file, target / file.name)
            self._built = None  # the arrays stay mapped: a moved file keeps its pages
        else:
            self._bm25.save(directory / "bm25s")
        if self.backend == "pisa" or (self.backend == "auto" and len(self.ids) >= PISA_FROM
                                       and bm25_pisa.pisa_available()):
            self._pisa = None
            self._pisa_folder = directory / bm25_pisa.FOLDER
            self._build_pisa(self._pisa_folder)

    def _load_index(self, directory: Path) -> None:
        import bm25s

        # mmap: the score arrays stay in the page cache, shared by every process that serves the index.
        self._bm25 = bm25s.BM25.load(directory / "bm25s", mmap=self.mmap)
        n_docs = (getattr(self._bm25, "scores", None) or {}).get("num_docs")
        if n_docs is not None and int(n_docs) != len(self.ids):
            raise ValueError(f"{directory}: the BM25 index holds {n_docs} documents but the index lists "
                             f"{len(self.ids)} ids (mismatched or partial index)")
        self._pisa, self._pisa_folder = None, directory / bm25_pisa.FOLDER
        # asked for PISA: an index saved before its PISA index was made gets it now, beside bm25s/
        if self.backend == "pisa" and not bm25_pisa.built(self._pisa_folder):
            self._build_pisa(self._pisa_folder)

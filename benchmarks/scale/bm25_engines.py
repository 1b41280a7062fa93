"""The BM25 engines engines.py compares, each an indexer (corpus -> folder) and a searcher (folder -> top-10 rows),
run in engines.py's child processes: bm25s (numpy and numba backends), PISA (block-max WAND, MaxScore), tantivy and
Lucene (Anserini through Pyserini), at taskret's k1 and b where the engine takes them and each with the English
analyser closest to bm25s's that it offers."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scale.py
from scale import K, corpus_texts, percentiles, timed_results  # noqa: E402

#: What taskret's BM25 ranks with (:class:`taskret.retrieval.bm25.BM25Retriever`'s defaults).
K1, B = 1.5, 0.75
#: tantivy's BM25 constants: its Python binding (and the engine's default scorer) takes no other.
TANTIVY_K1_B = (1.2, 0.75)
#: The engines compared, each with the index it searches (bm25s's backends search one index, as do PISA's).
BM25_ENGINES = {"bm25s-numpy": "bm25s", "bm25s-numba": "bm25s", "pisa-bmw": "pisa", "pisa-maxscore": "pisa",
                "tantivy": "tantivy", "lucene": "lucene"}
JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"  # Debian 12's only JDK; used when $JAVA_HOME is unset
WARM_SINGLE = 50  # queries searched one at a time before the timed ones (and every query once batched)


def stopwords() -> list[str]:
    """bm25s's English stop words (Lucene's 33, which PISA's ``lucene`` list and Anserini's default are too)."""
    from bm25s.stopwords import STOPWORDS_EN

    return sorted(STOPWORDS_EN)


# -- BM25 engines: each an indexer (corpus -> folder) and a searcher (folder -> top-10 rows) -----------------------


def bm25s_analyser() -> dict:
    return {"tokenizer": r"regex (?u)\b\w\w+\b on lower-cased text (bm25s.tokenize)",
            "stopwords": "bm25s 'en' (Lucene's 33 English stop words)", "stemmer": "Snowball English (PyStemmer)"}


BM25S_SCORING = "Lucene's BM25 (idf log(1 + (N - df + 0.5) / (df + 0.5))), exact document lengths"


def index_bm25s(corpus: Path, folder: Path, k1: float, b: float, threads: int) -> dict:
    """taskret's BM25 index, built as `tart index` builds it (one pass, the texts tokenized as they are read)."""
    from taskret.retrieval import BM25Retriever

    start = time.perf_counter()
    n = sum(1 for _ in corpus_texts(corpus))  # the ids first, as `tart index` scans the corpus
    retriever = BM25Retriever(k1=k1, b=b)
    retriever.index_stream([str(i) for i in range(n)], lambda: corpus_texts(corpus))
    retriever.save(folder)
    return {"index_s": time.perf_counter() - start, "analyser": bm25s_analyser(), "scoring": BM25S_SCORING}


class Bm25sSearch:
    """The saved index memory-mapped, as `taskret serve` loads it; one backend, chosen here, not by size."""

    def __init__(self, folder: Path, backend: str, threads: int):
        from taskret.retrieval import Retriever

        self.retriever = Retriever.load(folder, mmap=True)
        self.retriever.backend = backend
        self.threads = threads
        self.retriever.warm_up()  # numba compiles before the first query, as a service does

    def search(self, query: str) -> list[str]:
        """The matching top 10's ids (:meth:`rows` turns them into rows once the timing is done)."""
        found = self.retriever.retrieve([query], k=K)
        return [doc for doc, score in zip(found.ids[0], found.scores[0]) if score > 0]

    def search_batch(self, queries: list[str]) -> list[list[str]]:
        from taskret.retrieval.bm25 import _tokenize

        bm25 = self.retriever._bm25
        bm25.backend = "numba" if self.retriever.uses_numba() else "numpy"
        rows, scores = bm25.retrieve(_tokenize(queries, return_ids=False), k=K, show_progress=False,
                                     n_threads=self.threads)
        return [[self.retriever.ids[row] for row, score in zip(top, top_scores) if score > 0]
                for top, top_scores in zip(rows.tolist(), scores)]

    def rows(self, tops: list[list[str]]) -> list[list[int]]:
        """The tops' ids as corpus rows (an index built here holds ids ``str(row)``, ``--reference-index`` the
        corpus's own)."""
        return rows_of(self.retriever.ids, tops)


def rows_of(ids: Sequence[str], tops: list[list[str]]) -> list[list[int]]:
    """Each top's ids as their rows in ``ids`` (one pass over them, holding only the ids wanted)."""
    wanted = {doc for top in tops for doc in top}
    row = {doc: n for n, doc in enumerate(ids) if doc in wanted}
    return [[row[doc] for doc in top] for top in tops]


def matched(ids: Sequence[str], scores: Sequence[float]) -> list[int]:
    """bm25s's top rows that match a query term: it fills a top 10 with zero-score documents in no particular order,
    where the other engines return only the documents that match."""
    return [int(row) for row, score in zip(ids, scores) if score > 0]


def index_pisa(corpus: Path, folder: Path, k1: float, b: float, threads: int) -> dict:
    from pyterrier_pisa import PisaIndex, _pisathon

    # Quiet PISA's progress lines (one per percent of each stage) where the binding can: pyterrier-pisa 0.4.9's
    # log_level() calls a _pisathon.log_level its compiled extension lacks (AttributeError), so it is called only
    # where the extension has it; elsewhere the lines go to this child's stderr.
    if hasattr(_pisathon, "log_level"):
        _pisathon.log_level(0)
    start = time.perf_counter()
    index = PisaIndex(str(folder), stemmer="porter2", stops="lucene", threads=threads, text_field="text")
    index.index({"docno": str(i), "text": text} for i, text in enumerate(corpus_texts(corpus)))
    return {"index_s": time.perf_counter() - start,
            "analyser": {"tokenizer": "PISA's English tokenizer (alphanumeric runs, lower-cased; one-letter "
                                      "tokens kept)",
                         "stopwords": "PISA's 'lucene' list (= bm25s 'en', the same 33 words), dropped from queries",
                         "stemmer": "porter2 (Snowball English)"},
            "scoring": "PISA's BM25 (idf log((N - df + 0.5) / (df + 0.5)) floored at 1e-6: a term in over half "
                       "the documents counts ~0), exact document lengths counting stop words (PISA indexes them); "
                       "query terms weighted by their count"}


class PisaSearch:
    """PISA's C++ retrieval as ``PisaRetrieve.transform`` calls it, without the pandas frame around it (which
    costs more than the search at these sizes)."""

    def __init__(self, folder: Path, algorithm: str, threads: int, k1: float, b: float):
        from pyterrier_pisa import PisaIndex

        index = PisaIndex(str(folder), stops="lucene", threads=threads)
        # query_weighted: a query term counts as often as it occurs, as in bm25s and Lucene (PISA's default
        # for bm25 counts each once).
        self.retrieve = index.bm25(k1=k1, b=b, num_results=K, query_algorithm=algorithm, query_weighted=True)
        self.threads = threads

    def _run(self, queries: list[str], threads: int) -> list[list[int]]:
        from pyterrier_pisa import _pisathon

        size = len(queries) * K
        qidx, docnos = np.empty(size, dtype=np.int32), np.empty(size, dtype=object)
        ranks, scores = np.empty(size, dtype=np.int32), np.empty(size, dtype=np.float32)
        found = _pisathon.retrieve(self.retrieve._ctxt, self.retrieve.query_algorithm.value, list(enumerate(queries)),
                                   k=K, threads=threads, query_weighted=1, pretokenised=False, result_qidxs=qidx,
                                   result_docnos=docnos, result_ranks=ranks, result_scores=scores)
        tops: list[list[tuple[int, int]]] = [[] for _ in queries]
        for q, docno, rank in zip(qidx[:found], docnos[:found], ranks[:found]):
            tops[q].append((int(rank), int(docno)))
        return [[row for _, row in sorted(top)] for top in tops]

    def search(self, query: str) -> list[int]:
        return self._run([query], 1)[0]

    def search_batch(self, queries: list[str]) -> list[list[int]]:
        return self._run(queries, self.threads)


TANTIVY_TOKENIZER = "bm25s_en"


def tantivy_analyser():
    """bm25s's analysis built from tantivy's parts: its token pattern, lower case, its stop words, Snowball
    English."""
    import tantivy

    from taskret.retrieval.bm25 import TOKEN_PATTERN

    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(TOKEN_PATTERN)).filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.custom_stopword(stopwords())).filter(tantivy.Filter.stemmer("english")).build())


def tantivy_schema():
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False, tokenizer_name=TANTIVY_TOKENIZER, index_option="freq")
    builder.add_unsigned_field("row", stored=True)
    return builder.build()


def index_tantivy(corpus: Path, folder: Path, k1: float, b: float, threads: int) -> dict:
    import tantivy

    start = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(tantivy_schema(), path=str(folder))
    index.register_tokenizer(TANTIVY_TOKENIZER, tantivy_analyser())
    writer = index.writer(heap_size=512_000_000, num_threads=threads)
    for row, text in enumerate(corpus_texts(corpus)):
        writer.add_document(tantivy.Document(body=text, row=row))
    writer.commit()
    writer.wait_merging_threads()
    return {"index_s": time.perf_counter() - start,
            "analyser": {"tokenizer": r"regex (?u)\b\w\w+\b (bm25s's pattern), lower-cased",
                         "stopwords": "bm25s 'en' (custom_stopword)", "stemmer": "Snowball English (Filter.stemmer)"},
            "scoring": f"tantivy's BM25 at its fixed k1={TANTIVY_K1_B[0]}, b={TANTIVY_K1_B[1]} (Lucene's idf); "
                       "document lengths stored in one byte (Lucene's lossy norms)"}


class TantivySearch:
    """A query is its analysed terms, each a SHOULD term query (a term repeated counts again, as in bm25s), so that
    no query-parser syntax in a real query (``:``, ``-``, quotes) changes it."""

    def __init__(self, folder: Path, threads: int):
        import tantivy

        self.tantivy = tantivy
        self.index = tantivy.Index.open(str(folder))
        self.index.register_tokenizer(TANTIVY_TOKENIZER, tantivy_analyser())
        self.analyser = tantivy_analyser()
        self.schema = self.index.schema
        self.searcher = self.index.searcher()
        self.threads = threads

    def search(self, query: str) -> list[int]:
        tantivy = self.tantivy
        terms = self.analyser.analyze(query)
        if not terms:
            return []
        clauses = [(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "body", term)) for term in terms]
        hits = self.searcher.search(tantivy.Query.boolean_query(clauses), limit=K, count=False).hits
        return [self.searcher.doc(address)["row"][0] for _, address in hits]

    def search_batch(self, queries: list[str]) -> list[list[int]]:
        from concurrent.futures import ThreadPoolExecutor

        # tantivy's binding has no batch search: a thread per core, as an application would run it.
        with ThreadPoolExecutor(self.threads) as pool:
            return list(pool.map(self.search, queries))


def start_jvm():
    """Anserini's classes (the jar inside Pyserini) in this process's JVM. Through pyserini.pyclass only: the
    package's search module imports its neural encoders (transformers), which this torch does not load."""
    os.environ.setdefault("JAVA_HOME", JAVA_HOME)
    from pyserini.pyclass import autoclass

    return autoclass


def index_lucene(corpus: Path, folder: Path, k1: float, b: float, threads: int) -> dict:
    autoclass = start_jvm()
    start = time.perf_counter()
    source = folder.parent / f"{folder.name}.jsonl"  # Anserini's JsonCollection: one {id, contents} a line
    source.mkdir(parents=True, exist_ok=True)
    with open(source / "docs.jsonl", "w", encoding="utf-8") as out:
        for row, text in enumerate(corpus_texts(corpus)):
            out.write(json.dumps({"id": str(row), "contents": text}, ensure_ascii=False) + "\n")
    converted = time.perf_counter() - start
    autoclass("io.anserini.index.IndexCollection").main(
        ["-collection", "JsonCollection", "-input", str(source), "-index", str(folder), "-generator",
         "DefaultLuceneDocumentGenerator", "-threads", str(threads), "-optimize"])
    seconds = time.perf_counter() - start
    shutil.rmtree(source)
    return {"index_s": seconds, "convert_s": converted,
            "analyser": {"tokenizer": "Lucene StandardTokenizer (Unicode word breaks), lower-cased",
                         "stopwords": "Lucene's 33 English stop words (= bm25s 'en')",
                         "stemmer": "Porter (v1; Anserini's DefaultEnglishAnalyzer default)"},
            "scoring": "Lucene's BM25Similarity (idf log(1 + (N - df + 0.5) / (df + 0.5))), document lengths in "
                       "one byte; index_s includes writing Anserini's JSON input (convert_s)"}


class LuceneSearch:
    def __init__(self, folder: Path, threads: int, k1: float, b: float):
        autoclass = start_jvm()
        self.searcher = autoclass("io.anserini.search.SimpleSearcher")(str(folder))
        self.searcher.set_bm25(float(k1), float(b))
        self.list = autoclass("java.util.ArrayList")
        self.threads = threads

    def search(self, query: str) -> list[int]:
        return [int(hit.docid) for hit in self.searcher.search(query, K)]

    def search_batch(self, queries: list[str]) -> list[list[int]]:
        texts, ids = self.list(), self.list()
        for n, query in enumerate(queries):
            texts.add(query)
            ids.add(str(n))
        found = self.searcher.batch_search(texts, ids, K, self.threads)
        return [[int(hit.docid) for hit in found.get(str(n))] for n in range(len(queries))]


INDEXERS: dict[str, Callable] = {"bm25s": index_bm25s, "pisa": index_pisa, "tantivy": index_tantivy,
                                 "lucene": index_lucene}


def engine_k1_b(engine: str) -> tuple[float, float]:
    """The k1 and b an engine ranks with: taskret's, but tantivy's fixed pair."""
    return TANTIVY_K1_B if engine == "tantivy" else (K1, B)


def searcher(engine: str, folder: Path, threads: int):
    k1, b = engine_k1_b(engine)
    if engine.startswith("bm25s-"):
        return Bm25sSearch(folder, engine.removeprefix("bm25s-"), threads)
    if engine.startswith("pisa-"):
        return PisaSearch(folder, {"pisa-bmw": "block_max_wand", "pisa-maxscore": "maxscore"}[engine], threads, k1, b)
    if engine == "tantivy":
        return TantivySearch(folder, threads)
    if engine == "lucene":
        return LuceneSearch(folder, threads, k1, b)
    raise ValueError(f"unknown engine {engine}")


def search_engine(engine: str, folder: Path, queries: list[str], threads: int, tops_path: Path) -> dict:
    """Single queries (one at a time), then all of them batched on ``threads``; the single queries' top 10 rows
    go to ``tops_path`` (those are the rankings compared)."""
    start = time.perf_counter()
    engine_searcher = searcher(engine, folder, threads)
    open_s = time.perf_counter() - start
    # Warm, as a service is before it is measured: lazy loads, numba's compile (one per thread count), the JVM's JIT.
    # Every query once batched and a few alone: the same work for every engine.
    engine_searcher.search_batch(queries)
    for query in queries[:WARM_SINGLE]:
        engine_searcher.search(query)
    single, tops = timed_results(engine_searcher.search, queries)
    start = time.perf_counter()
    batched_tops = engine_searcher.search_batch(queries)
    batched_s = time.perf_counter() - start
    if hasattr(engine_searcher, "rows"):  # answers by id: turned into rows after the timings
        tops, batched_tops = engine_searcher.rows(tops), engine_searcher.rows(batched_tops)
    tops_path.write_text(json.dumps(tops))
    same = sum(set(a) == set(b) for a, b in zip(tops, batched_tops))
    return {**percentiles(single), "batched_qps": round(len(queries) / batched_s, 1), "open_s": round(open_s, 2),
            "batched_same_top10_share": round(same / len(queries), 4)}


def reference_tops(corpus: Path, queries: list[str], k1: float, b: float, tops_path: Path) -> dict:
    """bm25s (numpy, exact) at ``k1`` and ``b``: the ranking an engine that cannot take taskret's pair is
    compared with."""
    from taskret.retrieval import BM25Retriever

    retriever = BM25Retriever(k1=k1, b=b, backend="numpy")
    texts = list(corpus_texts(corpus))
    retriever.index_texts([str(i) for i in range(len(texts))], texts)
    del texts
    found = retriever.retrieve(queries, k=K)
    tops = [matched(ids, scores) for ids, scores in zip(found.ids, found.scores)]
    tops_path.write_text(json.dumps(tops))
    return {}


def reference_tops_from_index(index: Path, queries: list[str], tops_path: Path) -> dict:
    """bm25s's ranking read from a taskret BM25 index of the same corpus in the same order (memory-mapped; the
    ranking a bm25s index built from the texts gives, equal scores in corpus order as there), at the index's own k1
    and b (taskret's: :func:`reference_tops`'s reference pair)."""
    from taskret.retrieval import Retriever

    retriever = Retriever.load(index, mmap=True)
    if (retriever.k1, retriever.b) != (K1, B):
        raise SystemExit(f"{index}: k1 {retriever.k1}, b {retriever.b}; the reference ranking is at {K1} / {B}")
    found = retriever.retrieve(queries, k=K)
    tops = rows_of(retriever.ids, [[doc for doc, score in zip(ids, scores) if score > 0]
                                   for ids, scores in zip(found.ids, found.scores)])
    tops_path.write_text(json.dumps(tops))
    return {}


def count_corpus(corpus: Path) -> dict:
    """What scale.py's ``write_corpus`` says of a corpus it wrote, counted from the file: documents, real ones and
    synthetic ones (ids ``synthetic/N``)."""
    documents = synthetic = 0
    with open(corpus, encoding="utf-8") as lines:
        for line in lines:
            documents += 1
            synthetic += json.loads(line)["_id"].startswith("synthetic/")
    return {"documents": documents, "real": documents - synthetic, "synthetic": synthetic}


# -- dense libraries --------------------------------------------------------------------------------------------------



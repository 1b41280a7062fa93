"""Search against the engines users would pick instead (issue 62), side by side on scale.py's corpus.

BM25: bm25s (taskret's: its numpy and numba backends), PISA (``pyterrier-pisa``: block-max WAND and MaxScore),
tantivy (block-max WAND) and Lucene (Anserini's jar in Pyserini 0.25, the last release that runs on Debian 12's
JDK 17; Pyserini 0.35 on needs JDK 21), all at taskret's k1 and b where the engine takes them (tantivy's are fixed
at 1.2 / 0.75: its overlap is also measured against bm25s at those) and each with the English analyser closest to
bm25s's that it offers (recorded per engine). Ranking is checked, not assumed: NDCG@10 on the sampled real queries
that have qrels, and the top-10 overlap with bm25s (numpy, the exact reference) at the same k1 and b.

Dense: faiss HNSW (taskret's), usearch and hnswlib, each an HNSW graph of the same degree (M=32,
ef_construction=200, inner product) over the same vectors (the docs-fast index scale.py built for that size, read
back from its ``index.faiss``; else the corpus encoded here with MiniLM-L6), at several ef_search values: recall@10
against exact search (faiss flat; a result counts when it scores at least the exact 10th score, as ann-benchmarks
counts, since a corpus with identical documents has ties at rank 10; the share by id is kept beside it) and the
single-query p50 / p99 of the index alone (queries encoded beforehand), batched queries/s, build time, disk, peak RSS.

Every index is built in a child process of its own and searched in another (peak RSS from each one's rusage, as
scale.py does); single queries run one at a time on one thread, batched ones all at once on ``--threads``.

    python benchmarks/scale/engines.py --sizes 100000,1000000 --work runs/scale --out benchmarks/results/engines.json
    python benchmarks/scale/engines.py --sizes 10000 --queries 200 --work /tmp/engines --out /tmp/engines_small.json

Served (``--serve 1000000``, one run, the other parts kept): ``taskret serve --workers 2`` under wrk over that size's
``bm25`` and ``docs-fast`` indexes (scale.py's serve: the ``/health`` floor of the same run, each ``/retrieve``, the
docs-fast rate against its query encoder's batched rate), and over Break's 6,208 examples (``floor_6k``, ``bm25_6k``).

    python benchmarks/scale/engines.py --serve 1000000 --work runs/scale --out benchmarks/results/engines.json

``--work`` is scale.py's: a size's corpus and docs-fast index already there are used as they are. An engine whose
package (the ``engines`` extra) or JVM is missing is recorded with the reason and left out of the comparison.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scale.py: the corpus, the queries, the child processes
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))  # serving: serve_load.py, request_path.py
from _common import command_line, http_stack, machine, parser, write_result  # noqa: E402
from scale import (  # noqa: E402
    disk_gib,
    docs_fast_dense,
    in_child,
    percentiles,
    real_query_items,
    real_sources,
    timed,
    write_corpus,
)

#: What taskret's BM25 ranks with (:class:`taskret.retrieval.bm25.BM25Retriever`'s defaults).
K1, B = 1.5, 0.75
#: tantivy's BM25 constants: its Python binding (and the engine's default scorer) takes no other.
TANTIVY_K1_B = (1.2, 0.75)
#: The HNSW graph every dense library builds: taskret's (:mod:`taskret.retrieval.dense`).
HNSW_M, EF_CONSTRUCTION = 32, 200
EF_SEARCH = (16, 32, 64, 128, 256, 512)
#: The engines compared, each with the index it searches (bm25s's backends search one index, as do PISA's).
BM25_ENGINES = {"bm25s-numpy": "bm25s", "bm25s-numba": "bm25s", "pisa-bmw": "pisa", "pisa-maxscore": "pisa",
                "tantivy": "tantivy", "lucene": "lucene"}
DENSE_LIBS = ("faiss-hnsw", "usearch", "hnswlib")
#: What taskret uses today (the full run's numbers say whether that should change).
DEFAULT = {"bm25": "bm25s-numba", "dense": "faiss-hnsw"}
#: Python distributions whose versions the result records.
PACKAGES = ("bm25s", "numba", "faiss-cpu", "pyterrier-pisa", "tantivy", "pyserini", "pyjnius", "usearch", "hnswlib")
JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"  # Debian 12's only JDK; used when $JAVA_HOME is unset
K = 10
WARM_SINGLE = 50  # queries searched one at a time before the timed ones (and every query once batched)


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def corpus_texts(corpus: Path):
    """The text each engine indexes of each document, in corpus order (a document's number is its row): what
    taskret indexes (:func:`taskret.corpus.doc_text`, title and text)."""
    from taskret.corpus import doc_text, iter_corpus

    return (doc_text(doc) for doc in iter_corpus(corpus))


def stopwords() -> list[str]:
    """bm25s's English stop words (Lucene's 33, which PISA's ``lucene`` list and Anserini's default are too)."""
    from bm25s.stopwords import STOPWORDS_EN

    return sorted(STOPWORDS_EN)


# -- BM25 engines: each an indexer (corpus -> folder) and a searcher (folder -> top-10 rows) -----------------------


def bm25s_analyser() -> dict:
    return {"tokenizer": r"regex (?u)\b\w\w+\b on lower-cased text (bm25s.tokenize)",
            "stopwords": "bm25s 'en' (Lucene's 33 English stop words)", "stemmer": "Snowball English (PyStemmer)"}


def index_bm25s(corpus: Path, folder: Path, k1: float, b: float, threads: int) -> dict:
    """taskret's BM25 index, built as `tart index` builds it (one pass, the texts tokenized as they are read)."""
    from taskret.retrieval import BM25Retriever

    start = time.perf_counter()
    n = sum(1 for _ in corpus_texts(corpus))  # the ids first, as `tart index` scans the corpus
    retriever = BM25Retriever(k1=k1, b=b)
    retriever.index_stream([str(i) for i in range(n)], lambda: corpus_texts(corpus))
    retriever.save(folder)
    return {"index_s": time.perf_counter() - start, "analyser": bm25s_analyser(),
            "scoring": "Lucene's BM25 (idf log(1 + (N - df + 0.5) / (df + 0.5))), exact document lengths"}


class Bm25sSearch:
    """The saved index memory-mapped, as `taskret serve` loads it; one backend, chosen here, not by size."""

    def __init__(self, folder: Path, backend: str, threads: int):
        from taskret.retrieval import Retriever

        self.retriever = Retriever.load(folder, mmap=True)
        self.retriever.backend = backend
        self.threads = threads
        self.retriever.warm_up()  # numba compiles before the first query, as a service does

    def search(self, query: str) -> list[int]:
        found = self.retriever.retrieve([query], k=K)
        return matched(found.ids[0], found.scores[0])

    def search_batch(self, queries: list[str]) -> list[list[int]]:
        from taskret.retrieval.bm25 import _tokenize

        bm25 = self.retriever._bm25
        bm25.backend = "numba" if self.retriever.uses_numba() else "numpy"
        rows, scores = bm25.retrieve(_tokenize(queries, return_ids=False), k=K, show_progress=False,
                                     n_threads=self.threads)
        return [matched([self.retriever.ids[row] for row in top], top_scores)
                for top, top_scores in zip(rows.tolist(), scores)]


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


def timed_results(call: Callable, items: Sequence) -> tuple[list[float], list]:
    """:func:`scale.timed` that keeps what each call returned."""
    results: list = []
    return timed(lambda item: results.append(call(item)), items), results


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


# -- dense libraries --------------------------------------------------------------------------------------------------


def prepare_vectors(size_folder: Path, corpus: Path, queries: list[str], folder: Path) -> dict:
    """The document vectors (docs-fast's, read back from scale.py's index, else encoded here), the queries' (MiniLM's
    query side, float32) and their exact top 10 (faiss flat), under ``folder``."""
    import faiss

    from taskret.progress import reporting
    from taskret.retrieval import DenseRetriever

    folder.mkdir(parents=True, exist_ok=True)
    built = size_folder / "docs-fast" / "component_1"
    if (built / "index.faiss").is_file():
        dense = docs_fast_dense(size_folder / "docs-fast")
        index = faiss.downcast_index(dense._index)
        storage = faiss.downcast_index(index.storage) if hasattr(index, "storage") else index
        vectors = storage.reconstruct_n(0, storage.ntotal)
        source = f"{built} (scale.py's docs-fast index, {dense.encoder_name}, {dense.dtype})"
    else:
        dense = DenseRetriever(encoder="minilm-l6", index_type="flat")  # docs-fast's encoder
        with reporting():  # an hour or more at 1M: its progress on stderr, which the parent passes on
            vectors = dense.encode(list(corpus_texts(corpus)), report=True)
        source = f"encoded here with {dense.encoder_name} ({dense.dtype}): no docs-fast index under {size_folder}"
    np.save(folder / "doc_vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    query_vectors = dense.encode(queries, queries=True)
    np.save(folder / "query_vectors.npy", query_vectors)
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(np.ascontiguousarray(vectors, dtype=np.float32))
    scores, ids = exact.search(query_vectors, K)
    np.save(folder / "exact_top10.npy", ids)
    np.save(folder / "exact_scores10.npy", scores)
    return {"source": source, "n": int(vectors.shape[0]), "dim": int(vectors.shape[1]),
            "vectors_gib": round(vectors.nbytes / 2**30, 4)}


class FaissHnsw:
    def __init__(self, dim: int, threads: int):
        import faiss

        self.faiss, self.threads = faiss, threads
        self.index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = EF_CONSTRUCTION

    def build(self, vectors: np.ndarray) -> None:
        self.faiss.omp_set_num_threads(self.threads)
        self.index.add(vectors)

    def save(self, path: Path) -> None:
        self.faiss.write_index(self.index, str(path))

    def set_ef(self, ef: int) -> None:
        self.index.hnsw.efSearch = ef

    def search(self, vectors: np.ndarray, threads: int) -> np.ndarray:
        self.faiss.omp_set_num_threads(threads)
        return self.index.search(vectors, K)[1]


class Usearch:
    def __init__(self, dim: int, threads: int):
        from usearch.index import Index

        # f32: the vectors as the others hold them (usearch would pick f16 or bf16 where the CPU has it)
        self.index = Index(ndim=dim, metric="ip", dtype="f32", connectivity=HNSW_M, expansion_add=EF_CONSTRUCTION)
        self.threads = threads

    def build(self, vectors: np.ndarray) -> None:
        self.index.add(np.arange(len(vectors)), vectors, threads=self.threads)

    def save(self, path: Path) -> None:
        self.index.save(str(path))

    def set_ef(self, ef: int) -> None:
        self.index.expansion_search = ef

    def search(self, vectors: np.ndarray, threads: int) -> np.ndarray:
        found = self.index.search(vectors, K, threads=threads)
        return np.asarray(found.keys).reshape(len(vectors), K)


class Hnswlib:
    def __init__(self, dim: int, threads: int):
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=dim)
        self.threads = threads

    def build(self, vectors: np.ndarray) -> None:
        self.index.init_index(max_elements=len(vectors), ef_construction=EF_CONSTRUCTION, M=HNSW_M)
        self.index.add_items(vectors, np.arange(len(vectors)), num_threads=self.threads)

    def save(self, path: Path) -> None:
        self.index.save_index(str(path))

    def set_ef(self, ef: int) -> None:
        self.index.set_ef(ef)

    def search(self, vectors: np.ndarray, threads: int) -> np.ndarray:
        return self.index.knn_query(vectors, k=K, num_threads=threads)[0]


DENSE = {"faiss-hnsw": FaissHnsw, "usearch": Usearch, "hnswlib": Hnswlib}


def recall_at_10(exact: np.ndarray, approx: np.ndarray) -> float:
    """The share of the exact top 10's ids an index returned (by id: a tie at rank 10 can count as a miss)."""
    return round(float(np.mean([len(set(e) & set(a)) / K for e, a in zip(exact, approx)])), 4)


#: How far below the exact 10th score an approximate result may score and still count (float32 rounding differs
#: between a flat index's matrix product and one dot product).
TIE_EPSILON = 1e-5


def recall_at_10_by_score(tenth_scores: np.ndarray, vectors: np.ndarray, queries: np.ndarray,
                          approx: np.ndarray) -> float:
    """ann-benchmarks' recall: the share of an index's 10 results that score at least the exact 10th score. The 1M
    corpus holds identical documents (resampled sentences), so an index that returns another copy of a top document
    found it; by id it would count as a miss. Ids below 0 (fewer than 10 found) are misses."""
    hits = []
    for tenth, query, row in zip(tenth_scores, queries, approx):
        found = row[row >= 0]
        scores = vectors[found] @ query if len(found) else np.zeros(0)
        hits.append(int((scores >= tenth - TIE_EPSILON).sum()) / K)
    return round(float(np.mean(hits)), 4)


def measure_dense(lib: str, vectors_folder: Path, index_path: Path, threads: int, efs: Sequence[int]) -> dict:
    vectors = np.load(vectors_folder / "doc_vectors.npy")
    queries = np.load(vectors_folder / "query_vectors.npy")
    exact = np.load(vectors_folder / "exact_top10.npy")
    if (vectors_folder / "exact_scores10.npy").is_file():
        tenth = np.load(vectors_folder / "exact_scores10.npy")[:, K - 1]
    else:  # vectors prepared before the scores were kept
        tenth = np.einsum("qd,qd->q", vectors[exact[:, K - 1]], queries)
    index = DENSE[lib](vectors.shape[1], threads)
    start = time.perf_counter()
    index.build(vectors)
    build_s = time.perf_counter() - start
    index.save(index_path)
    curve = []
    for ef in efs:
        index.set_ef(ef)
        index.search(queries[:2], 1)  # warm
        single, tops = timed_results(lambda v: index.search(v[None], 1)[0], queries)
        start = time.perf_counter()
        index.search(queries, threads)
        batched_s = time.perf_counter() - start
        tops = np.array(tops)
        curve.append({"ef": ef, "recall_at_10": recall_at_10_by_score(tenth, vectors, queries, tops),
                      "recall_at_10_by_id": recall_at_10(exact, tops), **percentiles(single),
                      "batched_qps": round(len(queries) / batched_s, 1)})
    return {"curve": curve, "build_s": round(build_s, 2), "disk_gib": round(index_path.stat().st_size / 2**30, 4)}


# -- the comparison -------------------------------------------------------------------------------------------------


def real_qrels(folders: list[Path], query_ids: set[str]) -> dict[str, dict[str, int]]:
    """Every split's qrels of ``query_ids``, ids as :func:`scale.real_documents` and :func:`real_query_items` name
    them (``task/id``)."""
    from taskret.corpus import read_qrels

    qrels: dict[str, dict[str, int]] = {}
    for folder in folders:
        for path in sorted((folder / "qrels").glob("*.tsv")):
            for qid, docs in read_qrels(path).items():
                key = f"{folder.name}/{qid}"
                if key in query_ids:
                    qrels.setdefault(key, {}).update({f"{folder.name}/{d}": r for d, r in docs.items()})
    return qrels


def row_ids(corpus: Path, rows: set[int]) -> dict[int, str]:
    """The ids of the documents at ``rows`` (a pass over the corpus, holding only those)."""
    out = {}
    with open(corpus, encoding="utf-8") as lines:
        for row, line in enumerate(lines):
            if row in rows:
                out[row] = json.loads(line)["_id"]
    return out


def overlap_at_10(tops: list[list[int]], reference: list[list[int]]) -> float:
    """The mean share of the reference's top 10 that an engine's top 10 holds (a query with fewer than 10 hits in
    both: of the larger)."""
    shares = [len(set(a) & set(r)) / max(len(a), len(r)) if a or r else 1.0 for a, r in zip(tops, reference)]
    return round(float(np.mean(shares)), 4)


def ndcg_at_10(tops: list[list[int]], qids: list[str], ids: dict[int, str], qrels: dict) -> float:
    """NDCG@10 (percent, trec_eval through taskret's :func:`~taskret.tart.evaluation.compute_metrics`) of the
    rankings as the engine ordered them (scores by rank: trec_eval's tie order is not the engine's)."""
    from taskret.tart.evaluation import compute_metrics

    run = {qid: {ids[row]: float(K - rank) for rank, row in enumerate(top)} for qid, top in zip(qids, tops)}
    return round(compute_metrics({q: qrels[q] for q in qids if q in qrels}, run)["ndcg@10"], 2)


def child(args: list[str]) -> tuple[dict | None, float, str | None]:
    """:func:`scale.in_child` on this script, a failure (an engine not installed, a JVM missing) returned, not
    raised."""
    try:
        answer, rss = in_child(args, script=__file__)
    except SystemExit as failure:
        return None, 0.0, str(failure)
    return answer, rss, answer.get("error") if isinstance(answer, dict) else None


def compare_bm25(folder: Path, corpus: Path, queries: list[tuple[str, str]], qrels: dict, engines: list[str],
                 threads: int) -> dict:
    work, out, built = folder / "engines", {}, {}
    queries_path = work / "queries.json"
    queries_path.write_text(json.dumps([text for _, text in queries]))
    reference_path = {}
    for engine in engines:
        kind = BM25_ENGINES[engine]
        k1, b = engine_k1_b(engine)
        if kind not in built:
            index = work / kind
            shutil.rmtree(index, ignore_errors=True)
            answer, rss, error = child(["--child-index", kind, str(corpus), str(index), str(K1), str(B), str(threads)])
            built[kind] = {"error": error} if error else {**answer, "peak_rss_gib": round(rss, 3),
                                                          "disk_gib": round(disk_gib(index), 4)}
        if "error" in built[kind]:
            out[engine] = {"error": built[kind]["error"]}
            continue
        tops_path = work / f"tops_{engine}.json"
        answer, rss, error = child(["--child-search", engine, str(work / kind), str(queries_path), str(threads),
                                    str(tops_path)])
        if error:
            out[engine] = {"error": error}
            continue
        out[engine] = {"index_s": round(built[kind]["index_s"], 2), "disk_gib": built[kind]["disk_gib"],
                       "peak_rss_gib": built[kind]["peak_rss_gib"], "search_rss_gib": round(rss, 3),
                       **answer, "k1": k1, "b": b, "analyser": built[kind]["analyser"],
                       "scoring": built[kind]["scoring"], "index": kind}
        if (k1, b) not in reference_path:
            path = work / f"tops_reference_{k1}_{b}.json"
            if (k1, b) == (K1, B) and engine == "bm25s-numpy":
                path = tops_path
            else:
                child(["--child-reference", str(corpus), str(queries_path), str(k1), str(b), str(path)])
            reference_path[(k1, b)] = path
    tops = {e: json.loads((work / f"tops_{e}.json").read_text()) for e in out if "error" not in out[e]}
    references = {key: json.loads(path.read_text()) for key, path in reference_path.items()}
    ids = row_ids(corpus, {row for top in tops.values() for rows in top for row in rows})
    qids = [qid for qid, _ in queries]
    for engine, engine_tops in tops.items():
        k1, b = engine_k1_b(engine)
        entry = out[engine]
        entry["ndcg10"] = ndcg_at_10(engine_tops, qids, ids, qrels)
        entry["overlap10_vs_bm25s"] = overlap_at_10(engine_tops, references[(K1, B)]) if (K1, B) in references \
            else None
        if (k1, b) != (K1, B):  # its own pair: the overlap that says whether the engine, not k1, differs
            entry["overlap10_vs_bm25s_same_k1_b"] = overlap_at_10(engine_tops, references[(k1, b)])
        entry["full_top10_share"] = round(float(np.mean([len(t) == K for t in engine_tops])), 4)
    return out


def compare_dense(folder: Path, corpus: Path, queries: list[str], libs: list[str], threads: int,
                  efs: Sequence[int], measured: Callable[[dict], None] = lambda out: None) -> dict:
    """Each library's curve on the same vectors, ``measured(out so far)`` after each. A library is built and
    searched once: its answer is kept as ``LIB.json`` beside the vectors, and a run started again (an hour or more
    of builds at 1M) reuses it."""
    work = folder / "engines" / "dense"
    if not (work / "exact_top10.npy").is_file():
        (work.parent / "query_texts.json").write_text(json.dumps(queries))
        answer, rss, error = child(["--child-vectors", str(folder), str(corpus),
                                    str(work.parent / "query_texts.json"), str(work)])
        if error:
            return {"error": error}
        (work / "vectors.json").write_text(json.dumps(answer))
    out: dict = {"vectors": json.loads((work / "vectors.json").read_text())}
    for lib in libs:
        kept = work / f"{lib}.json"
        before = json.loads(kept.read_text()) if kept.is_file() else None
        if before and [point["ef"] for point in before["curve"]] == list(efs):
            out[lib] = before
            print(f"{lib}: measured before, kept ({kept})", file=sys.stderr, flush=True)
            continue
        index_path = work / f"{lib}.index"
        answer, rss, error = child(["--child-dense", lib, str(work), str(index_path), str(threads),
                                    ",".join(map(str, efs))])
        out[lib] = {"error": error} if error else {**answer, "rss_gib": round(rss, 3), "m": HNSW_M,
                                                   "ef_construction": EF_CONSTRUCTION}
        index_path.unlink(missing_ok=True)
        if not error:
            write_result(kept, out[lib], quiet=True)
        measured(out)
    return out


def encoder_rate(size_folder: Path, queries: list[str]) -> dict:
    """The docs-fast index's query encoder alone, batched (scale.py's measure): what its served rate is set against."""
    from scale import encoder_throughput

    return encoder_throughput(docs_fast_dense(size_folder / "docs-fast", mmap=True), queries, 64)


def serve_part(work: Path, size: int, queries: list[str], data_dir: str, duration: float) -> dict:
    """`taskret serve --workers 2` under wrk at ``size`` (scale.py's serve: the /health floor, BM25 and docs-fast
    /retrieve, in one run) and over Break's 6,208 examples (request_path.py's index: floor_6k, bm25_6k)."""
    import request_path
    import serve_load
    from scale import serve

    from taskret.data import load_task

    folder = work / str(size)
    encoder, _ = in_child(["--child-encoder", str(folder), str(work / "queries.json")], script=__file__)
    out = {"size": size, **serve(folder, queries, 2, 32, duration, encoder["batched_queries_per_s"])}
    index = request_path.build_break_index(data_dir, Path("runs/serve_load"))
    bodies = serve_load.retrieve_bodies([e.input for e in load_task("break", data_dir=data_dir).test],
                                        Path("runs/serve_load") / "engines_serve_6k.jsonl")
    server = serve_load.Server(index, 2)
    try:
        out["floor_6k"] = serve_load.wrk_summary(serve_load.warmed_wrk(server.url + "/health", None, 32, duration))
        out["bm25_6k"] = serve_load.wrk_summary(serve_load.warmed_wrk(server.url + "/retrieve", bodies, 32, duration))
    finally:
        server.close()
    out["targets"]["bm25_6k_share_of_floor"] = round(out["bm25_6k"]["req_per_s"] / out["floor_6k"]["req_per_s"], 3)
    return out


def main() -> None:
    args_parser = parser(__doc__, out="benchmarks/results/engines.json", seed=0)
    args_parser.add_argument("--sizes", default="100000,1000000")
    args_parser.add_argument("--work", default="runs/scale",
                             help="scale.py's work folder: its corpora and docs-fast indexes are used as they are")
    args_parser.add_argument("--queries", type=int, default=1000, help="real queries timed per engine")
    args_parser.add_argument("--threads", type=int, default=2, help="threads of a build and of a batched search")
    args_parser.add_argument("--bm25", default=",".join(BM25_ENGINES),
                             help="BM25 engines compared ('': none, the BM25 numbers in --out kept)")
    args_parser.add_argument("--dense", default=",".join(DENSE_LIBS),
                             help="HNSW libraries compared ('': none, the dense numbers in --out kept)")
    args_parser.add_argument("--ef", default=",".join(map(str, EF_SEARCH)), help="ef_search values of the curve")
    args_parser.add_argument("--serve", type=int, default=None,
                             help="serve this size's bm25 and docs-fast indexes (scale.py's) and Break's under wrk, "
                                  "the other parts' numbers in --out kept (needs wrk)")
    args_parser.add_argument("--serve-duration", type=float, default=30.0, help="seconds of each wrk run")
    args = args_parser.parse_args()
    engines, libs = args.bm25.split(",") if args.bm25 else [], args.dense.split(",") if args.dense else []
    unknown = [e for e in engines if e not in BM25_ENGINES] + [lib for lib in libs if lib not in DENSE]
    if unknown:
        raise SystemExit(f"unknown engines {unknown}: BM25 {list(BM25_ENGINES)}, dense {list(DENSE)}")
    data_dir, work = Path(args.data_dir), Path(args.work)
    folders = real_sources(data_dir)
    queries = real_query_items(folders, args.queries, args.seed)
    qrels = real_qrels(folders, {qid for qid, _ in queries})
    result = {"machine": machine(threads=args.threads), "versions": versions(), "sizes": {}, "default": DEFAULT,
              "queries": len(queries), "queries_with_qrels": sum(qid in qrels for qid, _ in queries),
              "settings": {"k1": K1, "b": B, "k": K, "hnsw_m": HNSW_M, "ef_construction": EF_CONSTRUCTION,
                           "threads": args.threads},
              "notes": "ndcg10: NDCG@10 in percent on the sampled real queries with qrels (every split's); "
                       "overlap10_vs_bm25s: mean share of bm25s-numpy's top 10 (k1 1.5, b 0.75) an engine's top 10 "
                       "holds; p50/p99: one query at a time on one thread; batched_qps: every query at once on "
                       "`threads` threads; peak_rss_gib: the build's child, search_rss_gib: the search's; dense "
                       "p50/p99: the index alone, queries encoded beforehand; rss_gib: build and search, the float32 "
                       "vectors the child reads included"}
    # A run of one part (--bm25 '' or --dense '') keeps the other part's numbers from --out, each part with the
    # machine and the command it was measured with.
    out = Path(args.out)
    keeps_parts = args.serve or not (engines and libs)
    on_file = json.loads(out.read_text()) if out.is_file() else {}
    earlier = on_file if keeps_parts else {}
    if args.serve:  # served alone: the engines' numbers kept; the machine (and its load) read before the run
        serve_run = {"machine": machine(threads=args.threads, http_stack=http_stack()),
                     "command": command_line(args, args_parser)}
        result = {**earlier, "serve": serve_part(work, args.serve, json.loads((work / "queries.json").read_text()),
                                                 args.data_dir, args.serve_duration), "serve_run": serve_run}
        write_result(out, result)
        return
    run = {"machine": result["machine"], "command": command_line(args, args_parser)}
    for n in [int(s) for s in args.sizes.split(",")]:
        folder = work / str(n)
        folder.mkdir(parents=True, exist_ok=True)
        corpus = folder / "corpus.jsonl"
        if not corpus.is_file():
            (folder / "corpus.json").write_text(json.dumps(write_corpus(corpus, folders, n, args.seed)))
        (folder / "engines").mkdir(exist_ok=True)
        entry = dict(earlier.get("sizes", {}).get(str(n), {}))
        entry["corpus"] = json.loads((folder / "corpus.json").read_text())
        if engines:
            entry["bm25"] = compare_bm25(folder, corpus, queries, qrels, engines, args.threads)
            entry["bm25_run"] = run
            print(json.dumps({n: {"bm25": entry["bm25"]}}), flush=True)
        result["sizes"][str(n)] = entry
        if libs:
            def measured(dense: dict, entry: dict = entry) -> None:  # each library's curve on file as it comes
                entry["dense"], entry["dense_run"] = dense, run
                write_result(out, completed(result, earlier, on_file, run), quiet=True)

            measured(compare_dense(folder, corpus, [text for _, text in queries], libs, args.threads,
                                   [int(ef) for ef in args.ef.split(",")], measured))
            print(json.dumps({n: {"dense": entry["dense"]}}), flush=True)
    write_result(out, completed(result, earlier, on_file, run))


def completed(result: dict, earlier: dict, on_file: dict, run: dict) -> dict:
    """``result`` with what this run leaves as it was: the sizes it did not measure and the versions of packages it
    did not use (from ``earlier``), and the served numbers (from the file on disk: measured by a run of its own,
    --serve, which records its machine)."""
    done = {**result, "sizes": dict(result["sizes"]), "command": run["command"]}
    # A package this run did not install (Pyserini, for a dense-only run) keeps the version an earlier part ran with.
    done["versions"] = {name: found or earlier.get("versions", {}).get(name)
                        for name, found in result["versions"].items()}
    for key in set(earlier.get("sizes", {})) - set(result["sizes"]):
        done["sizes"][key] = earlier["sizes"][key]
    for key in ("serve", "serve_run"):
        if key in on_file:
            done[key] = on_file[key]
    return done


def run_child(argv: list[str]) -> dict:
    """What a child process (``--child-KIND ...``) answers. An engine's own output (PISA's and Anserini's logs)
    goes to stderr: stdout carries only the answer."""
    kind, rest = argv[0], argv[1:]
    if kind == "--child-index":
        index_kind, corpus, index, k1, b, threads = rest
        return INDEXERS[index_kind](Path(corpus), Path(index), float(k1), float(b), int(threads))
    if kind == "--child-search":
        engine, index, queries, threads, tops = rest
        return search_engine(engine, Path(index), json.loads(Path(queries).read_text()), int(threads), Path(tops))
    if kind == "--child-reference":
        corpus, queries, k1, b, tops = rest
        return reference_tops(Path(corpus), json.loads(Path(queries).read_text()), float(k1), float(b), Path(tops))
    if kind == "--child-vectors":
        size_folder, corpus, queries, out = rest
        return prepare_vectors(Path(size_folder), Path(corpus), json.loads(Path(queries).read_text()), Path(out))
    if kind == "--child-encoder":
        size_folder, queries = rest
        return encoder_rate(Path(size_folder), json.loads(Path(queries).read_text()))
    if kind == "--child-dense":
        lib, vectors, index, threads, efs = rest
        return measure_dense(lib, Path(vectors), Path(index), int(threads), [int(ef) for ef in efs.split(",")])
    raise SystemExit(f"unknown child {kind}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("--child-"):
        answer_out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)  # the engines' prints and the JVM's logs to stderr
        try:
            answer = run_child(sys.argv[1:])
        except ImportError as missing:  # an optional engine not installed: recorded, the comparison goes on
            answer = {"error": f"{type(missing).__name__}: {missing} (pip install -e '.[engines]')"}
        answer_out.write(json.dumps(answer) + "\n")
        answer_out.flush()
        os._exit(0)  # a JVM's threads would keep the process alive
    else:
        main()

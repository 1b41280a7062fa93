"""Why do the BM25 engines' NDCG@10 spread apart at 1M documents when they agree at 100K (issue 78)? The suspect:
documents with equal scores at rank 10, which each engine orders its own way.

scale.py's corpus puts the real documents first (rows 0 to ~96K) and fills the rest with documents made of resampled
real sentences, so a short real document can reappear word for word, and score exactly as the original. Every
qrels-judged document is a real one. An engine that breaks ties by ascending document number (as PISA and Lucene
walk their postings) keeps the original; one that does not (bm25s takes the top k by ``argpartition``) may keep a
copy instead, and the original falls out of the top 10.

Here the corpus is scored exactly (bm25s, taskret's k1 1.5 and b 0.75, every document's score for each query) and,
per query, the documents that tie with the 10th score are counted. NDCG@10 is then computed under four orders of the
tied documents, the documents above the tie being the same in all four:

    by_row_ascending    originals first (the corpus's order)
    by_row_descending   synthetic copies first
    relevant_first      the best any tie-breaking can do
    relevant_last       the worst

If the engines' spread (``benchmarks/results/engines.json``) lies inside ``[relevant_last, relevant_first]`` and
``by_row_ascending`` sits near the engines that walk postings in order, the ties explain it. Also counted: the
queries with a tie across rank 10, those where a judged document is among the tied, and the tied documents that are
word-for-word copies of a judged one.

    python benchmarks/scale/bm25_ties.py --data-dir ../shared/data --size 1000000 --work runs/scale
    python benchmarks/scale/bm25_ties.py --data-dir ../shared/data --size 5000 --queries 100 --work /tmp/ties --out /tmp/ties.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scale.py, engines.py
from _common import command_line, machine, parser, write_result  # noqa: E402
from bm25_engines import K1, B  # noqa: E402
from engines import ndcg_at_10, real_qrels  # noqa: E402
from scale import K, real_query_items, real_sources, write_corpus  # noqa: E402

from taskret.io import read_json  # noqa: E402

ORDERS = ("by_row_ascending", "by_row_descending", "relevant_first", "relevant_last")
#: Orders of every tie in the top 10, not only the one at rank 10 (ORDERS rank the ties above it by row, ascending):
#: bm25s's own retrieve (equal scores as its partial sort leaves them: taskret's BM25 before it ordered ties by
#: row), and every tie's copies first.
WHOLE_TOP_ORDERS = ("bm25s_retrieve", "every_tie_by_row_descending")


def top10_by_order(scores: np.ndarray, relevant_rows: set[int]) -> tuple[dict[str, list[int]], dict, list[int]]:
    """The top 10 of ``scores`` under each of :data:`ORDERS` for the documents tied with the 10th score, what the
    tie holds (``above``: documents scoring more than the 10th, ``tied``: scoring exactly the same, ``relevant_tied``:
    judged documents among the tied), and the tied documents' rows, ascending."""
    positive = np.flatnonzero(scores > 0)
    if len(positive) <= K:  # fewer than 10 hits: no tie is cut
        top = positive[np.argsort(-scores[positive], kind="stable")].tolist()
        return {order: top for order in ORDERS}, {"above": len(top), "tied": 0, "relevant_tied": 0}, []
    tenth = np.partition(scores[positive], len(positive) - K)[len(positive) - K]
    above = positive[scores[positive] > tenth]
    above = above[np.argsort(-scores[above], kind="stable")].tolist()
    tied = np.flatnonzero(scores == tenth).tolist()  # ascending rows
    room = K - len(above)
    relevant = [r for r in tied if r in relevant_rows]
    others = [r for r in tied if r not in relevant_rows]
    orders = {"by_row_ascending": tied, "by_row_descending": tied[::-1],
              "relevant_first": relevant + others, "relevant_last": others + relevant}
    return ({order: above + rows[:room] for order, rows in orders.items()},
            {"above": len(above), "tied": len(tied), "relevant_tied": len(relevant)}, tied)


def copies_of(texts: list[str], rows: set[int], candidates: set[int]) -> int:
    """How many of ``candidates`` (rows) have exactly the text of one of ``rows`` and are not themselves in it."""
    wanted = {texts[r] for r in rows}
    return sum(1 for r in candidates if r not in rows and texts[r] in wanted)


def analyse(corpus: Path, folders: list[Path], n_queries: int, seed: int) -> dict:
    import bm25s

    from taskret.corpus import doc_text, iter_corpus
    from taskret.retrieval.bm25 import _quiet_bm25s, _tokenize

    _quiet_bm25s()
    docs = [(doc.id, doc_text(doc)) for doc in iter_corpus(corpus)]  # one pass: the text each engine indexes, the id
    ids, texts = [doc_id for doc_id, _ in docs], [text for _, text in docs]
    del docs
    row_of = {doc_id: row for row, doc_id in enumerate(ids)}
    start = time.perf_counter()
    index = bm25s.BM25(k1=K1, b=B)
    index.index(_tokenize(texts), show_progress=False)
    index_s = time.perf_counter() - start
    items = real_query_items(folders, n_queries, seed)
    qrels = real_qrels(folders, {qid for qid, _ in items})
    items = [(qid, text) for qid, text in items if qid in qrels]
    tokens = _tokenize([text for _, text in items], return_ids=False)
    tops: dict[str, list[list[int]]] = {order: [] for order in ORDERS + WHOLE_TOP_ORDERS}
    crossing = relevant_in_tie = tied_total = copies = 0
    for (qid, _), query in zip(items, tokens):
        known = [t for t in query if t in index.vocab_dict]
        scores = index.get_scores(known) if known else np.zeros(len(texts), dtype=np.float32)
        relevant_rows = {row_of[d] for d, grade in qrels[qid].items() if grade > 0 and d in row_of}
        by_order, tie, tied_rows = top10_by_order(scores, relevant_rows)
        for order in ORDERS:
            tops[order].append(by_order[order])
        tops["bm25s_retrieve"].append(index.retrieve([known], k=K, show_progress=False, n_threads=0)[0][0].tolist()
                                      if known else [])
        top = by_order["by_row_ascending"]  # empty where no document matches
        cut = np.flatnonzero((scores > 0) & (scores >= scores[top[-1]])) if top else np.array([], dtype=int)
        tops["every_tie_by_row_descending"].append(cut[np.lexsort((-cut, -scores[cut]))][:K].tolist())
        if tie["above"] < K < tie["above"] + tie["tied"]:
            crossing += 1
            tied_total += tie["tied"]
            relevant_in_tie += tie["relevant_tied"] > 0
            copies += copies_of(texts, relevant_rows, set(tied_rows))
    qids = [qid for qid, _ in items]
    rows = {row for order in ORDERS + WHOLE_TOP_ORDERS for top in tops[order] for row in top}
    names = {row: ids[row] for row in rows}
    return {"documents": len(texts), "queries": len(items), "index_s": round(index_s, 1),
            "ndcg10": {order: ndcg_at_10(tops[order], qids, names, qrels) for order in ORDERS},
            "ndcg10_whole_top": {order: ndcg_at_10(tops[order], qids, names, qrels) for order in WHOLE_TOP_ORDERS},
            "queries_with_a_tie_across_rank_10": crossing,
            "queries_with_a_judged_document_in_that_tie": relevant_in_tie,
            "mean_documents_in_that_tie": round(tied_total / crossing, 1) if crossing else 0.0,
            "copies_of_judged_documents_in_those_ties": copies}


def engines_at(size: int, path: Path = Path("benchmarks/results/engines.json")) -> dict[str, float]:
    """Each BM25 engine's NDCG@10 at ``size`` in the engines comparison, where it was measured."""
    if not path.is_file():
        return {}
    engines = read_json(path).get("sizes", {}).get(str(size), {}).get("bm25", {})
    return {name: row["ndcg10"] for name, row in engines.items() if isinstance(row, dict) and "ndcg10" in row}


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/bm25_ties.json", seed=0)
    options.add_argument("--size", type=int, default=1_000_000, help="documents (default: %(default)s)")
    options.add_argument("--queries", type=int, default=1000, help="real queries sampled, as engines.py (default: %(default)s)")
    options.add_argument("--work", default="runs/scale", help="scale.py's work folder: SIZE/corpus.jsonl is used if there")
    args = options.parse_args()
    where = machine()  # before the work: its load average says whether the index time is a quiet machine's
    folders = real_sources(Path(args.data_dir))
    corpus = Path(args.work) / str(args.size) / "corpus.jsonl"
    if not corpus.is_file():
        corpus.parent.mkdir(parents=True, exist_ok=True)
        write_corpus(corpus, folders, args.size, args.seed)
    result = {"size": args.size, **analyse(corpus, folders, args.queries, args.seed),
              "engines_ndcg10": engines_at(args.size), "machine": where, "command": command_line(args, options)}
    write_result(Path(args.out), result)
    print(result["ndcg10"], result["engines_ndcg10"], flush=True)


if __name__ == "__main__":
    main()

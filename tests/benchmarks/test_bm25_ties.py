"""benchmarks/scale/bm25_ties.py: the documents tied at rank 10 counted, and NDCG@10 under each order of the tie, on
a corpus of our own making where a judged document has word-for-word copies after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from . import import_script

ROOT = Path(__file__).resolve().parents[2]


def test_each_order_of_a_tie_keeps_the_documents_above_it_and_fills_the_rest_its_way():
    ties = import_script("benchmarks/scale", "bm25_ties")
    scores = np.array([0.0, 2.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], dtype=np.float32)
    tops, tie, tied_rows = ties.top10_by_order(scores, relevant_rows={2, 13})
    assert tie == {"above": 2, "tied": 11, "relevant_tied": 2}
    assert tied_rows == [2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    assert tops["by_row_ascending"] == [4, 1, 2, 3, 5, 6, 7, 8, 9, 10]
    assert tops["by_row_descending"] == [4, 1, 13, 12, 11, 10, 9, 8, 7, 6]
    assert tops["relevant_first"][:4] == [4, 1, 2, 13] and len(tops["relevant_first"]) == 10
    assert 2 not in tops["relevant_last"] and 13 not in tops["relevant_last"]
    few, none_cut, _ = ties.top10_by_order(np.array([0.0, 1.0, 2.0]), relevant_rows={1})
    assert few["by_row_ascending"] == [2, 1] and none_cut["tied"] == 0  # under 10 hits: nothing is cut


def test_a_judged_document_with_copies_after_it_is_kept_only_by_the_orders_that_put_it_first(tmp_path):
    task = tmp_path / "data" / "berri-lite" / "toy"
    (task / "qrels").mkdir(parents=True)
    real = [{"_id": "gold", "title": "", "text": "alpha beta gamma."},
            *({"_id": f"d{i}", "title": "", "text": f"filler{i} words here{i}."} for i in range(20)),
            {"_id": "lone", "title": "", "text": "delta epsilon."}]
    (task / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in real))
    (task / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "alpha beta"}) + "\n"
                                        + json.dumps({"_id": "q2", "text": "delta"}) + "\n")
    (task / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tgold\t1\nq2\tlone\t1\n")
    work = tmp_path / "work"
    copies = [{"_id": f"synthetic/{i}", "title": "", "text": "alpha beta gamma."} for i in range(12)]
    (work / "34").mkdir(parents=True)  # scale.py's layout: the originals first, the synthetic documents after
    (work / "34" / "corpus.jsonl").write_text("".join(json.dumps({**d, "_id": f"toy/{d['_id']}"}) + "\n"
                                                      for d in real) + "".join(json.dumps(d) + "\n" for d in copies))
    out = tmp_path / "ties.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/bm25_ties.py"), "--data-dir", str(tmp_path / "data"),
                    "--size", "34", "--queries", "10", "--work", str(work), "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True, timeout=300)
    result = json.loads(out.read_text())
    assert result["documents"] == 34 and result["queries"] == 2
    assert result["queries_with_a_tie_across_rank_10"] == 1  # q1's 13 equal documents; q2 has one hit
    assert result["queries_with_a_judged_document_in_that_tie"] == 1
    assert result["mean_documents_in_that_tie"] == 13.0 and result["copies_of_judged_documents_in_those_ties"] == 12
    ndcg = result["ndcg10"]
    assert ndcg["by_row_ascending"] == ndcg["relevant_first"] == 100.0  # both queries' judged document first
    assert ndcg["by_row_descending"] == ndcg["relevant_last"] == 50.0  # q1's original pushed out by its copies
    assert "python benchmarks/scale/bm25_ties.py" in result["command"] and result["machine"]["cores"] >= 1

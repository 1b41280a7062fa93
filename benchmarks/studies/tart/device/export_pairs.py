"""Here, before a device run: the (query, document) pairs a reranker scored elsewhere must cover.

For SciFact and the dev tasks of ``benchmarks/tart_berri.py``, in each of ``--columns``, each query is paired with
the union of the top ``--top`` documents of each cached component ranking (BM25, and the dense ones named), which
holds the top 20 of any convex fusion of them in practice (the script reports the coverage of the cached
fused rankings it finds). Writes one ``pairs.json.xz``: ``{task folder: {"queries": [...], "docs": [...],
"pairs": [[query index, doc index], ...]}}``, read on the device by ``score_pairs.py``::

    python benchmarks/studies/tart/device/export_pairs.py --work runs/bench/tart_berri --components minilm,e5,tart_distil_ict \
        --out .gpu/b/pairs.json.xz
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/: tart_berri
from tart_berri import COLUMNS, DEV_TASKS, Rankings  # noqa: E402

from taskret.io import read_jsonl  # noqa: E402
from taskret.tart.tasks import load_retrieval_task  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=os.environ.get("TASKRET_DATA_DIR"))
    p.add_argument("--work", default="runs/bench/tart_berri")
    p.add_argument("--components", default="minilm,e5,tart_distil_ict")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--dev-limit", type=int, default=25)
    p.add_argument("--columns", default="no_instruction,instruction",
                   help="settings of tart_berri.py to cover; rerank_instruction pairs the instructed queries with the "
                        "documents the claim alone retrieves, tart_instruction with those the --trained components "
                        "retrieve for the instructed claim and the others for the claim alone")
    p.add_argument("--trained", default="",
                   help="the --components trained with instructions (TART-duals, comma-separated): in the "
                        "tart_instruction column their instructed rankings are read")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    if not columns or any(c not in COLUMNS for c in columns):
        raise SystemExit(f"--columns: expected some of {', '.join(COLUMNS)}, got {args.columns!r}")
    components = [c.strip() for c in args.components.split(",") if c.strip()]
    trained = {c.strip() for c in args.trained.split(",") if c.strip()}
    if not trained <= set(components):
        raise SystemExit(f"--trained: {', '.join(sorted(trained - set(components)))} not among --components")
    work = Path(args.work)
    tasks = [(work, load_retrieval_task("scifact", args.data_dir, "test"))]
    tasks += [(work / "dev", load_retrieval_task(n, args.data_dir, "test").sample(args.dev_limit, seed=0))
              for n in DEV_TASKS]
    out: dict = {}
    for folder, task in tasks:
        r = Rankings(task, folder, 100)
        queries, docs, pairs, doc_index = [], [], set(), {}
        for column in columns:
            instructed, first_instructed, trained_instructed = COLUMNS[column]
            texts = r.queries(instructed)
            rankings = [r._path("bm25", False)] + [r._path(c, trained_instructed if c in trained else first_instructed)
                                                   for c in components]
            tops: dict[str, set] = {q: set() for q in r.qids}
            for path in rankings:
                for row in read_jsonl(path):
                    tops[row["qid"]].update(row["ids"][: args.top])
            # coverage check against any cached reranked ranking of this column (its top 20 is its first stage's)
            for path in r.work.glob(f"hybrid+*_top20.{column}.jsonl"):
                rows = read_jsonl(path)
                missing = sum(d not in tops[row["qid"]] for row in rows for d in row["ids"][:20])
                print(f"{task.name} {path.name}: {missing} of {20 * len(rows)} top-20 documents not covered")
            base = len(queries)
            queries.extend(texts)
            for i, q in enumerate(r.qids):
                for d in sorted(tops[q]):
                    if d not in doc_index:
                        doc_index[d] = len(docs)
                        docs.append(r._doc_texts[d])
                    pairs.add((base + i, doc_index[d]))
        out[str(r.work.relative_to(work))] = {"queries": queries, "docs": docs, "pairs": sorted(pairs)}
        print(f"{task.name}: {len(queries)} queries, {len(docs)} documents, {len(pairs)} pairs")
    tmp = Path(args.out + ".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(tmp, "wt", encoding="utf-8") as f:
        json.dump(out, f)
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()

"""Does the instruction cost a TART-dual less when it is left out of the average? (SciFact test, NDCG@10)

A sentence-transformers encoder mean-pools every token, so a 15-token instruction in front of a 15-token claim
makes half of the query vector. INSTRUCTOR (Su et al. 2022) excludes the instruction's tokens from the pooling:
they still condition the query's tokens through attention, but are not averaged in. sentence-transformers does
this with ``Pooling(include_prompt=False)`` and the instruction passed as the ``prompt``. For each model this
measures three query forms against the same corpus vectors:

* ``no_instruction``: the bare claim;
* ``instruction``: ``"{instruction} [SEP] {claim}"`` mean-pooled over all tokens (what taskret does today);
* ``instruction_excluded``: the same text, the instruction's tokens left out of the mean.

A model trained that way (``exclude_instruction_from_pooling``, saved with ``include_prompt: false``) is
measured the same three ways; ``trained_excluding_instruction`` says which models were.

    python benchmarks/studies/tart/instruction_pooling.py --data-dir ../shared/data \\
        --model tart_distil=runs/tart_distil_fusion/distil/model \\
        --model tart_distil2=runs/tart_distil_fusion_more/distil/model

Corpus vectors are cached under ``--cache`` (one ``.npy`` per model, written to a temporary name first).
Writes ``benchmarks/results/instruction_pooling.json``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: _common

from _common import command_line, machine, parser  # noqa: E402

from taskret.formats import format_query
from taskret.io import write_json
from taskret.tart.evaluation import compute_metrics
from taskret.tart.tasks import load_retrieval_task


def _ndcg(task, qids: list[str], doc_ids: list[str], docs: np.ndarray, queries: np.ndarray) -> float:
    scores = queries @ docs.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(qids)}
    return round(compute_metrics({q: task.qrels[q] for q in qids}, run)["ndcg@10"], 2)


def measure(name: str, folder: str, task, qids: list[str], cache: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    doc_ids, texts = task.doc_ids_and_texts()
    model = SentenceTransformer(folder, device="cpu")
    kwargs = dict(batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    path = cache / f"{name}.scifact_corpus.npy"
    started = time.perf_counter()
    if path.exists():
        docs = np.load(path)
    else:
        docs = model.encode(list(texts), **kwargs)
        tmp = path.with_name(path.name + ".tmp.npy")
        np.save(tmp, docs)
        tmp.rename(path)
    if docs.shape[0] != len(doc_ids):
        raise ValueError(f"{path}: {docs.shape[0]} vectors for {len(doc_ids)} documents; delete it and rerun")

    def ndcg(queries: np.ndarray) -> float:
        return _ndcg(task, qids, doc_ids, docs, queries)

    claims = [task.queries[q] for q in qids]
    prefix = format_query(task.instruction, "")  # "{instruction} [SEP] ": the prompt whose tokens are excluded
    # A model trained with the instruction excluded (exclude_instruction_from_pooling) is saved so; each form
    # below sets the Pooling module (model[1]) itself.
    trained_excluding = not model[1].include_prompt
    model[1].include_prompt = True
    result = {"trained_excluding_instruction": trained_excluding,
              "no_instruction": ndcg(model.encode(claims, **kwargs)),
              "instruction": ndcg(model.encode([prefix + c for c in claims], **kwargs))}
    model[1].include_prompt = False  # the Pooling module: prompt tokens are left out of the mean from now on
    result["instruction_excluded"] = ndcg(model.encode(claims, prompt=prefix, **kwargs))
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(name, result, flush=True)
    return result


def main() -> None:
    p = parser(__doc__, out="benchmarks/results/instruction_pooling.json")
    p.add_argument("--model", action="append", required=True, help="NAME=FOLDER of a sentence-transformers model")
    p.add_argument("--cache", default="runs/bench/instruction_pooling", help="corpus vectors, one .npy per model")
    args = p.parse_args()
    task = load_retrieval_task("scifact", args.data_dir, "test")
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    qids = [q for q in task.queries if q in task.qrels]
    models = dict(spec.split("=", 1) for spec in args.model)
    results = {name: measure(name, folder, task, qids, cache) for name, folder in models.items()}
    write_json(args.out, {"scifact": results, "instruction": task.instruction, "models": models,
                          "n_queries": len(qids), "machine": machine(),
                          "command": command_line(args, p)})


if __name__ == "__main__":
    main()

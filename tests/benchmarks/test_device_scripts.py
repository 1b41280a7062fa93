"""The scripts that carry work to a GPU machine and back (``benchmarks/studies/tart/device/``): they run only through the
device tool, so a break in them shows up only when a GPU is lent, minutes into a budget of fifteen. These tests
run what they can here, on tiny files: packing a run into parts and rebuilding it, merging a sweep's archives,
and turning pair scores into the benchmark's pair caches."""

from __future__ import annotations

import importlib
import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "benchmarks" / "studies" / "tart"
DEVICE = STUDY / "device"


def _module(folder: Path, name: str):
    """A script's module, imported from its folder (the benchmarks are not a package)."""
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))


def _run(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DEVICE / script), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_pack_then_unpack_rebuilds_the_run_in_small_parts(tmp_path):
    run = tmp_path / "runs" / "distil"
    (run / "model").mkdir(parents=True)
    generator = torch.Generator().manual_seed(0)
    weights = {"embeddings.weight": torch.randn(300, 16, generator=generator),  # 19 KB: cut by rows
               "layer.bias": torch.randn(16, generator=generator),
               "position_ids": torch.arange(300).unsqueeze(0),  # an integer tensor keeps its type
               "scale": torch.tensor(0.5)}  # a scalar is one piece
    save_file(weights, run / "model" / "model.safetensors")
    (run / "model" / "config.json").write_text('{"hidden_size": 16}')
    (run / "training_log.jsonl").write_text('{"step": 1}\n')
    (run / "train.jsonl").write_text('{"query": "never sent back"}\n')
    packed, rebuilt = tmp_path / "packed", tmp_path / "rebuilt"
    packed.mkdir()

    done = _run("pack.py", str(run), str(packed), env={"PACK_LIMIT_MIB": str(4096 / 2**20)})
    assert done.returncode == 0, done.stderr
    parts = sorted(packed.glob("w*.safetensors"))
    assert len(parts) > 2 and all(p.stat().st_size < 4096 + 2048 for p in parts)  # under the limit, plus a header
    done = _run("unpack.py", str(packed), str(rebuilt))
    assert done.returncode == 0, done.stderr

    state = load_file(rebuilt / "distil" / "model" / "model.safetensors")
    assert set(state) == set(weights)
    for key, tensor in weights.items():
        if tensor.is_floating_point():  # sent as fp16, rebuilt as fp32
            assert state[key].dtype == torch.float32 and state[key].shape == tensor.shape
            assert torch.equal(state[key], tensor.half().float())
        else:
            assert torch.equal(state[key], tensor)
    assert json.loads((rebuilt / "distil" / "model" / "config.json").read_text()) == {"hidden_size": 16}
    assert (rebuilt / "distil" / "training_log.jsonl").exists()
    assert not (rebuilt / "distil" / "train.jsonl").exists()


def _archive(path: Path, files: dict[str, object]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else json.dumps(content).encode()
            info = tarfile.TarInfo(f"logs/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _call(tmp_path: Path, name: str, variants: dict[str, float], held_out: dict | None,
          minilm: float = 64.5) -> Path:
    """One device call's logs.tar.gz: ``variants`` maps a student to its SciFact NDCG@10."""
    scifact = {"bm25": {"no_instruction": 68.6}, "minilm": {"no_instruction": minilm},
               "hybrid": {"no_instruction": 71.4}}
    files: dict[str, object] = {
        "gpu.txt": "name, memory.total\nNVIDIA H200, 143771 MiB\n",
        "sweep.json": {"base": "benchmarks/configs/base.json",
                       "variants": {v: {"overrides": {"seed": i}, "wall_s": 20.0 + i}
                                    for i, v in enumerate(variants)}}}
    for v, score in variants.items():
        scifact[v] = {"no_instruction": score, "instruction": score - 1}
        scifact[f"hybrid+{v}"] = {"no_instruction": score + 4}
        files[f"{v}.training_log.jsonl"] = '{"step": 1}\n'
        files[f"{v}.tart_distil_config.json"] = {"seed": 0}
    files["tart_berri_gpu.json"] = {"scifact": scifact, "weights": {f"hybrid+{v}": {"no_instruction": {"bm25": 0.4}}
                                                                     for v in variants},
                                    "commands": ["tart_berri.py"], "timings": {}, "machine": {"cores": 16}}
    if held_out is not None:
        files["held_out_gpu.json"] = {"held_out": {"argkp": held_out}, "held_out_setup": {"command": "held_out.py"},
                                      "held_out_mean": {**held_out, "minilm": {"no_instruction": 56.0}}}
    return _archive(tmp_path / f"{name}.tar.gz", files)


def test_collect_sweep_merges_calls_and_selects_on_the_dev_tasks(tmp_path):
    best_on_dev = _module(DEVICE, "collect_sweep").best_on_dev
    first = _call(tmp_path, "a", {"s0": 66.0, "s1": 67.0},
                  {"s0": {"no_instruction": 58.0, "instruction": 57.0},
                   "s1": {"no_instruction": 57.0, "instruction": 56.0}})
    second = _call(tmp_path, "b", {"s2": 66.5}, None)  # a short call: SciFact only
    out, logs = tmp_path / "sweep.json", tmp_path / "logs"

    done = _run("collect_sweep.py", str(first), str(second), "--out", str(out), "--logs", str(logs))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert list(result["variants"]) == ["s0", "s1", "s2"]
    assert result["variants"]["s1"]["scifact"] == {"no_instruction": 67.0, "instruction": 66.0}
    assert result["variants"]["s2"]["held_out"] is None
    # SciFact's best (s1) is not chosen: the dev tasks choose, and s0 leads them over both columns
    assert result["selected"] == "s0" == best_on_dev(
        {"s0": {"no_instruction": 58.0, "instruction": 57.0}, "s1": {"no_instruction": 57.0, "instruction": 56.0}},
        ["s0", "s1"])
    assert result["device"] == "NVIDIA H200, 143771 MiB"
    assert (logs / "s2.training_log.jsonl").exists()


def test_collect_sweep_refuses_calls_whose_baselines_differ(tmp_path):
    first = _call(tmp_path, "a", {"s0": 66.0}, {"s0": {"no_instruction": 58.0, "instruction": 57.0}})
    second = _call(tmp_path, "b", {"s1": 66.5}, None, minilm=60.0)
    done = _run("collect_sweep.py", str(first), str(second), "--out", str(tmp_path / "sweep.json"))
    assert done.returncode != 0
    assert "minilm differs" in done.stderr and "b.tar.gz" in done.stderr
    assert not (tmp_path / "sweep.json").exists()


@pytest.fixture
def exported_pairs(tmp_path) -> Path:
    tasks = {"scifact": {"queries": ["claim one", "claim two"], "docs": ["doc a", "doc b"],
                         "pairs": [[0, 0], [0, 1], [1, 1]]},
             "dev/argkp": {"queries": ["argument"], "docs": ["key point"], "pairs": [[0, 0]]}}
    path = tmp_path / "pairs.json.xz"
    with lzma.open(path, "wt", encoding="utf-8") as f:
        json.dump(tasks, f)
    return path


def test_unpack_scores_fills_the_pair_caches_tart_berri_reads(tmp_path, exported_pairs):
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"scores": {"scifact": [1.5, -0.25, 3.0], "dev/argkp": [0.75]}}))
    work = tmp_path / "work"
    done = _run("unpack_scores.py", str(exported_pairs), str(scores), "yesno_gpu", "--work", str(work))
    assert done.returncode == 0, done.stderr

    tart_berri = _module(ROOT / "benchmarks", "tart_berri")
    PairCache, ScoredElsewhere = tart_berri.PairCache, tart_berri.ScoredElsewhere
    cache = PairCache(ScoredElsewhere("yesno_gpu"), work / "scifact" / "yesno_gpu.pairs.jsonl")
    assert cache.score_pairs([("claim two", "doc b"), ("claim one", "doc a")]).tolist() == [3.0, 1.5]
    dev = PairCache(ScoredElsewhere("yesno_gpu"), work / "dev" / "argkp" / "yesno_gpu.pairs.jsonl")
    assert dev.score_pairs([("argument", "key point")]).tolist() == [0.75]
    with pytest.raises(SystemExit, match="no score"):  # a pair scored nowhere stops the run, never a silent 0
        cache.score_pairs([("claim two", "doc a")])


def test_unpack_scores_refuses_a_count_that_does_not_match_the_pairs(tmp_path, exported_pairs):
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"scores": {"scifact": [1.5, -0.25], "dev/argkp": [0.75]}}))
    done = _run("unpack_scores.py", str(exported_pairs), str(scores), "yesno_gpu", "--work", str(tmp_path / "w"))
    assert done.returncode != 0
    assert "scifact has 2 scores for 3 pairs" in done.stderr


def test_score_pairs_writes_each_pairs_score_in_the_files_order(tmp_path, exported_pairs, tiny_bert_dir):
    from sentence_transformers.cross_encoder import CrossEncoder

    from taskret.rerank import load_reranker

    torch.manual_seed(0)
    folder = tmp_path / "cross-encoder"
    CrossEncoder(str(tiny_bert_dir), num_labels=1, max_length=64, device="cpu").save(str(folder))
    _module(DEVICE, "score_pairs").main(str(folder), str(exported_pairs), str(tmp_path), chunk=2)  # chunks smaller than a task: order restored

    result = json.loads((tmp_path / "scores.json").read_text())
    reranker = load_reranker(str(folder))
    with lzma.open(exported_pairs, "rt", encoding="utf-8") as f:
        tasks = json.load(f)
    for task, d in tasks.items():
        expected = reranker.score_pairs([(d["queries"][q], d["docs"][i]) for q, i in d["pairs"]])
        assert result["scores"][task] == pytest.approx([round(float(s), 6) for s in expected], abs=1e-5)
        assert result["timings"][task]["pairs"] == len(d["pairs"])
    assert not list(tmp_path.glob("*.tmp"))


def test_export_pairs_reads_the_rankings_each_column_reranks(tmp_path, monkeypatch):
    from taskret.tart.tasks import load_retrieval_task

    from ..tart.builders import write_beir

    folder = write_beir(tmp_path / "facts")
    (folder / "instructions.json").write_text(json.dumps(["Find the abstract"]))
    task = load_retrieval_task(str(folder))  # claims q1, q2 judged on the test split
    export = _module(DEVICE, "export_pairs")
    monkeypatch.setattr(export, "load_retrieval_task", lambda name, data_dir, split: task)  # SciFact and the dev task
    monkeypatch.setattr(export, "DEV_TASKS", ("facts",))
    work = tmp_path / "work"
    for base in (work / "facts", work / "dev" / "facts"):  # the cached rankings tart_berri.py leaves
        for name, ids in [("bm25.no_instruction", ["d1", "d2"]), ("tart.no_instruction", ["d1", "d2"]),
                          ("tart.instruction", ["3", "3"])]:
            base.mkdir(parents=True, exist_ok=True)
            (base / f"{name}.jsonl").write_text("".join(json.dumps({"qid": q, "ids": [d], "scores": [1.0]}) + "\n"
                                                        for q, d in zip(["q1", "q2"], ids)))
    out = tmp_path / "pairs.json.xz"
    monkeypatch.setattr(sys, "argv", ["export_pairs.py", "--work", str(work), "--components", "tart", "--trained",
                                      "tart", "--columns", "rerank_instruction,tart_instruction", "--top", "1",
                                      "--out", str(out)])
    export.main()
    with lzma.open(out, "rt", encoding="utf-8") as f:
        exported = json.load(f)
    assert set(exported) == {"facts", "dev/facts"}
    entry, coffee = exported["facts"], dict(zip(*task.doc_ids_and_texts()))["3"]
    assert entry["queries"][0].startswith("Find the abstract [SEP] ") and len(entry["queries"]) == 4
    by_column = [{entry["docs"][d] for q, d in entry["pairs"] if q // 2 == column} for column in (0, 1)]
    # rerank_instruction: the documents the bare claims retrieve; tart_instruction: also the TART-dual's instructed ones
    assert coffee not in by_column[0] and coffee in by_column[1]
    monkeypatch.setattr(sys, "argv", ["export_pairs.py", "--work", str(work), "--components", "tart", "--trained",
                                      "other", "--out", str(out)])
    with pytest.raises(SystemExit, match="other not among --components"):
        export.main()


EPR_DEVICE = ROOT / "benchmarks" / "gpu"  # the EPR run's calls (UDR at full scale)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for folder in (DEVICE, EPR_DEVICE)
                                        for p in folder.glob("*.sh")))
def test_shell_scripts_parse_and_name_only_what_exists(path):
    """The device calls' shell scripts cannot run here (they need /tmp/site, the carried folders and a GPU), but a
    syntax error, a renamed script or config, or a moved taskret module breaks them as surely: check those."""
    import importlib.util
    import re

    script = Path(path).name
    text = (ROOT / path).read_text()
    parsed = subprocess.run(["bash", "-n", str(ROOT / path)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    # a device call stops at its first failing step; the sweep goes on past one (a failed variant or benchmark
    # still leaves the others' logs to bring back, its EXIT trap packs them)
    expected = "set -uo pipefail" if script == "run_sweep.sh" else "set -euo pipefail"
    assert re.search(rf"^{expected}$", text, re.M), f"{script}: expected '{expected}'"
    named = set(re.findall(r"(?<![\w.])(benchmarks/[\w/.-]+\.(?:py|json))", text))
    assert all((ROOT / path).is_file() for path in named), sorted(p for p in named if not (ROOT / p).is_file())
    # carried copies (.gpu/b/pack.py) are this folder's scripts
    carried = set(re.findall(r"\.gpu\d?/[ab]/(\w+\.py)", text))
    assert all((DEVICE / name).is_file() for name in carried), carried
    modules = {m for line in re.findall(r'-c "import ([^;"]+)', text) for m in line.split(", ")}
    taskret_modules = sorted(m.strip() for m in modules if m.strip().startswith("taskret"))
    assert all(importlib.util.find_spec(m) is not None for m in taskret_modules), taskret_modules
    assert named or carried or taskret_modules or "python3" not in text  # the patterns above still match something

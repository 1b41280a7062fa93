"""EPR scoring on Ray: a local cluster started by the test (`ray start --head` on 127.0.0.1, 2 CPUs), two
actors holding the tiny Llama. The shards must come out byte-identical to a single-process run, a worker
killed with SIGKILL mid-job must cost a retry and not a shard, and the CLI and the pipeline must use it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal

import pytest

pytestmark = pytest.mark.ray

if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is not installed (pip install 'taskret[ray]'); the Ray scoring tests are skipped",
                allow_module_level=True)

from taskret.epr.candidates import mine_candidates, write_candidates  # noqa: E402
from taskret.epr.scoring import SCORES_FILE, score_candidates  # noqa: E402
from tests.conftest import write_jsonl_rows  # noqa: E402
from tests.epr.builders import make_examples  # noqa: E402

# Keep Ray on loopback: without this, Ray swaps 127.0.0.1 for the machine's outward-facing address.
# Token authentication (on by default in recent Ray) is for shared clusters, not a test's private one.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
LM_OPTIONS = {"device": "cpu", "dtype": "float32"}  # as the in-process reference, whatever the CPU


@pytest.fixture(scope="module")
def ray_address(ray_temp_dir):
    from taskret.epr.distributed import start_local_cluster

    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            mp.setenv(key, value)
        import ray._private.ray_constants as constants

        mp.setattr(constants, "ENABLE_RAY_CLUSTER", False, raising=False)  # in case ray was imported before
        with start_local_cluster(num_cpus=2, temp_dir=ray_temp_dir) as address:
            yield address


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    examples = make_examples(12)
    rows = mine_candidates(examples, n=5)
    return examples, {e.id: e for e in examples}, rows


@pytest.fixture(scope="module")
def reference(tmp_path_factory, job, tiny_model_dir):
    """The single-process scores, with the LM loaded from the same folder and options as the actors."""
    from taskret.backends import make_backend

    _, by_id, rows = job
    out = tmp_path_factory.mktemp("reference") / "scoring"
    lm = make_backend(str(tiny_model_dir), **LM_OPTIONS)
    return score_candidates(rows, by_id, lm, out, shard_size=1).read_bytes()


def test_two_workers_match_local_scoring_and_survive_a_killed_worker(tmp_path, ray_address, job, reference,
                                                                     tiny_model_dir):
    from taskret.epr.distributed import RayScoring

    _, by_id, rows = job
    out = tmp_path / "scoring"
    # Resume: two shards are already there (from the reference run), so ten are scored on Ray.
    from taskret.backends import make_backend

    (out / "shards").mkdir(parents=True)
    partial = tmp_path / "partial"
    # File order: shards 0 and 1 of the two-row job are then shards 0 and 1 of the whole job.
    score_candidates(rows[:2], by_id, make_backend(str(tiny_model_dir), **LM_OPTIONS), partial, shard_size=1,
                     shard_order="file")
    for name in ("shard-00000.jsonl", "shard-00001.jsonl"):
        shutil.copy(partial / "shards" / name, out / "shards" / name)

    with RayScoring(str(tiny_model_dir), LM_OPTIONS, address=ray_address, workers=2) as runner:
        assert runner.model_name == str(tiny_model_dir) and len(runner.actors) == 2
        victim = runner.worker_info[0]["pid"]
        done: list[int] = []

        def progress(n: int) -> None:
            done.append(n)
            if len(done) == 4:  # the two resumed shards, then two scored on Ray: kill a worker
                os.kill(victim, signal.SIGKILL)

        path = score_candidates(rows, by_id, runner.model_name, out, shard_size=1, progress=progress,
                                shard_runner=runner, shard_order="file")
        stats = dict(runner.stats)
    assert path.read_bytes() == reference
    assert sum(done) == sum(len(r["candidates"]) for r in rows)
    assert stats["shards"] == 10  # only the missing shards were scored
    assert stats["worker_failures"] >= 1 and stats["retried_shards"] >= 1 and stats["workers_started"] >= 3
    assert [p.name for p in (out / "shards").iterdir() if p.name.startswith(".")] == []


def test_cli_scores_on_ray(tmp_path, ray_address, job, reference, tiny_model_dir):
    from typer.testing import CliRunner

    from taskret.cli import app

    examples, _, rows = job
    train = write_jsonl_rows(tmp_path / "train.jsonl", [{"key": e.id, "q": e.input, "a": e.output} for e in examples])
    cands = tmp_path / "candidates.jsonl"
    write_candidates(cands, rows)
    out = tmp_path / "scoring"
    result = CliRunner().invoke(app, [
        "epr", "score", "--train", str(train), "--input-field", "q", "--output-field", "a", "--id-field", "key",
        "--candidates", str(cands), "--lm", str(tiny_model_dir), "--lm-option", "dtype=float32", "--device", "cpu",
        "--shard-size", "1", "--ray", ray_address, "--ray-workers", "2", "--out", str(out)],
        env={"COLUMNS": "2000", **RAY_ENV})
    assert result.exit_code == 0, result.output
    assert "Ray: 2 workers" in result.output
    assert (out / SCORES_FILE).read_bytes() == reference


def test_a_model_that_does_not_load_is_reported(ray_address, tmp_path):
    from taskret.backends import BackendError
    from taskret.epr.distributed import RayScoring

    with pytest.raises(BackendError, match="could not load the scoring LM"):
        with RayScoring(str(tmp_path / "no-such-model"), address=ray_address, workers=1):
            pass


def test_pipeline_scores_on_ray_and_resumes_without_it(tmp_path, ray_address, tiny_model_dir, tiny_bert_dir):
    from taskret.backends import make_backend
    from taskret.epr.candidates import read_candidates
    from taskret.epr.pipeline import EPRConfig, run_pipeline

    examples = make_examples(10)
    train = write_jsonl_rows(tmp_path / "train.jsonl", [{"key": e.id, "q": e.input, "a": e.output} for e in examples])
    settings = dict(train=str(train), test=str(train), input_field="q", output_field="a", id_field="key",
                    work_dir=str(tmp_path / "work"), labels="lm", scoring_lm=str(tiny_model_dir),
                    scoring_lm_options=LM_OPTIONS, inference_lm=str(tiny_model_dir),
                    training={"base_model": str(tiny_bert_dir), "epochs": 1, "batch_size": 8, "mini_batch_size": 4},
                    n_candidates=3, k=1, shard_size=3, context_window=256, max_new_tokens=4, eval_limit=2)
    run_pipeline(EPRConfig(**settings, ray=ray_address, ray_workers=2), progress=False)
    work = tmp_path / "work"
    by_id = {e.id: e for e in examples}
    local = score_candidates(read_candidates(work / "candidates.jsonl"), by_id,
                             make_backend(str(tiny_model_dir), **LM_OPTIONS), tmp_path / "local", shard_size=3)
    assert (work / "scoring" / SCORES_FILE).read_bytes() == local.read_bytes()
    # Where it runs is not what it computes: the same work folder continues without Ray.
    run_pipeline(EPRConfig(**settings), progress=False)


def test_more_workers_than_the_cluster_holds_is_reported(ray_address, tiny_model_dir):
    from taskret.backends import BackendError
    from taskret.epr.distributed import RayScoring

    with pytest.raises(BackendError, match=r"3 Ray workers \(1 CPU, 0 GPU each\) did not start within 3 s"):
        with RayScoring(str(tiny_model_dir), LM_OPTIONS, address=ray_address, workers=3, startup_timeout=3):
            pass


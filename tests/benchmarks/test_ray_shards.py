"""benchmarks/scale/ray_shards.py end to end on a small corpus of its own making, on a real three-node local Ray
cluster: the shards' merged top 10 against the single index's, a killed shard named and marked, the service under
wrk; and assemble.py copying the result into scale.json's ``shards``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .test_bm25_shards import _data

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scale"))


def test_a_clusters_processes_leave_out_another_cluster_on_the_same_machine(ray_temp_dir, monkeypatch):
    """Two benchmarks' clusters side by side (as two test workers run them): each one's memory and actors are its
    own, so that a benchmark never kills, nor counts, the other's actors."""
    import tempfile

    import ray
    import ray._private.ray_constants as constants
    from ray_shards import cluster_processes

    from taskret.backends.ray_pool import start_local_cluster

    # two head-only clusters, kept on loopback (as tests/epr/test_ray_scoring.py keeps its own)
    for key, value in {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(constants, "ENABLE_RAY_CLUSTER", False, raising=False)

    class Probe:
        def pid(self) -> int:
            import os

            return os.getpid()

    second_temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    try:
        with start_local_cluster(num_cpus=1, temp_dir=ray_temp_dir) as first, \
                start_local_cluster(num_cpus=1, temp_dir=second_temp) as second:
            ray.init(address=first, logging_level="ERROR", log_to_driver=False)
            try:
                actor = ray.remote(num_cpus=0)(Probe).remote()
                actor_pid = ray.get(actor.pid.remote())
                mine, theirs = ({p.pid for p in cluster_processes(a)} for a in (first, second))
            finally:
                ray.shutdown()
    finally:
        shutil.rmtree(second_temp, ignore_errors=True)
    assert actor_pid in mine and actor_pid not in theirs
    assert theirs and not mine & theirs


def test_tied_scores_compare_as_sets_and_a_tie_cut_by_rank_10_is_left_out():
    from ray_shards import agreement, tied_groups

    ids, scores = list("abcdefghijk"), [9, 8, 8, 7, 6, 5, 4, 3, 2, 1, 1]
    assert tied_groups(ids, scores)[1] == frozenset("bc") and len(tied_groups(ids, scores)) == 8  # {j, k} cut
    swapped = {"ids": list("acbdefghijk"), "scores": scores}
    assert agreement([{"ids": ids, "scores": scores}], [swapped]) == {
        "queries": 1, "same_top10_share": 0.0, "same_top10_up_to_ties_share": 1.0, "max_score_diff": 0}
    other = {"ids": list("abcdefghizk"), "scores": [9, 8, 8, 7, 6, 5, 4, 3, 2, 1.5, 1]}
    assert agreement([other], [{"ids": ids, "scores": scores}])["same_top10_up_to_ties_share"] == 0.0


@pytest.mark.skipif(shutil.which("wrk") is None, reason="the service is loaded by wrk (apt-get install wrk)")
def test_shards_on_three_nodes_answer_as_the_single_index_and_a_killed_shard_is_marked(tmp_path):
    data = _data(tmp_path / "data")
    out, scale = tmp_path / "result.json", tmp_path / "scale.json"
    command = [sys.executable, str(ROOT / "benchmarks/scale/ray_shards.py"), "--data-dir", str(data), "--size", "300",
               "--shards", "3", "--queries", "25", "--serve-duration", "2", "--work", str(tmp_path / "work"),
               "--out", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    assert result["nodes"] == 3 and result["ray"]["nodes"] == 3 and result["ray"]["documents"] == 300
    assert result["vs_single_index"]["same_top10_up_to_ties_share"] == 1.0
    assert result["vs_single_index"]["max_score_diff"] == 0.0
    killed = result["killed_shard"]
    assert killed["strict"]["raised"] and killed["strict"]["names_shard"]
    assert killed["partial_missing"] == [killed["shard"]] and killed["partial_has_no_killed_shard_documents"]
    serve = result["serve"]
    assert serve["single"]["errors"] == 0 and serve["ray_shards"]["errors"] == 0
    assert serve["ray_shards"]["req_per_s"] > 0 and len(serve["ray_shards"]["actor_rss_mib"]) == 3
    assert serve["killed_shard"]["status"] == 200 and len(serve["killed_shard"]["missing_shards"]) == 1

    scale.write_text(json.dumps({"sizes": {}}))
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/assemble.py"), "--scale", str(scale),
                    "--ray-shards", str(out), "--dense-shards", str(tmp_path / "not-run.json"),
                    "--bm25-shards", str(tmp_path / "not-run.json")],
                   check=True, cwd=ROOT, capture_output=True, timeout=60)
    shards = json.loads(scale.read_text())["shards"]
    assert shards["nodes"] == 3 and shards["documents"] == 300 and shards["killed_shard_tested"] is True
    assert shards["bm25_same_top10_up_to_ties_share"] == 1.0 and shards["dense_recall_delta"] is None
    assert set(shards["serve"]) >= {"single", "ray_shards"}

"""benchmarks/scale/compressed_vectors.py: vectors synthesised past the real ones at the calibrated distance, and an
end-to-end run (build and search children) at a small size whose numbers are what they say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from . import import_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script():
    return import_script("benchmarks/scale", "compressed_vectors")


def _clustered(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(60, dim))
    vectors = centres[rng.integers(0, 60, size=n)] + 0.4 * rng.normal(size=(n, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def test_a_synthetic_vector_lies_as_far_from_its_source_as_a_real_one_from_its_nearest_neighbour(script, tmp_path):
    base = _clustered(3000)
    cosine = script.nearest_neighbour_cosine(base, sample=500)
    sigma = script.noise_scale(cosine, base.shape[1])
    out = tmp_path / "v.npy"
    script.CHUNK = 1000  # several chunks: the shuffled order carries across them
    script.synthesize(base, 7000, sigma, out, seed=3)
    made = np.load(out)
    assert made.shape == (7000, 32) and np.allclose(np.linalg.norm(made, axis=1), 1, atol=1e-5)
    np.testing.assert_array_equal(made[:3000], base)  # the real vectors first, unchanged
    order = np.random.default_rng(3).permutation(3000)
    sources = base[order[np.arange(3000, 7000) % 3000]]
    to_source = np.einsum("ij,ij->i", made[3000:], sources)
    assert abs(float(np.median(to_source)) - cosine) < 0.02
    assert len({tuple(np.round(r, 4)) for r in made[3000:]}) == 4000  # no copy is a duplicate


def test_a_run_builds_searches_and_reports_recall_latency_and_resident_memory(tmp_path):
    base = tmp_path / "base.npy"
    np.save(base, _clustered(6000, seed=1))
    out = tmp_path / "result.json"
    command = [sys.executable, str(ROOT / "benchmarks/scale/compressed_vectors.py"), "--base", str(base), "--sizes",
               "5000,9000", "--queries-n", "60", "--work", str(tmp_path / "work"), "--out", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    real, mixed = result["sizes"]["5000"], result["sizes"]["9000"]
    assert real["real_vectors"] == 5000 and mixed["real_vectors"] == 6000
    for row in (real, mixed):
        assert 0.8 <= row["recall_at_10"] <= 1 and 0 < row["p50_ms"] <= row["p99_ms"]
        assert row["queries"] == 60 and row["disk_gib"] > 0 and row["build_peak_rss_gib"] > 0
        assert 0 < row["resident_before_index_gib"] <= row["resident_after_queries_gib"]
        assert row["resident_share_of_disk"] > 0
    assert 0 < result["noise_sigma"] and 0 < result["base_nn_cosine_median"] < 1
    # a second run searches the built sizes again without building them
    again = subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "5000: built before, searched again" in again.stdout


def test_a_sweep_chooses_on_one_half_of_the_queries_and_reports_the_other(script, tmp_path):
    base = tmp_path / "base.npy"
    np.save(base, _clustered(6000, seed=2))
    out = tmp_path / "result.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/scale/compressed_vectors.py"), "--base", str(base),
                    "--sizes", "6000", "--queries-n", "80", "--work", str(tmp_path / "work"), "--out", str(out),
                    "--nprobe", "1,8", "--rerank", "10,60", "--target-recall", "0.9"],
                   check=True, cwd=ROOT, capture_output=True, timeout=600)
    swept = json.loads(out.read_text())["sizes"]["6000"]["sweep"]
    assert [(p["nprobe"], p["rerank"]) for p in swept["tuning"]] == [(1, 10), (1, 60), (8, 10), (8, 60)]
    assert swept["tuning_queries"] == 40 and swept["held_out"]["queries"] == 40
    reaching = [p for p in swept["tuning"] if p["recall_at_10"] >= 0.9]
    assert swept["chosen"]["reached_target_on_tuning"] == bool(reaching)
    best = min(reaching, key=lambda p: p["p50_ms"]) if reaching else max(swept["tuning"],
                                                                         key=lambda p: p["recall_at_10"])
    assert (swept["held_out"]["nprobe"], swept["held_out"]["rerank"]) == (best["nprobe"], best["rerank"])
    tuning, held_out = script.halves(80, 0)
    assert len(set(tuning) | set(held_out)) == 80 and not set(tuning) & set(held_out)


def test_each_size_renders_with_its_settings_recall_and_resident_share(monkeypatch):
    from .test_engines import import_scale_renderer

    row = {"real_vectors": 1_000_000, "build_s": 300.0, "build_peak_rss_gib": 2.1, "recall_at_10": 0.9612,
           "p50_ms": 1.8, "p99_ms": 4.2, "disk_gib": 1.6, "resident_after_queries_gib": 0.2,
           "resident_share_of_disk": 0.125, "settings": {"nlist": 4096, "m": 48, "nprobe": 64, "rerank": 100}}
    result = {"command": "python benchmarks/scale/compressed_vectors.py --sizes 1000000", "queries": "real",
              "machine": {"cpu": "AMD EPYC", "cores": 2, "python": "3.11.7", "load_average": [0.3, 1, 1]},
              "base_vectors": 1_000_000, "base_nn_cosine_median": 0.8, "sizes": {"1000000": row}}
    render = import_scale_renderer()
    monkeypatch.setattr(render, "load", lambda name: result if name == "compressed_vectors.json" else None)
    text = "\n".join(render.compressed_vectors_table())
    assert "| 1,000,000 (1,000,000) | 4,096 / 48 / 64 / 100 | 300.0 | 2.1 | 0.961 | 1.8 / 4.2 | 1.6 | 0.2 (12.5%) |" \
        in text and "--sizes 1000000" in text and "load average 0.3 at the start" in text


def test_a_sweep_renders_its_grid_and_the_held_out_numbers_of_the_chosen_pair():
    from .test_engines import import_scale_renderer

    sweep = {"target_recall": 0.95, "tuning_queries": 500, "chosen": {"nprobe": 128, "rerank": 200,
                                                                      "reached_target_on_tuning": True},
             "tuning": [{"nprobe": np_, "rerank": r, "recall_at_10": rec, "p50_ms": ms}
                        for np_, r, rec, ms in ((64, 100, 0.93, 4.0), (64, 200, 0.94, 5.0), (128, 100, 0.945, 6.0),
                                                (128, 200, 0.955, 7.0))],
             "held_out": {"nprobe": 128, "rerank": 200, "recall_at_10": 0.951, "p50_ms": 7.1, "queries": 500}}
    text = "\n".join(import_scale_renderer().sweep_rows(1_000_000, sweep))
    assert "| nprobe | re-rank 100 | re-rank 200 |" in text and "| 128 | 0.945 / 6.00 | 0.955 / 7.00 |" in text
    assert "Chosen: nprobe 128, re-rank 200; on the 500 held-out queries recall@10 **0.951** at **7.10 ms**" in text

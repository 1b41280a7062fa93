"""benchmarks/scale/assemble.py: a size scale.py does not build (10M) taken from its two bounded builds, under the keys
scale.json's readers use, with its peak set beside the same builds' at the smaller size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ray_shards_result(single_p50: float = 1.0, ray_p50: float = 2.0) -> dict:
    """The ray_shards.py keys that assemble.py reads, from a run not made here (test_ray_shards.py runs the script)."""
    return {"nodes": 3, "shards": 3, "documents": 300, "machine": {}, "command": "ray_shards.py",
            "vs_single_index": {"queries": 25, "same_top10_share": 1.0, "same_top10_up_to_ties_share": 1.0,
                                "max_score_diff": 0.0},
            "killed_shard": {"shard": "shard-1", "strict": {"raised": True, "names_shard": True},
                             "partial_missing": ["shard-1"], "partial_has_no_killed_shard_documents": True},
            "single": {"p50_ms": single_p50}, "ray": {"p50_ms": ray_p50}}


def _bm25_row(peak: float, p50: float) -> dict:
    return {"build_s": 100 * p50, "build_peak_rss_gib": peak, "disk_gib": 0.5, "p50_ms": p50, "p99_ms": 2 * p50,
            "resident_after_queries_gib": 0.3, "ndcg10": 47.5, "judged_queries": 400}


def _dense_row(peak: float, recall: float) -> dict:
    return {"real_vectors": 1000, "build_s": 10 * peak, "build_peak_rss_gib": peak, "settings": {"nprobe": 64},
            "p50_ms": 2.0, "p99_ms": 4.0, "recall_at_10": recall, "disk_gib": 2.0, "resident_share_of_disk": 0.1,
            "resident_after_queries_gib": 0.2}


#: scale.py's own size in the assembled file: only what the extrapolation reads of it
SCALE = {"sizes": {"1000": {"encode_docs_per_s": 100.0}}}


def _assemble(folder) -> str:
    """assemble.py over toy bounded builds at 1,000 and 10,000 documents (asked for 10,000 and 20,000), and a Ray
    front that adds 2.5 ms; what it printed."""
    bm25 = {"command": "bm25_shards.py", "sizes": {"1000": {"1": _bm25_row(1.5, 1.0), "2": _bm25_row(1.1, 1.2)},
                                                     "10000": {"1": _bm25_row(2.0, 3.0)}}}
    dense = {"command": "compressed_vectors.py", "queries": "real",
             "sizes": {"1000": _dense_row(1.0, 0.99), "10000": _dense_row(3.0, 0.96)}}
    ray = ray_shards_result(single_p50=1.0, ray_p50=3.5)
    pisa = {"command": "bm25_pisa.py", "machine": {}, "sizes": {"10000": {
        "settings": {"pisa": {"p50_ms": 1.0, "p99_ms": 2.0}, "bm25s": {"p50_ms": 3.1}},
        "paired": {"ratio_pisa_over_bm25s": 0.33, "ratio_ci95": [0.3, 0.36]}, "same_top10_share": 1.0,
        "derive": {"derive_s": 5.0, "peak_rss_gib": 0.4, "disk_gib": 0.2}}}}
    for name, value in (("bm25.json", bm25), ("dense.json", dense), ("scale.json", SCALE), ("ray.json", ray),
                        ("pisa.json", pisa)):
        (folder / name).write_text(json.dumps(value))
    command = [sys.executable, str(ROOT / "benchmarks/scale/assemble.py"), "--scale", str(folder / "scale.json"),
               "--ray-shards", str(folder / "ray.json"), "--dense-shards", str(folder / "none.json"),
               "--bm25-shards", str(folder / "bm25.json"), "--compressed", str(folder / "dense.json"),
               "--bm25-pisa", str(folder / "pisa.json"), "--ivf-quantizer", str(folder / "none.json"),
               "--sizes", "10000,20000", "--extrapolate-to", "20000000"]
    return subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout


def test_a_size_from_the_bounded_builds_lands_under_scale_jsons_keys(tmp_path):
    said = _assemble(tmp_path)
    assert "sizes[20000]: left out" in said
    written = json.loads((tmp_path / "scale.json").read_text())
    sizes = written["sizes"]
    assert set(sizes) == {"1000", "10000"} and sizes["1000"] == SCALE["sizes"]["1000"]  # scale.py's own is kept
    entry = sizes["10000"]
    assert entry["peak_rss_gib"] == 3.0  # the larger of the two builds, each its own process tree
    assert entry["peak_rss_ratio_to"] == {"documents": 1000, "ratio": 2.0}  # against max(1.5, 1.0) at 1000
    assert entry["bm25"]["p50_ms"] == 3.0 and entry["bm25"]["ndcg10"] == 47.5
    assert entry["bm25"]["searched_by"] == "bm25s"  # its own run; the same kind of index on PISA beside it
    assert entry["bm25"]["pisa"]["p50_ms"] == 1.0 and entry["bm25"]["pisa"]["same_top10_share"] == 1.0
    assert entry["dense"]["recall_at_10"] == 0.96 and entry["dense"]["search_only"]["p50_ms"] == 2.0
    assert entry["dense"]["quantizer"] == "flat"  # no ivf_quantizer.py result: compressed_vectors.py's own search
    assert entry["resident_after_queries_share_of_disk"] == 0.1

    # 20M in shards of 10M, 5M, 2M and 1M documents, each cost on the line through 1,000 and 10,000 documents
    table = written["extrapolation_shards"]
    assert table["from_sizes"] == [1000, 10000] and table["merge_ms"] == 2.5 and "an extrapolation" in table["note"]
    rows = {r["documents_per_shard"]: r for r in table["rows"]}
    assert rows[10_000_000]["shards"] == rows[10_000_000]["machines"] == 2 and rows[1_000_000]["shards"] == 20
    # BM25 p50 is 1 ms at 1,000 and 3 ms at 10,000 documents: 1 + 2 * (n - 1000) / 9000, plus the merge
    assert abs(rows[1_000_000]["bm25_p50_ms"] - (1 + 2 * 999_000 / 9000 + 2.5)) < 0.01
    # the encoding at 100 documents/s dominates the build: 1M documents is 2.78 h of it
    assert rows[1_000_000]["encode_h"] == 2.78 and rows[1_000_000]["build_h"] > 2.78


def test_the_assembled_size_and_the_extrapolation_render_apart_from_scale_pys_own_sizes(tmp_path, monkeypatch):
    from .test_engines import import_scale_renderer

    _assemble(tmp_path)
    assembled = json.loads((tmp_path / "scale.json").read_text())
    assembled.update(command="scale.py", corpus="pooled", queries=1000,
                     machine={"cpu": "AMD EPYC", "cores": 2, "python": "3.11.7", "load_average": [0.5, 0.5, 0.5]})
    render = import_scale_renderer()
    monkeypatch.setattr(render, "load", lambda name: assembled)
    own = "\n".join(render.scale_table())
    assert "| 10,000 |" not in own  # not one of scale.py's builds: no stages, no encoder rate to show
    bounded = "\n".join(render.bounded_builds_table())
    assert "| 10,000 | 3.00 (2.00x 1,000) |" in bounded and "47.50" in bounded
    assert "**Extrapolated, not measured**: 20,000,000 documents" in bounded and "| 1,000,000 | 20 |" in bounded

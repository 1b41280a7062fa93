"""`taskret serve` under load and dense search latency (benchmarks/serve/: serve_load*.json, dense_latency.json)."""

from __future__ import annotations

from _common import describe_machine

from .common import header, load


def worker_memory(workers: list[dict]) -> str:
    """Each serving worker's RSS / PSS (MiB), as serve_load.py's ``Server.memory`` measures them."""
    return ", ".join(f"{w['rss']:.0f} / {w['pss']:.0f}" for w in workers)  # no thousands commas: commas part workers


def serve_table() -> list[str]:
    d = load("serve_load.json")
    if not d:
        return []
    out = [f"Retrieval service under load (`{d['command']}`; {describe_machine(d['machine'])}, load average "
           f"{d['machine'].get('load_average', ['?'])[0]} before and {d.get('load_average_after', ['?'])[0]} after; "
           f"{d['tool']}, 1 thread, on the same machine as the server; real queries in turn). Memory per worker "
           "after the load: RSS, and PSS (pages shared between processes divided among them):", "",
           *header("workers", "endpoint", "index", "connections", "requests/s", "p50 ms", "p90 ms", "p99 ms", "errors",
                   "worker RSS / PSS MiB")]
    for r in d["runs"]:
        lat = r["latency_ms"]
        out.append(f"| {r['workers']} | {r['name']} | {r['index']} | {r['connections']} | {r['requests_per_s']} | "
                   f"{lat['p50']} | {lat['p90']} | {lat['p99']} | {r['errors']} | "
                   f"{worker_memory(r['server_memory_mib']['workers'])} |")
    for workers, t in d["targets"].items():
        out += ["", f"Target (workers={workers}): /retrieve on BM25 at **{t['share_of_floor']:.0%}** of the /health "
                f"floor's requests/s (target >= 50%: {'met' if t['share_met'] else 'missed'}), p99 "
                f"**{t['p99_over_floor_p99']}x** the floor's (target <= 2x: {'met' if t['p99_met'] else 'missed'}), "
                f"{t['errors']} errors."]
    return out + _http_stack_table(d)


def _http_stack_table(after: dict) -> list[str]:
    """serve_load.json against serve_load_h11.json: the same runs on uvicorn's pure-Python HTTP stack."""
    before = load("serve_load_h11.json")
    if not before or "http_stack" not in after["machine"]:
        return []
    stack = lambda d: f"{d['machine']['http_stack']['http']} + {d['machine']['http_stack']['loop']}"  # noqa: E731
    rate = {(r["workers"], r["name"]): r["requests_per_s"] for r in before["runs"]}
    out = ["", f"The HTTP stack (`uvicorn[standard]`, measured once before and after on the same machine): "
           f"requests/s on {stack(before)} (`{before['command']}`) against {stack(after)} (the table above):", "",
           *header("workers", "endpoint", "before", "after", "after / before")]
    for r in after["runs"]:
        was = rate.get((r["workers"], r["name"]))
        if was:
            out.append(f"| {r['workers']} | {r['name']} | {was:,.1f} | {r['requests_per_s']:,.1f} | "
                       f"{r['requests_per_s'] / was:.2f}x |")
    return out


def dense_latency_table() -> list[str]:
    d = load("dense_latency.json")
    if not d:
        return []
    k = d["k"]
    out = [f"Dense retrieval latency (`{d['command']}`; {describe_machine(d['machine'])}; {d['vectors']}), top-{k}, "
           f"{d['search_threads']} search thread. Single query p50 / p99 ms; batched: queries/s for a batch of "
           f"{d['batch']}; recall@{k} against exact search; per HNSW setting, the smallest ef_search reaching "
           f"recall@{k} >= 0.99 (else the largest tried):", "",
           *header("n", "index", "build s", "single p50", "single p99", "batched q/s", f"recall@{k}")]
    for run in d["runs"]:
        flat = run["flat"]
        out.append(f"| {run['n']:,} | exact (flat IP) | | {flat['single']['p50_ms']:.2f} | "
                   f"{flat['single']['p99_ms']:.2f} | {flat['batched']['queries_per_s']} | 1.00 |")
        for c in run["hnsw"]:
            good = [b for b in c["by_ef_search"] if b[f"recall@{k}"] >= 0.99]
            b = good[0] if good else c["by_ef_search"][-1]
            out.append(f"| {run['n']:,} | HNSW M={c['M']} efC={c['ef_construction']} ef={b['ef_search']} | "
                       f"{c['build_s']} | {b['single']['p50_ms']:.2f} | {b['single']['p99_ms']:.2f} | "
                       f"{b['batched']['queries_per_s']} | {b[f'recall@{k}']:.3f} |")
    defaults = d.get("defaults")
    if defaults:
        out += ["", f"The defaults of `dense:` (HNSW M={defaults['M']}, ef_construction={defaults['ef_construction']}, "
                f"ef_search={defaults['ef_search']}): " + "; ".join(
                    f"{r['n']:,} vectors {r['single_p50_ms']:.2f} ms single-query p50 (flat {r['flat_single_p50_ms']:.2f}), "
                    f"recall@{k} {r[f'recall@{k}']:.3f}" for r in defaults["by_n"])
                + f". `index_type=auto` builds HNSW from {d['auto_hnsw_from']:,} vectors on, flat below."]
    return out


def request_path_table() -> list[str]:
    """request_path.json: each change to /retrieve's path served beside the code before it, and the profile of the
    last one."""
    d = load("request_path.json")
    if not d or not d.get("runs"):
        return []
    runs = list(d["runs"].items())
    first = runs[0][1]
    out = [f"Changes to `/retrieve`'s request path, each measured once against the code before it "
           f"(`python benchmarks/serve/request_path.py --label NAME --before SRC`; "
           f"{describe_machine(first['machine'])}; `taskret serve --workers {first['workers']}`, real queries in "
           f"turn (Break's test questions; at 1M, scale.py's 1,000), k=10, both servers up, {first['rounds']} rounds of "
           f"{first['duration_s']:g} s of `/health` then `/retrieve` on each, in ABBA order; wrk, "
           f"{first['connections']} connections, on the same machine). Requests/s are the rounds' means; the change "
           "is the geometric mean of the rounds' after / before ratios with its 95% t interval:", "",
           *header("change", "index", "/retrieve req/s before -> after", "after / before [95% CI]", "/health after / before",
                   "share of the floor before -> after", "p99 ms before -> after", "load average before")]
    for label, r in runs:
        if "change" not in r or not isinstance(r["change"], dict):
            continue
        b, a, c = r["before"], r["after"], r["change"]
        within = c["retrieve"]["ci95"][0] <= 1 <= c["retrieve"]["ci95"][1]
        out.append(f"| {label} | `{r['index']}` | {b['retrieve']['req_per_s']:,.0f} -> "
                   f"{a['retrieve']['req_per_s']:,.0f} | "
                   f"{c['retrieve']['ratio']:.2f}x [{c['retrieve']['ci95'][0]:.2f}, {c['retrieve']['ci95'][1]:.2f}]"
                   f"{' (within noise)' if within else ''} | {c['floor']['ratio']:.2f}x | "
                   f"{b['share_of_floor']:.0%} -> {a['share_of_floor']:.0%} | {b['retrieve']['p99_ms']:.0f} -> "
                   f"{a['retrieve']['p99_ms']:.0f} | {r['load_average_before'][0]} |")
    current = [(label, r) for label, r in runs if r.get("before") is None]
    if current:
        parts = list(current[-1][1]["profile"]["parts"]) if current[-1][1].get("profile") else []
        out += ["", "The request path as it is now, served alone (the same rounds), and where a request's time goes: "
                "py-spy's samples of each worker's threads, sorted into the parts of a request (`request_path.py`'s "
                "docstring), as shares of the samples:", "",
                *header("run", "index", "/health req/s", "/retrieve req/s", "share of the floor", "p99 ms (floor)",
                        "load average before", *parts)]
        for label, r in current:
            a, profile = r["after"], r.get("profile") or {}
            shares = [f"{profile['parts'][part]:.0%}" if part in profile.get("parts", {}) else "-" for part in parts]
            out.append(f"| {label} | `{r['index']}` | {a['floor']['req_per_s']:,.0f} | {a['retrieve']['req_per_s']:,.0f}"
                       f" | **{a['share_of_floor']:.0%}** | {a['retrieve']['p99_ms']:.0f} ({a['floor']['p99_ms']:.0f}) | "
                       f"{r['load_average_before'][0]} | " + " | ".join(shares) + " |")
        modes = sorted({r["profile"]["mode"] for _, r in current if r.get("profile")})
        out += ["", f"Profiled: {' and '.join(modes)}."]
    return out

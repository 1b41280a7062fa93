"""Where does a generation's time go in the transformers backend? py-spy samples ``CausalLM.generate`` on --n Break
prompts (BM25 demonstrations filled to --context-window as ``taskret evaluate`` fills them, today's batching), and
the samples are split into the prefill (the prompt's forward pass) and the decoding steps, each by the function the
CPU was in.

    python benchmarks/speed/lm_profile.py --data-dir ../shared/data
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, parser, write_result  # noqa: E402

# What the child process runs: the prompts from lm_engines.py's own builder, then one timed generate call.
CHILD = """
import json, sys, time
sys.path.insert(0, {benchmarks!r})
sys.path.insert(0, {speed!r})
from lm_engines import load_engine, task_prompts
lm = load_engine("transformers-float32", {lm!r})
inputs = task_prompts({data_dir!r}, {task!r}, {n}, lm, {context_window}, {seed})
start = time.perf_counter()
raw = lm.generate_raw(inputs["prompts"], max_new_tokens=inputs["max_new_tokens"])
json.dump({{"seconds": time.perf_counter() - start, "generated_tokens": sum(k for _, k in raw),
           "prompt_tokens": sum(inputs["prompt_tokens"])}}, open({timing!r}, "w"))
"""


def split(samples: Path, decode_from: int) -> dict:
    """Sample shares by phase (``decode_from``: the first line of ``_greedy``'s decoding loop), and within each phase
    by the innermost function (the top 8)."""
    phases: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    total = 0
    for line in samples.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        phases[phase_of(frames, decode_from)][frames[-1].split(" (")[0] + " " + frames[-1].rsplit("/", 1)[-1].rstrip(")")] += n
    out = {}
    for phase, counter in phases.items():
        count = sum(counter.values())
        out[phase] = {"share": round(count / total, 3),
                      "top": {name: round(n / count, 3) for name, n in counter.most_common(8)}}
    return {"samples": total, "phases": out}


def phase_of(frames: list[str], decode_from: int) -> str:
    """The phase from the line of ``_greedy`` the stack passes through: its first forward call is the prefill."""
    greedy = [f for f in frames if f.startswith("CausalLM._greedy")]
    if not greedy:
        return "other (imports, loading, prompts)"
    line = int(greedy[0].rsplit(":", 1)[-1].rstrip(")"))
    return "prefill" if line < decode_from else "decoding steps"


def decode_line() -> int:
    """The line of ``_greedy``'s decoding-step forward call (after its loop starts), read from the source."""
    import inspect

    from taskret.backends.transformers import CausalLM

    lines, first = inspect.getsourcelines(CausalLM._greedy)
    loop = next(k for k, text in enumerate(lines) if text.strip().startswith("for _ in range(max_new_tokens)"))
    return first + loop


def main() -> None:
    options = parser(__doc__, out="benchmarks/results/lm_profile.json", lm="smollm2-135m", seed=0)
    options.add_argument("--task", default="break")
    options.add_argument("--n", type=int, default=4)
    options.add_argument("--context-window", type=int, default=2048)
    options.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    args = options.parse_args()
    where = machine()
    with tempfile.TemporaryDirectory() as tmp:
        samples, timing = Path(tmp) / "samples.txt", Path(tmp) / "timing.json"
        child = CHILD.format(benchmarks=str(Path(__file__).resolve().parents[1]), speed=str(Path(__file__).parent),
                             lm=args.lm, data_dir=args.data_dir, task=args.task, n=args.n,
                             context_window=args.context_window, seed=args.seed, timing=str(timing))
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")  # the bench extra installs it
        subprocess.run([spy, "record", "-f", "raw", "-r", str(args.rate), "-o", str(samples), "--",
                        sys.executable, "-c", child], check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                       stdout=subprocess.DEVNULL)
        result = {**split(samples, decode_line()), "generation": json.loads(timing.read_text())}
    write_result(args.out, {"command": command_line(args, options), "machine": where, "lm": args.lm, "task": args.task,
                            "n": args.n, **result})


if __name__ == "__main__":
    main()

"""What every benchmark script shares: the ``--data-dir`` / ``--out`` arguments, a description of the machine a
result was measured on, the command line that reproduces the run, writing the result (atomically, with
``taskret.io.write_json``), and the seeded samples the scripts draw their examples from.

Scripts import it as a top-level module: each script, in its question's folder (``benchmarks/epr/``, ...) or a
study's (``studies/NAME/``), puts ``benchmarks/`` on ``sys.path`` itself.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from taskret.data import Example, load_task, sample
from taskret.epr.candidates import mine_candidates, mine_candidates_for
from taskret.io import write_json
from taskret.models import cpu_model

DEFAULT_DATA_DIR = "../shared/data"
HERE = Path(__file__).resolve().parent  # benchmarks/: scripts are named by their path under it (epr/epr_table.py)


def parser(doc: str | None, out: str | None = None, data_dir: bool = True, task: str | None = None,
           lm: str | None = None, seed: int | None = None, threads: int | None = None,
           icl: bool = False) -> argparse.ArgumentParser:
    """An argument parser with the module docstring as its help, the shared ``--data-dir`` (default
    ``$TASKRET_DATA_DIR``, else ``../shared/data``) and ``--out`` (default ``out``) arguments, and those of the
    other shared options given a default here: ``--task``, ``--lm``, ``--seed``, ``--threads`` (torch threads)
    and, with ``icl``, the prompt's ``--context-window`` and ``--max-new-tokens``."""
    result = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if data_dir:
        result.add_argument("--data-dir", default=os.environ.get("TASKRET_DATA_DIR", DEFAULT_DATA_DIR),
                            help="the tasks' data (default: $TASKRET_DATA_DIR, else %(default)s)")
    shared = {"--task": (task, str, "built-in task"), "--lm": (lm, str, "the language model"),
              "--seed": (seed, int, "seed of every sample"), "--threads": (threads, int, "torch threads")}
    for flag, (default, kind, text) in shared.items():
        if default is not None:
            result.add_argument(flag, type=kind, default=default, help=f"{text} (default: %(default)s)")
    if icl:
        result.add_argument("--context-window", type=int, default=640, help="prompt + generation tokens")
        result.add_argument("--max-new-tokens", type=int, default=128)
    if out is not None:
        result.add_argument("--out", default=out, help="the result to write (default: %(default)s)")
    return result


def machine(threads: int | None = None, **extra: Any) -> dict:
    """The machine a result was measured on: CPU model, cores, Python, torch (when loaded) and its thread
    count (``threads`` overrides), the load average when this is called (call it before timing: other
    work slows timings), and
    ``extra`` entries (e.g. ``faiss="1.9.0"``)."""
    info: dict[str, Any] = {"cpu": cpu_model(), "arch": platform.machine(), "cores": os.cpu_count(),
                            "python": platform.python_version()}
    torch = sys.modules.get("torch")  # only when the benchmark uses it: importing torch here would cost seconds
    if torch is not None:
        info["torch"] = torch.__version__
        info["threads"] = threads if threads is not None else torch.get_num_threads()
    elif threads is not None:
        info["threads"] = threads
    info["load_average"] = [round(x, 2) for x in os.getloadavg()]  # 1, 5, 15 min, when this is called
    info.update(extra)
    return info


def http_stack() -> dict:
    """What uvicorn serves with here: its HTTP parser (httptools, compiled, where installed, else the pure-Python
    h11) and event loop (uvloop where installed, else asyncio); ``uvicorn[standard]`` installs the compiled ones."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            return None

    return {"http": installed("httptools") or installed("h11") or "h11", "loop": installed("uvloop") or "asyncio"}


def describe_machine(info: dict | str) -> str:
    """One line for a report: ``machine()``'s dict, or the string older results hold, as it is."""
    if isinstance(info, str):
        return info
    parts = [info.get("cpu", "?"), f"{info.get('cores', '?')} cores", f"Python {info.get('python', '?')}"]
    if "torch" in info:
        parts.append(f"torch {info['torch']}")
    if "threads" in info:
        parts.append(f"{info['threads']} thread{'' if info['threads'] == 1 else 's'}")
    return ", ".join(parts)


def command_line(args: argparse.Namespace, parser: argparse.ArgumentParser, leave_out: Sequence[str] = ("data_dir",),
                 prefix: str = "") -> str:
    """``python benchmarks/SCRIPT.py`` with every argument's value (flags when set; ``--out`` only when not
    its default; ``leave_out``, by default the machine's own ``--data-dir``, never): the command that reproduces
    the run."""
    script = "?"
    if sys.argv and sys.argv[0]:  # its path under benchmarks/ (a study's script lives in studies/NAME/)
        path = Path(sys.argv[0]).resolve()
        script = path.relative_to(HERE).as_posix() if path.is_relative_to(HERE) else path.name
    parts = [f"{prefix}python", f"benchmarks/{script}"]
    for action in parser._actions:  # the declared order, which is the order --help shows
        dest = action.dest
        if dest in ("help",) or dest in leave_out or not action.option_strings or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if value is None or value is False or value == [] or (dest == "out" and value == parser.get_default(dest)):
            continue
        flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):  # quoted where the shell would split or expand them (a label with spaces)
            parts += [f"{flag} {shlex.quote(str(item))}" for item in value]
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


def round_metrics(metrics: dict, digits: int = 2) -> dict:
    """Metric values as the results report them."""
    return {name: round(value, digits) for name, value in metrics.items()}


def write_result(path: str | os.PathLike, result: dict, quiet: bool = False) -> Path:
    """Write ``result`` to ``path`` atomically (a killed run leaves the previous result, not half of one)."""
    path = Path(path)
    write_json(path, result)
    if not quiet:
        print(f"-> {path}", flush=True)
    return path


def sampled_candidates(pool: Sequence[Example], n_examples: int | None, n_candidates: int, seed: int = 0,
                       field: str = "output") -> list[dict]:
    """EPR candidate rows (as ``taskret epr candidates --limit``) for a seeded sample of ``n_examples`` training
    examples, each with its top ``n_candidates`` BM25 neighbours in the whole pool, rows in pool order."""
    return mine_candidates_for(pool, sample(pool, n_examples, seed=seed), n=n_candidates, field=field)


def scoring_shard(data_dir: str, task_name: str, n_candidates: int, shard_size: int, shard: int | None = None,
                  examples: int | None = None):
    """One shard of ``taskret epr score`` as it cuts them (``epr.scoring.order_shards``: every training example
    with its top ``n_candidates`` BM25 candidates, in output order): (shard index, every shard's rows, (prefixes,
    prompts, targets) of its first ``examples`` examples). ``shard=None`` picks a seeded random one."""
    import random

    from taskret.epr.scoring import order_shards, shard_pairs

    task = load_task(task_name, data_dir=data_dir)
    by_id = {e.id: e for e in task.train}
    shards = order_shards(mine_candidates(task.train, n=n_candidates), by_id, shard_size)
    if shard is None:
        shard = random.Random(0).randrange(len(shards))
    return shard, shards, shard_pairs(shards[shard][:examples], by_id, task.output_format)

"""Every command the README and the docs show parses: each ``taskret ...`` line of their code blocks goes through the
typer app's own parser (``make_context``, nothing run), so a renamed or removed option, a missing required one or a
misspelt subcommand fails here instead of in a reader's terminal. ``python benchmarks/...`` commands name scripts
that exist, the README stays short, and ``make bench`` holds every command the README's results cite."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from taskret.cli.main import app

try:  # typer 0.2x parses with its own copy of click; its errors are that copy's
    from typer._click import exceptions as cli_errors
except ImportError:  # pragma: no cover - an older typer on click itself
    import click.exceptions as cli_errors

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 150
FENCE = re.compile(r"^(\s*)```[\w-]*\s*$")
# Lines that show a pattern, not a command: the only ones skipped (a placeholder no parser can fill).
SKIP = (
    "taskret epr score ... --lm",  # how-to/ray.md: the options of the line above it, elided
)
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, logical line) of every fenced code block, backslash continuations joined."""
    out, fence, pending, start = [], None, "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
            continue
        if m and fence is not None and line.strip() == "```":
            fence = None
            continue
        if fence is None:
            continue
        text = line.strip()
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        out.append((start, pending + text))
        pending = ""
    return out


def _commands(tool: str) -> list[tuple[str, list[str]]]:
    """(where, argv after ``tool``) of every ``tool`` invocation in a code block: env assignments dropped, comments
    cut, ``&&`` / ``;`` / ``|`` chains split."""
    found = []
    for page in PAGES:
        for number, line in _code_lines(page):
            if tool not in line or any(s in line for s in SKIP) or line.lstrip().startswith((">>>", "#")):
                continue
            try:
                words = shlex.split(line)  # a word starting with # starts a comment, as in the shell (not url#name)
            except ValueError:
                continue  # not shell (Python, JSON, ...)
            words = words[:next((i for i, w in enumerate(words) if w.startswith("#")), len(words))]
            chunk: list[str] = []
            for word in [*words, "&&"]:
                if word in ("&&", ";", "|", "||"):
                    while chunk and ENV.match(chunk[0]):
                        chunk.pop(0)
                    if chunk and (chunk[0] == tool or chunk[0].endswith(f"/bin/{tool}")) and len(chunk) > 1:
                        found.append((f"{page.relative_to(ROOT)}:{number}", chunk[1:]))
                    chunk = []
                else:
                    chunk.append(word)
    return found


def parse(argv: list[str]):
    """Resolve ``argv``'s subcommand in the taskret app and parse its arguments as click would, without running it:
    the parsed context (``ctx.params``)."""
    command = typer.main.get_command(app)
    names = ["taskret"]
    args = list(argv)
    while hasattr(command, "get_command") and args and not args[0].startswith("-"):  # a group: go down
        sub = command.get_command(command.context_class(command), args[0])
        if sub is None:
            raise cli_errors.UsageError(f"no command {' '.join(names[1:] + [args[0]])!r}")
        names.append(args.pop(0))
        command = sub
    return command.make_context(" ".join(names), args, resilient_parsing=False)


TASKRET = _commands("taskret")


def test_the_pages_show_taskret_commands():
    assert len(TASKRET) > 20, TASKRET  # the extraction still finds the commands


@pytest.mark.parametrize("where,argv", TASKRET, ids=[w for w, _ in TASKRET])
def test_each_shown_command_parses(where, argv):
    try:
        parse(argv)
    except typer.Exit:  # --help, --version: parsed, and they exit by design
        pass
    except cli_errors.ClickException as e:
        pytest.fail(f"{where}: taskret {shlex.join(argv)}\n{e.format_message()}")


def test_the_parser_refuses_what_the_app_refuses():
    with pytest.raises(cli_errors.NoSuchOption):
        parse(["tart", "search", "a query", "--index", "runs/x", "--no-first-stage-instruction"])
    with pytest.raises(cli_errors.UsageError):
        parse(["tart", "no-such-command"])
    parse(["tart", "search", "a query", "--index", "runs/x"])  # and accepts what it accepts


def test_each_benchmark_path_the_pages_name_exists():
    """Commands and prose name benchmark scripts and configs (``python benchmarks/...``, ``benchmarks/epr/configs/...``):
    each must be where they say, moved or not."""
    named = {}
    for page in PAGES:
        for path in re.findall(r"(?<![\w/.])(benchmarks/[\w/.-]+\.(?:py|json|sh))(?!\w)", page.read_text(encoding="utf-8")):
            named.setdefault(path, page.relative_to(ROOT))
    assert named, "the pages name no benchmark script"
    missing = {path: str(page) for path, page in named.items() if not (ROOT / path).is_file()}
    assert not missing, missing


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; keep it to {README_MAX_LINES}"


def _bench_recipe() -> str:
    """The Makefile's bench recipe as one line per command, make's variables for the venv and data dropped."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = text.split("\nbench:", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ")
    recipe = recipe.replace("$(BIN)/", "").replace("TASKRET_DATA_DIR=$(DATA_DIR) ", "")
    recipe = recipe.replace(" --data-dir $(DATA_DIR)", "")
    return "\n".join(" ".join(line.split("#")[0].split()) for line in recipe.splitlines())


def test_make_bench_runs_every_command_the_readme_results_cite():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # the results block (the unnamed one; the named setups block cites its one command inline)
    block = readme.split("<!-- BENCHMARKS:START (", 1)[1].split("<!-- BENCHMARKS:END -->", 1)[0]
    cited = re.findall(r"^\d+\. `([^`]+)`", block, re.M)
    assert cited, "the README's results cite no command"
    recipe = _bench_recipe().splitlines()
    positions = []
    for command in cited:
        matches = [i for i, line in enumerate(recipe) if line == " ".join(command.split())]
        assert matches, f"make bench does not run: {command}"
        positions.append(matches[0])
    assert positions == sorted(positions), "make bench runs the README's commands out of the table's order"

"""MkDocs hook: write the CLI reference from the typer app at build time, so it never goes stale.

A page holding the line ``<!-- taskret-cli -->`` gets it replaced by every command's usage, arguments and
options, rendered by typer's own Markdown generator (the one behind ``typer taskret.cli.main utils docs``)
from ``typer.main.get_command(app)``: the help strings, defaults and types are the ones ``taskret --help``
prints.
"""

from __future__ import annotations

import re

MARKER = "<!-- taskret-cli -->"


def cli_markdown() -> str:
    import click
    import typer
    from typer.cli import get_docs_for_click

    from taskret.cli.main import app

    command = typer.main.get_command(app)
    ctx = click.Context(command, info_name="taskret")
    docs = get_docs_for_click(obj=command, ctx=ctx, name="taskret", indent=1, title="`taskret`")
    # typer truncates each subcommand's one-line summary ("Evaluate in-context learning with..."); the full
    # help follows under the command's own heading, so the summaries link there instead.
    return re.sub(r"^\* `([\w-]+)`: .*$", lambda m: f"* `{m.group(1)}`", docs, flags=re.MULTILINE)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_markdown())

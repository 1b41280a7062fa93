"""What the pages promise a new user: the README links every how-to page, getting-started names every extra and says
how the demo's numbers vary, the how-to pages say how to set the thread count, and the package's licence is an SPDX
expression."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _text(relative: str) -> str:
    return " ".join((ROOT / relative).read_text(encoding="utf-8").split())


def test_the_readme_links_every_how_to_page():
    readme = _text("README.md")
    missing = [p.name for p in sorted((ROOT / "docs" / "how-to").glob("*.md")) if f"(docs/how-to/{p.name})" not in readme]
    assert not missing


def test_getting_started_names_every_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    page = _text("docs/getting-started.md")
    listed = page[page.index("The extras:"):]
    listed = listed[:listed.index(".", listed.index("`docs`"))]
    assert not [name for name in extras if f"`{name}`" not in listed]


def test_the_licence_is_an_spdx_expression():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"


def test_getting_started_says_how_the_demos_numbers_vary():
    page = _text("docs/getting-started.md")
    assert "identical on every run" not in page
    assert "**How the numbers vary.**" in page and "thread count" in page and "instruction set" in page


def test_the_how_to_pages_say_how_to_set_the_thread_count():
    page = _text("docs/how-to/evaluate.md")
    section = page[page.index("## Threads"):page.index("## Index once")]
    assert "OMP_NUM_THREADS=1 taskret" in section and "--lm-option threads=" in section
    assert "(evaluate.md#threads)" in _text("docs/how-to/own-data.md")
    assert re.search(r"\(how-to/evaluate\.md#threads\)", _text("docs/getting-started.md"))

"""MkDocs hook: drop the Sphinx role prefixes (``:class:``, ``:func:``, ...) that the package's docstrings use.

mkdocstrings renders a docstring's ``:func:`fit``` as the text ``:func:`` followed by the code ``fit``; the
name alone reads as intended. ``~`` (Sphinx's "last component only") is applied the same way.
"""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj):<code>~?([^<]*)</code>")


def _short(match: re.Match) -> str:
    name = match.group(1)
    return f"<code>{name.rsplit('.', 1)[-1] if match.group(0).find('<code>~') >= 0 else name}</code>"


def on_page_content(html: str, page, config, files) -> str:
    return ROLE.sub(_short, html)

"""MkDocs hook (mkdocs.yml: ``hooks``): long dotted names in tables break at their dots.

docs/stylesheets/extra.css keeps code in a table's first column from breaking mid-word (a key
such as ``reputation.kappa_restart_each_iteration`` split as ``reputation.kappa_restart_e``,
``ach_iteration``); this gives such a name a place to break instead, before each of its dots
(``reputation`` | ``.kappa_restart_each_iteration``), with ``<wbr>``, which adds no text: what
a reader copies and what the search finds are unchanged."""

from __future__ import annotations

import re

CELL = re.compile(r"<td\b[^>]*>.*?</td>", re.S)
CODE = re.compile(r"<code>([^<]*)</code>")
DOT = re.compile(r"(?<=[\w\]>;])\.(?=[A-Za-z_&])")  # a dot between names, not in a number
LONG = 20  # characters: a shorter name fits any column whole


def breakable(code: re.Match) -> str:
    text = code[1]
    if len(text) <= LONG or " " in text:
        return code[0]
    return f"<code>{DOT.sub('<wbr>.', text)}</code>"


def on_page_content(html_text: str, **kwargs) -> str:
    return CELL.sub(lambda cell: CODE.sub(breakable, cell[0]), html_text)

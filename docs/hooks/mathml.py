"""MkDocs hook (mkdocs.yml: ``hooks``): the site's math rendered at build time as MathML.

``pymdownx.arithmatex`` (generic mode) leaves each formula as TeX, ``\\(...\\)`` in a
``<span class="arithmatex">`` or ``\\[...\\]`` in a ``<div class="arithmatex">``; this hook
replaces that TeX with the MathML that ``latex2mathml`` (docs/requirements.txt) makes of it.
Browsers draw MathML themselves, so a page shows its math with no script and no network (a
cluster's login node, a copy of the site opened from disk). A formula it cannot convert is a
warning, and so fails ``mkdocs build --strict``."""

from __future__ import annotations

import html
import logging
import re

from latex2mathml.converter import convert

log = logging.getLogger("mkdocs.hooks.mathml")

# arithmatex's generic output: its text is the escaped TeX with its delimiters, no markup
MATH = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*(?P<open>\\\(|\\\[)(?P<tex>.*?)(?:\\\)|\\\])\s*</(?P=tag)>',
    re.S,
)


# a sized delimiter (\big, \Big...) as the base of a script, as in ``\Big)^2``: Chromium
# stretches it only inside an mrow of its own
SCRIPTED_SIZED = re.compile(r"<(msup|msub|msubsup)>(<mo [^>]*minsize=[^>]*>[^<]*</mo>)")


def to_mathml(tex: str, display: bool) -> str:
    """The MathML of one formula (``display``: a block of its own, else inline)."""
    mathml = convert(tex.strip(), display="block" if display else "inline")
    return SCRIPTED_SIZED.sub(r"<\1><mrow>\2</mrow>", mathml)


def on_page_content(html_text: str, page, **kwargs) -> str:
    def replace(m: re.Match) -> str:
        tex = html.unescape(m["tex"])
        try:
            mathml = to_mathml(tex, display=m["open"] == "\\[")
        except Exception as e:  # noqa: BLE001 (any failure: the formula named, the build failed)
            log.warning(f"{page.file.src_uri}: math not converted to MathML: {tex!r}: {e}")
            return m[0]
        return f'<{m["tag"]} class="arithmatex">{mathml}</{m["tag"]}>'

    return MATH.sub(replace, html_text)

"""Griffe extension (mkdocs.yml: the mkdocstrings handler's ``extensions``): the package's
reST markup made Markdown for the API page.

The package's docstrings name other objects the Sphinx way, ``:func:`update```,
``:class:`~sparta.models.MemberLoader```, and open a literal block with ``::``, while
mkdocstrings reads them as Markdown (Google style), which would show the role and the ``::``
as text. Once a package is loaded, every role in its docstrings becomes the name in code,
linked to the object where the site renders it: an optional mkdocs-autorefs reference, the name
resolved in the scope of the docstring's object, which is plain code (no warning) where the
object is not on the site (a private helper, a module the API page does not document); a
``::`` that opens an indented block becomes ``:`` (Markdown shows the block as code)."""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(
    r":(?:py:)?(?P<role>func|meth|class|attr|mod|data|exc|obj|const|type):"
    r"`(?P<mark>[~!]?)(?P<text>[^`<]*?)\s*(?:<(?P<target>[^`>]+)>)?`"
)

# "...as follows::" then a blank line and an indented block: reST's literal block
LITERAL = re.compile(r"(?<=\S)::(?=[ \t]*\n[ \t]*\n[ \t]+\S)")


def identifier(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` (dotted or not) seen from ``obj``, or ``name`` itself."""
    head, _, rest = name.partition(".")
    try:
        path = obj.resolve(head)
    except (griffe.NameResolutionError, AttributeError, KeyError):
        return name
    return f"{path}.{rest}" if rest else path


def markdown(obj: griffe.Object, m: re.Match) -> str:
    """One role as Markdown: the text in code, an optional cross-reference around it."""
    target = (m["target"] or m["text"]).strip()
    text = m["text"].strip() if m["target"] else target
    if m["mark"] == "~" and not m["target"]:
        text = target.rsplit(".", 1)[-1]
    code = f"`{text}`"  # a Markdown code span: its text stays as it is
    if m["mark"] == "!":
        return code
    return f'<autoref identifier="{html.escape(identifier(obj, target))}" optional>{code}</autoref>'


def rewrite(text: str, obj: griffe.Object) -> str:
    """``text`` with its reST roles and literal-block markers made Markdown, as seen from ``obj``."""
    return LITERAL.sub(":", ROLE.sub(lambda m: markdown(obj, m), text))


def objects(obj: griffe.Object):
    """``obj`` and every object defined under it (not what it imports)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from objects(member)


class RestMarkup(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for obj in objects(pkg):
            docstring = obj.docstring
            if docstring is not None and (text := rewrite(docstring.value, obj)) != docstring.value:
                docstring.value = text
                for cached in ("lines", "parsed"):  # computed again from the new text
                    docstring.__dict__.pop(cached, None)

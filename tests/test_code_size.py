"""Small functions: no production function (the package and the rule scripts) over 80 lines,
and at most 5 over 60; no module of the package over 600 lines but those listed, none
growing. A function's lines run from its ``def`` to its last line (docstring and nested
functions included), as the AST gives them; a method counts as a function."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCTION = [
    *sorted((REPO / "workflow" / "sparta").rglob("*.py")),
    *sorted((REPO / "workflow" / "scripts").glob("*.py")),
]
LONGEST = 80
LONG = 60
LONG_ALLOWED = 5


def function_lengths(paths: list[Path], root: Path = REPO) -> dict[str, int]:
    """``path:line name`` -> lines of every function and method that is not inside another
    (paths relative to ``root``)."""
    out = {}

    def visit(node: ast.AST, path: Path) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{path.relative_to(root)}:{child.lineno} {child.name}"] = (
                    child.end_lineno - child.lineno + 1
                )
            else:  # a class body, a module-level if or try: their functions count on their own
                visit(child, path)

    for path in paths:
        visit(ast.parse(path.read_text(), str(path)), path)
    return out


def test_production_functions_are_small():
    lengths = function_lengths(PRODUCTION)
    assert len(lengths) > 300  # the scan read the package and the scripts
    longest = {f: n for f, n in lengths.items() if n > LONGEST}
    long = {f: n for f, n in sorted(lengths.items(), key=lambda kv: -kv[1]) if n > LONG}
    assert not longest, f"functions over {LONGEST} lines (split them into named helpers): {longest}"
    assert len(long) <= LONG_ALLOWED, (
        f"{len(long)} functions over {LONG} lines, at most {LONG_ALLOWED}: {long}"
    )


def test_a_nested_function_counts_in_its_parent(tmp_path):
    """A method counts on its own; a function nested in another counts within its parent only."""
    path = tmp_path / "m.py"
    path.write_text(
        "class A:\n    def f(self):\n        def g():\n            return 1\n\n        return g()\n\n\n"
        "if True:\n\n    def h():\n        pass\n"
    )
    assert function_lengths([path], tmp_path) == {"m.py:2 f": 5, "m.py:11 h": 2}


MODULE_LIMIT = 600
# The modules over the limit today, each held at its size: one may shrink, none may grow, and
# no other module may pass the limit. Lower a ceiling when a module shrinks; drop its line
# when it is split below the limit.
OVER_THE_LIMIT: dict[str, int] = {}


def module_lengths(paths: list[Path], root: Path = REPO) -> dict[str, int]:
    return {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in paths}


def over_budget(
    lengths: dict[str, int], ceilings: dict[str, int], limit: int = MODULE_LIMIT
) -> dict[str, int]:
    """The modules past their ceiling (their size in :data:`OVER_THE_LIMIT`, else ``limit``)."""
    return {m: n for m, n in lengths.items() if n > ceilings.get(m, limit)}


def test_no_module_grows_past_its_budget():
    package = [p for p in PRODUCTION if "workflow/sparta" in p.as_posix()]
    lengths = module_lengths(package)
    over = over_budget(lengths, OVER_THE_LIMIT)
    assert not over, f"modules over {MODULE_LIMIT} lines or past their size in OVER_THE_LIMIT: {over}"
    assert set(OVER_THE_LIMIT) <= set(lengths)  # every ceiling names a module that exists
    # a planted module over the limit, and a listed one grown by a line, are caught
    assert over_budget({"a.py": MODULE_LIMIT + 1, "b.py": 11}, {"b.py": 10}) == {"a.py": 601, "b.py": 11}


PACKAGE_LIMIT = 17_156  # lines of workflow/sparta: a new feature makes room for itself


def test_the_package_does_not_grow():
    total = sum(module_lengths([p for p in PRODUCTION if "workflow/sparta" in p.as_posix()]).values())
    assert total <= PACKAGE_LIMIT, f"workflow/sparta has {total} lines, over {PACKAGE_LIMIT}: make room first"


POSITIONAL_LIMIT = 6


def long_signatures(paths: list[Path], root: Path = REPO) -> dict[str, int]:
    """``path:line name`` -> positional parameters (``self``/``cls`` not counted, keyword-only
    ones after ``*`` neither) of every function over :data:`POSITIONAL_LIMIT`."""
    out = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
                n = len(names) - (names[:1] in (["self"], ["cls"]))
                if n > POSITIONAL_LIMIT:
                    out[f"{path.relative_to(root)}:{node.lineno} {node.name}"] = n
    return out


def test_no_function_takes_more_than_six_positional_parameters(tmp_path):
    """Records for what belongs together, keyword-only options for the rest."""
    package = [p for p in PRODUCTION if "workflow/sparta" in p.as_posix()]
    found = long_signatures(package)
    assert not found, f"functions with over {POSITIONAL_LIMIT} positional parameters: {found}"
    planted = tmp_path / "m.py"
    planted.write_text(
        "def f(a, b, c, d, e, f, g): pass\ndef ok(a, b, c, d, e, f, *, g): pass\n"
        "class A:\n    def m(self, a, b, c, d, e, f): pass\n    def n(self, a, b, c, d, e, f, g): pass\n"
    )
    assert long_signatures([planted], tmp_path) == {"m.py:1 f": 7, "m.py:5 n": 7}

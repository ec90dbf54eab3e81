"""Small functions: no production function (the package and the rule scripts) over 80 lines,
and at most 5 over 60. A function's lines run from its ``def`` to its last line (docstring and
nested functions included), as the AST gives them; a method counts as a function."""

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

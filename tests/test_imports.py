"""No import circles among the package's modules: every ``import`` of every module under
``workflow/sparta`` (at module level and inside functions, relative and absolute, subpackages
included) is an arrow, and no arrows may run in a loop. A function-level import hides a circle
from Python, not from a reader: it still ties the two modules together.

Code under ``if __name__ == "__main__":`` is left out: it runs only when the file is the
program, as the module ``__main__``, so what it imports loads the file again as a separate
module instead of closing a loop."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "workflow" / "sparta"


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root`` by dotted name (``__init__.py`` as its package)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_main_guard(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _statements(tree: ast.AST):
    """Every node of the tree, functions' bodies included, except ``__main__`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not _is_main_guard(child))


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The package's module that an imported dotted name lives in (its longest known prefix)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def imported(module: str, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its code."""
    path = modules[module]
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in _statements(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {_owner(alias.name, modules) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            if node.level:  # relative: from the module's own package, one level up per extra dot
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:  # `from . import x` names the module x, `from .x import f` x
                found.add(_owner(f"{base}.{alias.name}", modules))
    found.discard(None)
    found.discard(module)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the package's modules it imports."""
    modules = module_names(root, package)
    return {name: imported(name, modules) for name in modules}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each loop of arrows as one of its cycles (a -> b -> ... -> a), from the strongly
    connected components of the graph (Tarjan's algorithm)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                components.append(set(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle(graph, component) for component in components]


def _cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth first)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in {component}")


def test_the_package_has_no_import_circle():
    graph = import_graph(PACKAGE, "sparta")
    assert len(graph) > 30 and graph["sparta.config"]  # the scan read the package
    found = [" -> ".join(c) for c in circles(graph)]
    assert not found, (
        "import circles among sparta's modules (move the shared piece down to the module it "
        "belongs to; a function-level import does not break a circle):\n" + "\n".join(found)
    )


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_planted_circle_is_found(tmp_path):
    """Two modules that import each other, one of them only inside a function and through a
    subpackage, are one circle; the same pair without the function's import is none."""
    files = {
        "__init__.py": "",
        "low.py": "def f():\n    from .sub import high\n    return high\n",
        "sub/__init__.py": "",
        "sub/high.py": "from .. import low\n",
        "apart.py": "import pkg.low\nif __name__ == '__main__':\n    from pkg import apart\n",
    }
    root = _package(tmp_path, files)
    graph = import_graph(root, "pkg")
    assert graph["pkg.low"] == {"pkg.sub.high"} and graph["pkg.sub.high"] == {"pkg.low"}
    assert circles(graph) == [["pkg.low", "pkg.sub.high", "pkg.low"]]
    (root / "low.py").write_text("def f():\n    return 1\n")
    assert circles(import_graph(root, "pkg")) == []


def test_every_form_of_import_is_an_arrow(tmp_path):
    """Absolute and relative, ``from . import module`` resolved to the module, a name
    imported from a module to that module, and a ``__main__`` block left out."""
    files = {
        "__init__.py": "from .a import thing\n",
        "a.py": "import os\nimport pkg.b\nfrom pkg.sub import c\nthing = 1\n",
        "b.py": "from . import sub\nfrom .sub.c import name\n",
        "sub/__init__.py": "from . import c\n",
        "sub/c.py": "from ..b import x\nif __name__ == '__main__':\n    import pkg.a\n",
    }
    graph = import_graph(_package(tmp_path, files), "pkg")
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b", "pkg.sub.c"},
        "pkg.b": {"pkg.sub", "pkg.sub.c"},
        "pkg.sub": {"pkg.sub.c"},
        "pkg.sub.c": {"pkg.b"},
    }
    assert circles(graph) == [["pkg.b", "pkg.sub.c", "pkg.b"]]

"""aot_build's packages import each other without cycles: every module imports on its own, and
the package-level graph of its imports (a package: the first two dotted parts of a module's
name, ``aot_build.compile``) is acyclic. Imports under ``if TYPE_CHECKING:`` (annotations only)
and of the root package itself (``from .. import __version__``) are not edges."""

from __future__ import annotations

import ast
import importlib
import itertools
import warnings
from pathlib import Path

import pytest

import aot_build

ROOT = Path(aot_build.__file__).parent
#: Deprecated re-export modules: they import the package they moved to, nothing imports them.
DEPRECATED = ("aot_build.rules",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py")) if "__pycache__" not in p.parts}


def _package(name: str) -> str:
    return ".".join(name.split(".")[:2])


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements outside ``if TYPE_CHECKING:`` blocks, at any depth."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _imported(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The aot_build modules ``node`` (in ``module``) imports."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    # `from pkg import sub` imports the submodule when there is one
    subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in MODULES]
    return subs or [source]


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> where (``module:line``)."""
    graph: dict[str, dict[str, list[str]]] = {}
    for module, path in MODULES.items():
        if module.startswith(DEPRECATED):
            continue
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _imported(module, path, node):
                if not target.startswith("aot_build.") or target not in MODULES:
                    continue
                a, b = _package(module), _package(target)
                if a != b:
                    graph.setdefault(a, {}).setdefault(b, []).append(f"{module}:{node.lineno}")
    return graph


def _cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith(DEPRECATED)))
def test_every_module_imports(module: str) -> None:
    if module == "aot_build.compile.__main__":
        pytest.skip("runs the build when imported")
    importlib.import_module(module)


def test_the_package_import_graph_has_no_cycle() -> None:
    graph = package_graph()
    assert "aot_build.compile" in graph and "aot_build.backends" in graph["aot_build.compile"]
    cycle = _cycle(graph)
    if cycle:
        steps = [f"{a} -> {b} ({', '.join(graph[a][b][:3])})" for a, b in itertools.pairwise(cycle)]
        pytest.fail("package import cycle:\n  " + "\n  ".join(steps))


def test_backends_need_no_build_or_run_side_package() -> None:
    """A backend owns what it needs: it imports neither the build (compile) nor the shim (load)."""
    graph = package_graph()
    assert not {"aot_build.compile", "aot_build.load", "aot_build.package"} & set(graph["aot_build.backends"])


def test_the_old_rules_module_still_works_and_warns() -> None:
    import sys

    for name in ("aot_build.rules", "aot_build.rules.aoti", "aot_build.rules.dynamo"):
        sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rules = importlib.import_module("aot_build.rules")
        aoti = importlib.import_module("aot_build.rules.aoti")
        dynamo = importlib.import_module("aot_build.rules.dynamo")
    assert any(
        issubclass(w.category, DeprecationWarning) and "aot_build.backends" in str(w.message) for w in caught
    )
    from aot_build import backends
    from aot_build.backends.aoti import AotiBackend
    from aot_build.backends.dynamo import DynamoBackend

    assert rules.Rule is backends.Backend and rules.UnknownRule is backends.UnknownBackend
    assert rules.find is backends.find and rules.Built is backends.Built
    assert aoti.AotiRule is AotiBackend and dynamo.DynamoRule is DynamoBackend

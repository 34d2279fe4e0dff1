"""The package's shape holds: floors whose imports point down, no circle, small parts.

Each package of `muster` sits on a floor (docs/internals.md, "Where each concern
lives"); a module may import its own floor's and lower floors' modules, never a
higher one. No module imports itself back through others. Modules stay at most
600 lines and functions at most cyclomatic complexity 20 (radon's measure).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "muster"

# The first part of a module's name below `muster` -> its floor.
FLOORS: dict[str, int] = {
    "core": 1,
    "contract": 1,
    "schema": 1,
    "retry": 1,
    "botocore_config": 1,
    "runtime": 2,
    "aws": 3,
    "kube": 3,
    "lambdas": 4,
    "admin": 5,
    "agent": 5,
    "harness": 5,
    "kueue": 5,
    "local": 5,
    "manifests": 5,
    "agent_image": 5,
    "sim": 5,
    "cli": 6,
}
MAX_LINES = 600
MAX_COMPLEXITY = 20


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The `muster` modules `name` imports, anywhere in it (lazy imports count too)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from muster.admin import deployment` imports the submodule
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def floor(name: str) -> int:
    parts = name.split(".")
    assert len(parts) > 1, name
    assert parts[1] in FLOORS, f"{name}: give its package a floor in FLOORS"
    return FLOORS[parts[1]]


def test_every_import_points_down_or_across() -> None:
    upward = [
        f"{name} (floor {floor(name)}) imports {dep} (floor {floor(dep)})"
        for name, deps in GRAPH.items()
        if name != "muster"
        for dep in sorted(deps)
        if dep != "muster" and floor(dep) > floor(name)
    ]
    assert upward == []


def test_no_module_imports_itself_back() -> None:
    # Tarjan's strongly connected components: any with two or more modules is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert circles == []


def test_the_graph_sees_the_imports_it_judges() -> None:
    # A check that found no imports would pass for the wrong reason.
    assert "muster.core.decide" in GRAPH["muster.runtime.service"]
    assert "muster.runtime.service" in GRAPH["muster.lambdas.wiring"]
    assert sum(len(deps) for deps in GRAPH.values()) > 300


@pytest.mark.parametrize("root", ["layers/muster", "infra"])
def test_modules_are_at_most_600_lines(root: str) -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / root).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


@pytest.mark.parametrize("root", ["layers/muster", "infra", "benchmarks"])
def test_functions_are_at_most_complexity_20(root: str) -> None:
    tangled = {}
    for p in sorted((ROOT / root).rglob("*.py")):
        for block in cc_visit(p.read_text()):
            for f in [block, *getattr(block, "methods", [])]:
                if not hasattr(f, "methods") and f.complexity > MAX_COMPLEXITY:
                    tangled[f"{p.relative_to(ROOT)}:{f.name}"] = f.complexity
    assert tangled == {}

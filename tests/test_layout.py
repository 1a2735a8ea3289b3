"""The package's shape, read from its source with ``ast``: the layout follows the data flow.

Layers, lowest first (docs/architecture.md): ``config`` → ``ingest`` → ``state`` → ``metrics``
→ ``alerts`` → ``outputs`` → ``app`` → ``cli``. A module may import from its own layer and the
layers below it, never above; no import circle (function-level and ``TYPE_CHECKING`` imports
count too: a circle hidden behind them is still a circle); no module over 350 lines; the
service's ``Monitor`` class under 150 lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "monitor"
LAYERS = ("config", "ingest", "state", "metrics", "alerts", "outputs", "app", "cli")
MAX_LINES = 350
MAX_MONITOR_LINES = 150


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module of the package that ``name`` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from monitor.x import y` imports module monitor.x.y when that is a module
            targets = [
                f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names
            ]
        for t in targets:
            if t in MODULES and t != name:
                found.add(t)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def layer(name: str) -> int:
    """``monitor.state.engine`` -> index of ``state``; ``monitor.cli``/``__main__`` -> cli."""
    parts = name.split(".")
    if len(parts) == 1:  # the package's own __init__
        return 0
    first = parts[1]
    if first in ("cli", "__main__"):
        return LAYERS.index("cli")
    if first not in LAYERS:
        raise AssertionError(f"{name}: not in any layer of {LAYERS}; place it in one")
    return LAYERS.index(first)


def test_every_module_is_in_a_layer() -> None:
    assert len(MODULES) > 30, "the package was not found"
    for name in MODULES:
        layer(name)


def test_no_module_imports_from_a_layer_above_it() -> None:
    upward = sorted(
        f"{a} ({LAYERS[layer(a)]}) imports {b} ({LAYERS[layer(b)]})"
        for a, deps in GRAPH.items()
        for b in deps
        if layer(b) > layer(a)
    )
    assert upward == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_circle() -> None:
    """The checker itself: a circle through three modules and a self-contained pair."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": set(), "f": {"g"}, "g": {"f"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c"], ["f", "g"]]


def test_no_import_circle() -> None:
    assert _cycles(GRAPH) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_at_most_350_lines(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]}: {lines} lines; split it by responsibility"


def test_monitor_class_reads_in_one_sitting() -> None:
    path = PACKAGE / "app" / "service.py"
    tree = ast.parse(path.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Monitor"]
    assert cls.end_lineno is not None
    lines = cls.end_lineno - cls.lineno + 1
    assert lines < MAX_MONITOR_LINES, f"Monitor is {lines} lines"


def _documented_modules() -> set[str]:
    """``layer.module`` for every module named in docs/architecture.md's module table."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    table = text.split("## Data flow and modules", 1)[1].split("\n## ", 1)[0]
    found: set[str] = set()
    current = ""
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) != 3 or not row.startswith("|") or re.fullmatch(r"[-|\s]+", row):
            continue
        current = cells[0].strip("`/") or current
        for name in re.findall(r"`(\w+)\.py`", cells[1]):
            found.add(name if name == "cli" else f"{current}.{name}")
    return found


def test_architecture_table_names_every_module_where_it_is() -> None:
    """The module table in docs/architecture.md is true to the package: every module is
    listed under its layer, and every listed module exists."""
    actual = {
        name.removeprefix("monitor.")
        for name in MODULES
        if "." in name and not name.endswith("__main__") and name.count(".") in (1, 2)
    } - set(LAYERS[:-1])  # the layer packages themselves
    assert _documented_modules() == actual

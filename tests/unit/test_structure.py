"""The house's structure, checked: a declared layer order between the packages, no import circle
among the project's modules, only contract leaves and folders at the package's top, no module over
450 lines.

Imports are read with `ast` from the source, function-level imports included (a lazy import still
ties two modules together), so the check needs nothing installed and runs in the unit tier. The
circle check leaves out imports under `if TYPE_CHECKING:` (they exist for annotations and never
run); the layer check counts them, since a reader sees them as ties all the same, and so does a
second circle check, so a loop that exists only for annotations is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"corpusgraph": REPO / "lib" / "corpusgraph", "serving": REPO / "serving"}
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    found = {}
    for top, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([top, *parts])] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported dotted name lands in (a name inside a module counts as it)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _runtime_nodes(tree: ast.AST):
    """Every node except those under `if TYPE_CHECKING:`: an import there is read by type checkers
    only and never runs, so it ties no module to another at run time."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports (with type_checking=True, those imported under
    `if TYPE_CHECKING:` too)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for node in (ast.walk(tree) if type_checking else _runtime_nodes(tree)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base]) if base else ".".join(anchor)
                # `from pkg import sub` is an import of the submodule; `from mod import name` of mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                hit = _resolve(t, modules)
                if hit and hit != mod:
                    graph[mod].add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
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
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_type_checking_imports_are_not_followed():
    tree = ast.parse("from typing import TYPE_CHECKING\nimport a\nif TYPE_CHECKING:\n    import b\nelse:\n    import c\n")
    seen = [n.names[0].name for n in _runtime_nodes(tree) if isinstance(n, ast.Import)]
    assert sorted(seen) == ["a", "c"]


def test_cycle_finder_sees_a_circle_and_a_chain():
    # Hand-made graphs: a -> b -> c -> a is one circle; d -> e is none.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": set()}) == [["a", "b", "c"]]
    assert cycles({"d": {"e"}, "e": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    # runner/pipeline.py imports the stage steps; the service imports the query engine.
    assert any(t.startswith("corpusgraph.") for t in graph["corpusgraph.cli.main"])
    assert "corpusgraph.query.engine" in set().union(*(graph[m] for m in graph if m.startswith("serving")))


def test_no_import_circle():
    assert cycles(import_graph()) == []


def test_no_import_circle_even_counting_type_checking_imports():
    # An import under TYPE_CHECKING never runs, but a reader follows it all the same: a loop made
    # of them is a loop in the design (query/'s store, access, retrieval, hops and question were
    # one until the store became data and query/loaded.py the owner of what derives from it).
    assert cycles(import_graph(type_checking=True)) == []


# Each line may import only lines below it (a package imports itself freely). The face
# (corpusgraph/__init__.py) names everything lazily and stands above all of them.
LAYERS = (
    ("corpusgraph.cli",),
    ("serving",),
    ("corpusgraph.runner", "corpusgraph.export", "corpusgraph.report", "corpusgraph.integrations"),
    ("corpusgraph.query", "corpusgraph.estimate", "corpusgraph.evaluate"),
    ("corpusgraph.stages",),
    ("corpusgraph.llm", "corpusgraph.storage"),
    ("corpusgraph.config", "corpusgraph.sections", "corpusgraph.tables", "corpusgraph.prompts", "corpusgraph.text",
     "corpusgraph.tokens", "corpusgraph.lazy", "corpusgraph.graph", "corpusgraph.samples"),
)
# Within a line, only these ties between packages: the report reads the stage names; the root
# config is made of the sections.
SIDEWAYS = {("corpusgraph.report", "corpusgraph.runner"), ("corpusgraph.config", "corpusgraph.sections")}
# Never, whatever the lines say: the query side runs without Spark or the runner, the service too.
NEVER = {("corpusgraph.query", "corpusgraph.stages"), ("corpusgraph.query", "corpusgraph.runner"),
         ("serving", "corpusgraph.runner"), ("serving", "corpusgraph.stages")}
TOP_LEVEL_LEAVES = {"__init__.py", "config.py", "tables.py", "prompts.py", "text.py", "tokens.py", "lazy.py"}


def _package(module: str) -> str:
    for line in LAYERS:
        for pkg in line:
            if module == pkg or module.startswith(pkg + "."):
                return pkg
    raise AssertionError(f"{module} is in no layer of LAYERS")


def _layer(pkg: str) -> int:
    return next(i for i, line in enumerate(LAYERS) if pkg in line)


def test_layer_order():
    wrong = []
    for mod, targets in import_graph(type_checking=True).items():
        if mod == "corpusgraph":
            continue
        a = _package(mod)
        for t in targets:
            b = _package(t)
            if a == b:
                continue
            if (a, b) in NEVER or _layer(b) < _layer(a) or (_layer(b) == _layer(a) and (a, b) not in SIDEWAYS):
                wrong.append(f"{mod} -> {t}")
    assert wrong == []


def test_package_top_holds_only_contract_leaves_and_folders():
    top = REPO / "lib" / "corpusgraph"
    loose = {p.name for p in top.glob("*.py")} - TOP_LEVEL_LEAVES
    assert loose == set()


def test_no_module_over_450_lines():
    long = {str(p.relative_to(REPO)): n for p in _modules().values() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}

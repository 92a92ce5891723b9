"""The package's import graph: no cycle, counting the imports placed inside functions too, so that none of them
dodges one (an import inside a function is for an optional dependency or a slow one, never to break a ring).

The graph is read from the source (``ast``): every ``import`` / ``from ... import`` of a zofl module anywhere in a
file, relative ones resolved, a name that is a submodule counted as that module, and a module's import of
``a.b.c`` counted as imports of the packages ``a.b`` and ``a`` too (Python runs their ``__init__`` first)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOFL = ROOT / "zofl"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ZOFL.rglob("*.py")}


def _targets(node: ast.AST, here: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = here.split(".") if is_package else here.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        pkg = ".".join(base + ([node.module] if node.module else []))
    else:
        pkg = node.module or ""
    return [f"{pkg}.{a.name}" if f"{pkg}.{a.name}" in MODULES else pkg for a in node.names]


def imports(name: str) -> dict[str, list[int]]:
    """{zofl module imported by ``name`` (and its parent packages): [line numbers]}."""
    path = MODULES[name]
    out: dict[str, list[int]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        for target in _targets(node, name, path.name == "__init__.py"):
            parts = target.split(".")
            for i in range(2, len(parts) + 1):  # the target and its packages below zofl itself
                mod = ".".join(parts[:i])
                if mod in MODULES and mod != name and not name.startswith(mod + "."):
                    out.setdefault(mod, []).append(node.lineno)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle_even_through_imports_inside_functions():
    graph = {name: set(imports(name)) for name in MODULES}
    assert cycles(graph) == []


def test_the_checker_sees_a_cycle_and_a_relative_import_inside_a_function():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "zofl.methods" in imports("zofl.config")  # a top-level import
    assert "zofl.server_app" in imports("zofl.cli")  # one inside a function (cli.run_checks: a fast --help)

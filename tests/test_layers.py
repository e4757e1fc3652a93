"""The layering holds: storage imports nothing above it, kernels import nothing.

Read from the source (every import statement, lazy ones inside functions
included), so a shortcut taken in a hurry fails here rather than in review.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Each layer's directory, and what it may import from the package (prefixes of
# module names). Errors and models are the shared vocabulary of every layer;
# events is the instrumentation seam every layer reports on (it imports nothing);
# _distribution refuses to run under the reference SDK's package (it imports nothing).
LAYERS = {
    "storage": (ROOT / "cairnq" / "store", ("cairnq.store", "cairnq._ids", "cairnq._sql", "cairnq._speedups",
                                            "cairnq.errors", "cairnq.models", "cairnq.events",
                                            "cairnq._distribution")),
    "kernels": (ROOT / "_speedups", ("cairnq._speedups", "cairnq.errors", "cairnq.models")),
    # Periodic schedules talk to a store they are handed (any TaskStore): they
    # import neither the worker that runs them nor a driver.
    "periodic": (ROOT / "cairnq" / "periodic", ("cairnq.periodic", "cairnq.errors", "cairnq.models")),
    # The dashboard is a client application: it reads and acts through the
    # public client (queries.py through the store's browse reads), never a
    # driver or the worker.
    "dashboard": (ROOT / "cairnq" / "dashboard", ("cairnq.dashboard", "cairnq.client", "cairnq.models",
                                                  "cairnq.errors", "cairnq.watch", "cairnq._ids",
                                                  "cairnq.store.ops.browse", "cairnq.store.base")),
    # The testing helpers run handlers through the worker's own call path
    # (context, execution, registry, store port) and open stores through the
    # factory: never a driver, never another layer's privates.
    "testing": (ROOT / "cairnq" / "testing", ("cairnq.testing", "cairnq.client", "cairnq.context",
                                              "cairnq.worker", "cairnq.models", "cairnq.events",
                                              "cairnq.store.base", "cairnq.store.validation",
                                              "cairnq.store.factory")),
}  # fmt: skip
PYX_IMPORT = re.compile(r"^[ \t]*(?:from\s+(cairnq[\w.]*)\s+c?import|c?import\s+(cairnq[\w.]*))", re.M)


def _imports(path: Path) -> list[tuple[int, str]]:
    if path.suffix == ".pyx":  # Cython: not Python syntax, but its imports read the same
        text = path.read_text()
        return [(text.count("\n", 0, m.start()) + 1, m.group(1) or m.group(2)) for m in PYX_IMPORT.finditer(text)]
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module == "cairnq":  # `from cairnq import x` names submodules
                found += [(node.lineno, f"cairnq.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name == "cairnq" or name.startswith("cairnq.")]


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    directory, allowed = LAYERS[layer]
    files = sorted([*directory.rglob("*.py"), *directory.rglob("*.pyx")])
    assert files, layer
    seen = [(path, line, name) for path in files for line, name in _imports(path)]
    assert seen  # the scan reads something: a broken parser must not pass
    offences = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path, line, name in seen
        if name == "cairnq" or not name.startswith(allowed)
    ]
    assert offences == []


WEB_STACK = ("starlette", "uvicorn", "jinja2", "multipart", "python_multipart")


def test_only_the_dashboard_command_imports_the_dashboard_and_only_the_dashboard_the_web_stack() -> None:
    """``import cairnq`` never needs the ``dashboard`` extra."""
    dashboard = ROOT / "cairnq" / "dashboard"
    offences = []
    for path in sorted((ROOT / "cairnq").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        relative = path.relative_to(ROOT).as_posix()
        inside = path.is_relative_to(dashboard)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + ([f"cairnq.{a.name}" for a in node.names] if node.module == "cairnq" else [])
            else:
                continue
            for name in names:
                if name.split(".")[0] in WEB_STACK and not inside:
                    offences.append(f"{relative}:{node.lineno} imports {name}")
                if name.startswith("cairnq.dashboard") and not inside and relative != "cairnq/cli/dashboard.py":
                    offences.append(f"{relative}:{node.lineno} imports {name}")
    assert offences == []


def test_use_backpressure_gets_its_gate_from_the_package_root() -> None:
    import cairnq
    from cairnq.backpressure import QueueDepthGate
    from cairnq.store.sqlite import SQLiteStore

    store = SQLiteStore(":memory:")
    store.use_backpressure(5)
    assert isinstance(store._gate, QueueDepthGate)
    assert cairnq.SQLiteStore is SQLiteStore


# -- privates only through a declared port ------------------------------------------------------

PACKAGE_ROOTS = (ROOT / "cairnq", ROOT / "_speedups")


def _package_of(path: Path) -> str:
    """The unit privates belong to: a subpackage of cairnq (store, worker,
    cli, ...) or one top-level module (context, client, watch, ...)."""
    if path.is_relative_to(ROOT / "_speedups"):
        return "_speedups"
    parts = path.relative_to(ROOT / "cairnq").parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def _sources() -> list[Path]:
    return sorted(p for root in PACKAGE_ROOTS for p in root.rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_privates(tree: ast.AST) -> set[str]:
    """Every underscore name a module defines: functions, classes, module and
    class level assignments, and attributes it sets on self / cls."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
    return {name for name in found if _private(name)}


def _private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """``x._name`` where x is not self or cls (one's own privates are free)."""
    return [
        (node.lineno, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and _private(node.attr)
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


# Modules that may use another package's privates: the declared ports. A port
# lives in the package whose privates it exposes, so its uses are its own;
# entries here are the exceptions still to be removed, each with its reason
# (there are none).
PRIVATE_USES_ALLOWED: set[tuple[str, str]] = set()


def _private_offences() -> tuple[list[str], int]:
    trees = {path: ast.parse(path.read_text(), filename=str(path)) for path in _sources()}
    defined: dict[str, set[str]] = {}
    for path, tree in trees.items():
        defined.setdefault(_package_of(path), set()).update(_defined_privates(tree))
    offences, uses = [], 0
    for path, tree in trees.items():
        package = _package_of(path)
        for line, name in _private_uses(tree):
            uses += 1
            if name in defined[package]:
                continue  # its own package's (or a name it shares: not a crossing)
            owners = sorted(p for p, names in defined.items() if name in names)
            relative = path.relative_to(ROOT).as_posix()
            if owners and (relative, name) not in PRIVATE_USES_ALLOWED:
                offences.append(f"{relative}:{line} uses {name} of {', '.join(owners)}")
    return offences, uses


def test_no_module_uses_another_packages_privates_outside_its_port() -> None:
    offences, uses = _private_offences()
    assert uses > 10  # the scan reads something
    assert offences == []


def test_the_private_scan_catches_a_crossing(tmp_path: Path) -> None:
    tree = ast.parse("def f(store):\n    return store._claim_session, self._own, cls._x\n")
    assert _private_uses(tree) == [(2, "_claim_session")]
    assert "_claim_session" in _defined_privates(ast.parse((ROOT / "cairnq/store/ops/claims.py").read_text()))


# -- no import cycles -----------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    if path.is_relative_to(ROOT / "_speedups"):
        parts = ("cairnq", "_speedups", *path.relative_to(ROOT / "_speedups").with_suffix("").parts)
    else:
        parts = ("cairnq", *path.relative_to(ROOT / "cairnq").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _module_imports(tree: ast.Module, modules: set[str]) -> set[str]:
    """The cairnq modules this one depends on: its top-level imports (inside
    try / if too, ``if TYPE_CHECKING:`` included: a type-only circle is still
    a circle to a reader), not the lazy ones inside functions.
    ``from a.b import c`` imports a.b.c if that is a module, else a.b."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    found.add(submodule if submodule in modules else node.module)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return found & modules


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in _sources()}
    return {
        name: _module_imports(ast.parse(path.read_text(), filename=str(path)), set(modules)) - {name}
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


CYCLES_ALLOWED: list[list[str]] = []


def test_no_import_cycles_between_cairnq_modules() -> None:
    graph = _import_graph()
    assert sum(len(t) for t in graph.values()) > 50  # the scan reads something
    assert [c for c in _cycles(graph) if c not in CYCLES_ALLOWED] == []


def test_the_cycle_check_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]

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
# events is the instrumentation seam every layer reports on (it imports nothing).
LAYERS = {
    "storage": (ROOT / "cairnq" / "store", ("cairnq.store", "cairnq._ids", "cairnq._sql", "cairnq._speedups",
                                            "cairnq.errors", "cairnq.models", "cairnq.events")),
    "kernels": (ROOT / "_speedups", ("cairnq._speedups", "cairnq.errors", "cairnq.models")),
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


def test_use_backpressure_gets_its_gate_from_the_package_root() -> None:
    import cairnq
    from cairnq.backpressure import QueueDepthGate
    from cairnq.store.sqlite import SQLiteStore

    store = SQLiteStore(":memory:")
    store.use_backpressure(5)
    assert isinstance(store._gate, QueueDepthGate)
    assert cairnq.SQLiteStore is SQLiteStore

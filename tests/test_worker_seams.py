"""The worker's seams hold: a TaskContext's state is reached only through the
worker's side declared in ``cairnq/context.py``, and ``worker/lifecycle.py``
needs nothing from ``worker/worker.py`` (no import circle).

Read from the source, like tests/test_layers.py, so a shortcut fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from cairnq.context import TaskContext

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cairnq"


def _private_names_of_taskcontext() -> set[str]:
    names = {n for n in vars(TaskContext) if n.startswith("_") and not n.startswith("__")}
    tree = ast.parse((PACKAGE / "context.py").read_text())
    for node in ast.walk(tree):  # the instance attributes set in __init__
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                names.add(node.attr)
    return names


def test_the_worker_reaches_a_context_only_through_its_declared_side() -> None:
    """No private name of TaskContext on anything but ``self`` in the worker's
    modules (the ones that hold contexts)."""
    private = _private_names_of_taskcontext()
    assert {"_lost", "_settled", "_cancel_seen", "_mark_lease_lost"} <= private  # the scan reads them
    offences = []
    for path in sorted((PACKAGE / "worker").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in private
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                offences.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert offences == []


def test_lifecycle_does_not_import_the_worker() -> None:
    tree = ast.parse((PACKAGE / "worker" / "lifecycle.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert imported  # the scan reads something
    assert not any(name.startswith("cairnq") for name in imported), imported

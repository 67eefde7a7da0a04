"""The scorer's pure modules stay pure: they import only the core and each other, no I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCORER = Path(__file__).resolve().parent.parent / "scorer"
PURE = ("model", "observe", "plan", "explain")
ALLOWED_STDLIB = {
    "__future__",
    "collections",
    "dataclasses",
    "datetime",
    "enum",
    "json",
    "math",
    "types",
    "typing",
}


def imported(module: str) -> set[str]:
    tree = ast.parse((SCORER / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io(module: str) -> None:
    for name in imported(module):
        top = name.split(".")[0]
        if top == "steer":
            assert name.startswith("steer.core."), f"scorer.{module} imports {name}"
        elif top == "scorer":
            assert name.split(".")[1] in PURE, f"scorer.{module} imports {name}"
        else:
            assert top in ALLOWED_STDLIB, f"scorer.{module} imports {name}"

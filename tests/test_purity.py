"""The pure floor by allow-list: every module of the pure packages (today's and any added later)
imports only what `ALLOWED` names and the pure floor itself. import-linter's contracts in
pyproject.toml forbid named modules (the layers, the I/O libraries); this is the other side: a
module added to `steer/core` or `scorer/cycle/plan` is judged the day it appears, and a new import of
anything not on the list (a client library, `socket`, `os`, `time`, a service module) fails
here, naming the module and the import."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Folders and modules whose code decides without doing I/O: planning, explanation, admission,
# the policy model and the certificate decisions.
PURE = (
    "steer/core",
    "scorer/model.py",
    "scorer/cycle/observe.py",
    "scorer/cycle/plan",
    "scorer/explain",
    "scorer/cycle/retire.py",
    "scorer/cycle/clusterscore.py",
    "scorer/cycle/decide.py",
    "controller/admission_plan.py",
    "certs/renewal.py",
    "certs/rollover.py",
    "certs/pki.py",
    "webhook/review.py",
)
# The standard library's modules that compute (no files, sockets, processes, clocks or
# environment), and the libraries the pure floor computes with: the policy model (pydantic),
# CEL for DeviceClass selectors (celpy), YAML and JSON text, X.509 (cryptography).
ALLOWED = {
    "__future__", "base64", "bisect", "collections", "dataclasses", "datetime", "decimal",
    "enum", "fractions", "functools", "hashlib", "ipaddress", "itertools", "json", "math",
    "re", "types", "typing",
    "celpy", "cryptography", "orjson", "pydantic", "pydantic_core", "yaml",
}  # fmt: skip


def pure_files() -> list[Path]:
    out: list[Path] = []
    for entry in PURE:
        path = ROOT / entry
        out += [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))
    return out


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[str]:
    """The absolute module names `path` imports (a relative import resolved)."""
    found: list[str] = []
    package = module_of(path) if path.name == "__init__.py" else module_of(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.append(f"{base}.{node.module}" if node.module else base)
            else:
                found.append(str(node.module))
    return found


def allowed(name: str, pure: set[str]) -> bool:
    if name.split(".")[0] in ALLOWED:
        return True
    return any(name == m or name.startswith(m + ".") for m in pure)


def test_the_pure_floor_imports_only_what_it_is_allowed() -> None:
    files = pure_files()
    pure = {module_of(f) for f in files}
    assert len(files) > 80  # the folders above exist and hold the floor
    wrong = [
        f"{module_of(f)} imports {name}"
        for f in files
        for name in imports(f)
        if not allowed(name, pure)
    ]
    assert not wrong, "outside the pure floor's allow-list:\n" + "\n".join(sorted(set(wrong)))


def test_the_allow_list_names_no_module_that_does_io() -> None:
    """The list itself: nothing that reaches files, sockets, processes, the clock or the
    environment, and only real top-level modules."""
    io = {"os", "sys", "socket", "subprocess", "time", "pathlib", "io", "threading", "http"}
    assert not ALLOWED & io
    stdlib = {n for n in ALLOWED if n in sys.stdlib_module_names or n == "__future__"}
    third_party = ALLOWED - stdlib
    assert third_party == {"celpy", "cryptography", "orjson", "pydantic", "pydantic_core", "yaml"}

"""The end-to-end suite (tests/e2e and tests/faults) imports cleanly, checked where no
Kubernetes binary is needed.

`make e2e` runs on a real control plane, minutes after `make test`; a module of it that no
longer imports (a name moved between helpers) would otherwise first fail there. Collection
imports every module and resolves no fixture, so it needs no binary.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_e2e_module_imports_and_its_tests_are_collected() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--collect-only",
            "-p",
            "no:cacheprovider",
            "tests/e2e",
            "tests/faults",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " collected" in done.stdout.splitlines()[-1], done.stdout[-2000:]

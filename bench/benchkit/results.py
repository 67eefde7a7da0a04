"""Where a bench run works and where its results document goes.

Every bench writes one JSON document per run to bench/results/<name>-<UTC stamp>.json (or the
path given with --json), indented one space, values JSON cannot hold written as strings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import ROOT

RESULTS = ROOT / "bench" / "results"


def utc_stamp() -> str:
    """The run's start, as it appears in the results file name and its `started` key."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def results_file(explicit: Path | None, name: str, stamp: str) -> Path:
    return explicit or RESULTS / f"{name}-{stamp}.json"


def recorded_args(args: argparse.Namespace) -> dict[str, Any]:
    """The command line as the results document keeps it (paths as strings; not the
    subcommand's handler)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "func"}


def write_results(path: Path, doc: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str))


def run_workdir(stack: contextlib.ExitStack, explicit: Path | None, prefix: str) -> Path:
    """--workdir if given (kept afterwards), else a temporary folder removed with `stack`."""
    if explicit:
        path = Path(explicit)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))

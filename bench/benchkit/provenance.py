"""What a result was measured on: the commit, the product files changed since, the machine's
load (other work on the 2-core machine shows there)."""

from __future__ import annotations

import os
import subprocess

from . import ROOT


def source_version() -> str:
    """The commit measured, `-dirty` when the working tree differs from it."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def product_changes() -> list[str]:
    """Tracked product files that differ from the commit (others edit the same tree: the
    scorer runs whatever is there when it starts)."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "diff", "--name-only", "HEAD", "--", "scorer", "steer", "webhook"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.split()


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]

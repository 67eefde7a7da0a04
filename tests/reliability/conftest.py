"""Reliability summaries: each test's one-line account is repeated at the end of the run.

pytest keeps a passing test's output to itself, and `make test` runs quietly; the counts
(requests, failures, bypasses, memory) are the point of these tests, so they are shown in the
terminal summary whatever the capture mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

SUMMARIES: list[str] = []


def record_summary(name: str, line: str) -> None:
    """Print `line` now and again, under `name`, in the terminal summary (for module fixtures)."""
    print(line)
    SUMMARIES.append(f"{name}: {line}")


@pytest.fixture
def reliability_summary(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """`reliability_summary(line)`: print `line` now and again in the terminal summary."""

    def record(line: str) -> None:
        record_summary(request.node.name, line)

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SUMMARIES:
        terminalreporter.section("reliability summaries")
        for line in SUMMARIES:
            terminalreporter.write_line(line)

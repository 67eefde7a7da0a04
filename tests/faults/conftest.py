"""Fault figures: each fault's one line (time to recover, writes, flaps) is printed when it is
measured and repeated in the terminal summary, whatever pytest's capture mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

SUMMARIES: list[str] = []


@pytest.fixture
def fault_summary(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """`fault_summary(line)`: print `line` now and again in the terminal summary."""

    def record(line: str) -> None:
        print(line)
        SUMMARIES.append(f"{request.node.name}: {line}")

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SUMMARIES:
        terminalreporter.section("fault figures")
        for line in SUMMARIES:
            terminalreporter.write_line(line)

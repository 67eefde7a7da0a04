"""Fault figures: each fault's one line (time to recover, writes, flaps) is printed when it is
measured and repeated in the terminal summary, whatever pytest's capture mode. The line travels
in the test's report (`user_properties`), so `make faults`' xdist workers hand it to the process
that writes the summary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

FIGURES = "fault figures"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "scale: a fault at thousands of nodes, longer than `make faults` affords (make faults-scale)",
    )


@pytest.fixture
def fault_summary(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """`fault_summary(line)`: print `line` now and again in the terminal summary."""

    def record(line: str) -> None:
        print(line)
        request.node.user_properties.append((FIGURES, line))

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = []
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, ()):
            if getattr(report, "when", None) != "call":
                continue
            name = report.nodeid.rsplit("::", 1)[-1]
            lines += [f"{name}: {v}" for k, v in report.user_properties if k == FIGURES]
    if lines:
        terminalreporter.section(FIGURES)
        for line in lines:
            terminalreporter.write_line(line)

"""Shared test fixtures: paths to the example policy and the golden apiserver fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

# `apistub` (a running Kubernetes API stand-in) and `kube_client` fixtures for every test module.
pytest_plugins = ["tests.apistub_fixtures"]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
# Bodies captured from a real kube-apiserver v1.36.2 (tests/fixtures/README.md), kept in the
# repository so that `make test` runs on a bare clone.
FIXTURES = ROOT / "tests" / "fixtures"


def load_fixture(relative: str) -> Any:
    return json.loads((FIXTURES / relative).read_text())


@pytest.fixture
def example_policy_text() -> str:
    return EXAMPLE_POLICY.read_text()

"""The `steer` command end to end, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import EXAMPLE_POLICY


def steer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steer.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    result = steer("version")
    assert result.returncode == 0
    assert result.stdout.startswith("kube-steer ")


def test_validate_example_policy_exits_0() -> None:
    result = steer("policy", "validate", str(EXAMPLE_POLICY))
    assert result.returncode == 0, result.stderr
    assert "valid policy gpu-cluster@" in result.stdout
    assert "6 dimensions, 2 taint rules, 2 tenants" in result.stdout


def test_validate_lists_every_mistake_and_exits_1(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["tenants"][1]["overcommitPercent"] = 150
    doc["spec"]["scoring"]["hysteresis"] = -1
    doc["spec"]["dimensions"][0]["wieght"] = 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    result = steer("policy", "validate", str(bad))
    assert result.returncode == 1
    assert "invalid policy (3 problems)" in result.stderr
    assert "spec.tenants[1].overcommitPercent: must be between 0 and 100, got 150" in result.stderr
    assert "spec.scoring.hysteresis: must be between 0 and 49, got -1" in result.stderr
    assert "spec.dimensions[0].wieght: unknown field" in result.stderr

    as_json = steer("policy", "validate", "--output", "json", str(bad))
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["valid"] is False
    assert {
        "path": "spec.tenants[1].overcommitPercent",
        "message": "must be between 0 and 100, got 150",
    } in report["errors"]


def test_validate_missing_file(tmp_path: Path) -> None:
    result = steer("policy", "validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 1
    assert (
        "cannot read policy file" in result.stderr and "No such file or directory" in result.stderr
    )


def test_help_explains_commands() -> None:
    result = steer("--help")
    assert result.returncode == 0
    assert "policy" in result.stdout and "version" in result.stdout
    sub = steer("policy", "validate", "--help")
    assert "report format" in sub.stdout and "SteeringPolicy" in sub.stdout

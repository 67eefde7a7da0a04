"""The presets agree with the example policy, and the self-contained demo runs end to end."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from scorer.presets import POWER_KEPLER_07, demo_policy
from steer.adapters.policy_file import load_policy_file
from steer.cli import main
from tests.conftest import EXAMPLE_POLICY


def test_demo_runs_the_example_policy() -> None:
    example = load_policy_file(str(EXAMPLE_POLICY)).doc
    demo = demo_policy("http://127.0.0.1:1234", interval_seconds=5).doc
    assert demo.spec.dimensions == example.spec.dimensions
    assert demo.spec.taints == example.spec.taints and demo.spec.tenants == example.spec.tenants
    assert demo.spec.prometheus.url == "http://127.0.0.1:1234"
    assert demo.spec.scoring.interval_seconds == 5 and demo.metadata.name == "demo"
    assert POWER_KEPLER_07.strip() in EXAMPLE_POLICY.read_text()


def test_demo_once_runs_with_no_external_services(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the demo makes its folders
    assert main(["scorer", "once", "--demo", "--dry-run", "--output", "json"]) == 0
    assert list(tmp_path.iterdir()) == []  # policy, kubeconfig, Prometheus data: all removed
    body = json.loads(capsys.readouterr().out)
    assert body["queries"] == 6 and body["dryRun"] is True
    assert all(d["ok"] and d["nodes"] == 6 for d in body["dimensions"])
    rows = {n["node"]: n for n in body["nodes"]}
    assert rows["node-3"]["taints"] == ["kube-steer.github.io/gpu-hot=true:PreferNoSchedule"]  # 95 % busy
    assert rows["node-6"]["taints"] == ["kube-steer.github.io/unhealthy=true:NoSchedule"]  # failing probe
    assert rows["node-4"]["labels"]["kube-steer.github.io/overcommit-pct"] == "10"  # 70 of 64 cores
    assert rows["node-5"]["labels"]["kube-steer.github.io/score"] == "100"

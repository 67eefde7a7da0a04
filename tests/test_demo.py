"""The demo policy agrees with the example policy, and the self-contained demo (`kits.demo`)
runs end to end."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from kits.demo import demo_policy, main
from scorer.presets import POWER_KEPLER_07
from steer.adapters.policy_file import load_policy_file
from tests.conftest import EXAMPLE_POLICY

PREFIX = "kube-steer.github.io/"
# Names the scorer wrote before scores were named as scores: none may come back.
LEGACY_SCORE_NAMES = {"gpu-util", "gpu-free", "gpu-frag", "power", "health", "score-gpu"}


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
    assert main(["scorer", "once", "--dry-run", "--output", "json"]) == 0
    assert list(tmp_path.iterdir()) == []  # policy, kubeconfig, Prometheus data: all removed
    body = json.loads(capsys.readouterr().out)
    assert body["queries"] == 6 and body["dryRun"] is True
    assert all(d["ok"] and d["nodes"] == 6 for d in body["dimensions"])
    rows = {n["node"]: n for n in body["nodes"]}
    assert rows["node-3"]["taints"] == [
        "kube-steer.github.io/gpu-hot=true:PreferNoSchedule"
    ]  # 95 % busy
    assert rows["node-6"]["taints"] == [
        "kube-steer.github.io/unhealthy=true:NoSchedule"
    ]  # failing probe
    assert rows["node-4"]["labels"]["kube-steer.github.io/overcommit-pct"] == "10"  # 70 of 64 cores
    assert rows["node-5"]["labels"]["kube-steer.github.io/score"] == "100"
    # The labels read right: node-3's GPUs are 95 % busy, so its GPU score is low, and its
    # raw reading says so in its own unit; the watts are the node's real draw.
    node3 = rows["node-3"]
    assert node3["raw"]["gpu-util"] == 95.0
    assert node3["labels"]["kube-steer.github.io/score-gpu-util"] == "10"
    # The exporter draws 650 W. The demo's Prometheus is seconds old: the example's query must
    # read the real draw from a young series (rate() over 5m read 1.2 W for 310 W here).
    assert 640 <= node3["raw"]["power"] <= 660
    assert node3["labels"]["kube-steer.github.io/score-power"] == "0"  # the hungriest node
    assert not [k for k in node3["labels"] if k.removeprefix(PREFIX) in LEGACY_SCORE_NAMES]


def test_demo_table_gives_units_and_says_what_the_labels_mean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["scorer", "once", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split("  ") for line in lines if line.startswith("NODE  "))
    assert [c.strip() for c in header if c.strip()] == [
        "NODE",
        "gpu-util [pct]",
        "gpu-free [gpus]",
        "gpu-frag [ratio]",
        "power [watts]",
        "overcommit-pct [pct]",
        "health [ratio]",
    ]
    assert f"labels under {PREFIX} (shown without it):" in lines
    assert (
        "  score-<dimension>, score, score-class-<class>: 0..100, higher is better for placement"
        in lines
    )
    hot = next(line for line in lines if line.startswith("node-3 ") and "score-" in line)
    assert "score-gpu-util=10" in hot and "gpu-hot=true" in hot

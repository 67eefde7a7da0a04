"""The presets agree with the example policy, and the self-contained demo runs end to end."""

from __future__ import annotations

import json

import pytest

from scorer.presets import demo_policy
from steer.adapters.policy_file import load_policy_file
from steer.cli import main
from tests.conftest import EXAMPLE_POLICY


def test_presets_are_the_example_policys_dimensions() -> None:
    example = {d.name: d for d in load_policy_file(str(EXAMPLE_POLICY)).spec.dimensions}
    demo = {d.name: d for d in demo_policy().spec.dimensions}
    assert set(demo) == set(example)
    for name, dim in demo.items():
        if name == "health":  # the synthetic probes carry no job="node-health"
            assert dim.query == example[name].query.replace('{job="node-health"}', "")
            continue
        assert dim == example[name]


def test_demo_once_runs_with_no_external_services(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scorer", "once", "--demo", "--dry-run", "--output", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["queries"] == 6 and body["dryRun"] is True
    assert all(d["ok"] and d["nodes"] == 6 for d in body["dimensions"])
    rows = {n["node"]: n for n in body["nodes"]}
    assert rows["node-3"]["taints"] == ["steer.io/gpu-hot=true:PreferNoSchedule"]  # 95 % busy
    assert rows["node-6"]["taints"] == ["steer.io/unhealthy=true:NoSchedule"]  # failing probe
    assert rows["node-4"]["labels"]["steer.io/overcommit-pct"] == "10"  # 70 of 64 cores
    assert rows["node-5"]["labels"]["steer.io/score"] == "100"

"""Upgrading from the release that wrote scores under their bare dimension names, under
`steer.io/`: the first cycle of this scorer takes every old key off the node and writes the
new contract, and leaves what is not ours exactly as it was.

The nodes in `fixtures/nodes/written-by-0.1.0.json` are what release 0.1.0's scorer wrote on
the demo cluster (two writing cycles, read back from the API stand-in): scores as
`steer.io/gpu-util`, `steer.io/score-gpu`, `steer.io/reserved-gpu`, its `steer.io/managed`
record and `steer.io/observed-at` times, and the `steer.io/gpu-hot` taint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kits.demo.environment import demo_environment
from scorer.cycle.service import Scorer
from scorer.serve import node_api
from steer.adapters.policy_file import load_policy_file

OLD = json.loads((Path(__file__).parent / "fixtures/nodes/written-by-0.1.0.json").read_text())
OLD_PREFIX = "steer.io/"
NEW_PREFIX = "kube-steer.github.io/"


def _ours(obj: dict[str, Any], prefix: str) -> dict[str, list[str]]:
    meta, spec = obj["metadata"], obj["spec"]
    return {
        "labels": sorted(k for k in meta.get("labels", {}) if k.startswith(prefix)),
        "annotations": sorted(k for k in meta.get("annotations", {}) if k.startswith(prefix)),
        "taints": sorted(t["key"] for t in spec.get("taints", []) if t["key"].startswith(prefix)),
    }


def _foreign(obj: dict[str, Any]) -> tuple[dict[str, str], dict[str, str], list[Any]]:
    meta, ours = obj["metadata"], (OLD_PREFIX, NEW_PREFIX)
    return (
        {k: v for k, v in meta.get("labels", {}).items() if not k.startswith(ours)},
        {k: v for k, v in meta.get("annotations", {}).items() if not k.startswith(ours)},
        [t for t in obj["spec"].get("taints", []) if not t["key"].startswith(ours)],
    )


def test_the_first_cycle_after_an_upgrade_replaces_the_old_keys() -> None:
    assert _ours(OLD["node-3"], OLD_PREFIX)["labels"] == [
        "steer.io/gpu-frag",
        "steer.io/gpu-free",
        "steer.io/gpu-hot",
        "steer.io/gpu-util",
        "steer.io/health",
        "steer.io/overcommit-pct",
        "steer.io/power",
        "steer.io/score",
        "steer.io/score-gpu",
    ]
    with demo_environment() as env:
        for name, old in OLD.items():

            def as_written(node: dict[str, Any], old: dict[str, Any] = old) -> dict[str, Any]:
                for part in ("labels", "annotations"):
                    node["metadata"][part] = dict(old["metadata"].get(part, {}))
                node["spec"]["taints"] = list(old["spec"].get("taints", []))
                return node

            env.stub.modify("nodes", name, as_written)
        policy = load_policy_file(str(env.policy_file))
        assert policy.spec.label_prefix == NEW_PREFIX
        scorer = Scorer(
            lambda: policy, node_api(str(env.kubeconfig)), prometheus_url=env.prometheus_url
        )
        try:
            scorer.run_cycle()
            after = {name: env.stub.get("nodes", name) for name in OLD}
        finally:
            scorer.close()

    for name, old in OLD.items():
        node = after[name]
        assert _ours(node, OLD_PREFIX) == {"labels": [], "annotations": [], "taints": []}, name
        assert _foreign(node) == _foreign(old), name  # byte for byte, whatever is not ours
    hot = after["node-3"]
    labels = hot["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith(NEW_PREFIX)} == {
        NEW_PREFIX + "gpu-hot": "true",
        NEW_PREFIX + "overcommit-pct": "0",
        # core-power, the slope of watts over usage in the demo's hour of history, is the
        # PER_CORE_W of kits/demo: 5, 6, 7, 2, 9, 4 W per busy core, so node-3 scores
        # (9 - 7) / (9 - 2) = 29 -> 30 (min-max, lower is better).
        # (2 x core-power 29 + 1 x idle-power 0 + 2 x health 100 + 1 x active 0) / 6 = 43:
        # its cores cost more than most, it idles the highest, and it runs no movable pod.
        NEW_PREFIX + "score": "40",
        NEW_PREFIX + "score-class-gpu": "40",
        NEW_PREFIX + "score-core-power": "30",
        NEW_PREFIX + "score-idle-power": "0",
        NEW_PREFIX + "score-gpu-frag": "100",
        NEW_PREFIX + "score-gpu-free": "100",
        NEW_PREFIX + "score-gpu-util": "10",
        NEW_PREFIX + "score-health": "100",
        NEW_PREFIX + "score-power": "0",
    }
    # The taint moved to the new key in the same write: the node was never without it.
    assert [t["key"] for t in hot["spec"]["taints"]] == [NEW_PREFIX + "gpu-hot"]
    record = json.loads(hot["metadata"]["annotations"][NEW_PREFIX + "managed"])
    assert record["taints"] == [NEW_PREFIX + "gpu-hot"]
    assert sorted(record["labels"]) == sorted(k for k in labels if k.startswith(NEW_PREFIX))
    assert after["node-1"]["metadata"]["labels"][NEW_PREFIX + "reserved-for-gpu"] == "true"

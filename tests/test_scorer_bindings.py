"""Anti-herding: pods bound in the last window lower their node's composite between cycles."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kubernetes import client

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.synthetic_exporter import SyntheticCluster
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from scorer.watch.bindings import BindingWindow, PodBindingWatcher, binding_time
from steer.adapters.kubejson import KubeJson
from steer.core.policy import parse_policy
from tests.scorer_support import SMALL_POLICY, backfilled_prometheus

POLICY = parse_policy(SMALL_POLICY)


def test_binding_window_counts_each_recent_pod_once() -> None:
    now = [1000.0]
    window = BindingWindow(clock=lambda: now[0])
    assert window.record("a", uid="p1")
    assert not window.record("a", uid="p1")  # the same pod seen again (MODIFIED)
    window.record("a", at=950.0, uid="p2")
    window.record("b", at=900.0, uid="p3")  # older than the window
    assert window.counts(60) == {"a": 2}
    now[0] = 1100.0
    assert window.counts(60) == {}
    assert window.generation == 3


def test_binding_time_is_the_pod_scheduled_transition() -> None:
    pod = {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2027-01-15T08:00:00Z",
                }
            ]
        }
    }
    assert binding_time(pod) == 1_800_000_000.0
    assert binding_time({"status": {}}) is None


def test_bound_pods_lower_the_composite_before_the_next_cycle(
    apistub: ApiStub, kube_client: client.ApiClient, tmp_path: Path
) -> None:
    cluster = SyntheticCluster(nodes=2, gpus_per_node=2)
    for name in cluster.node_names:
        cluster.set_gpu_util(name, 10)
        apistub.add_node(synthetic_node(name, gpus=2))
    bindings = BindingWindow()
    arrived = threading.Event()
    watcher = PodBindingWatcher(
        kube_client, bindings, window_s=lambda: 60.0, on_binding=arrived.set, timeout_s=5
    )
    kube = KubeJson(kube_client)
    with backfilled_prometheus(cluster) as prom:
        scorer = Scorer(lambda: POLICY, NodeApi(kube), prometheus_url=prom.url, bindings=bindings)
        scorer.run_cycle()
        # (3 * util score 90 + power 50, the same on both nodes) / 4 = 80
        assert (
            apistub.get("nodes", "node-1")["metadata"]["labels"]["kube-steer.github.io/score"]
            == "80"
        )
        assert scorer.refresh_hot() is None  # nothing bound yet
        watcher.start()
        try:
            for i in range(4):
                name = f"burst-{i}"
                apistub.create(
                    "pods",
                    {
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"containers": [{"name": "c", "image": "x"}]},
                    },
                )
                kube.request(
                    "POST",
                    f"/api/v1/namespaces/default/pods/{name}/binding",
                    body={
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": name},
                        "target": {"kind": "Node", "name": "node-1"},
                    },
                )
            deadline = time.monotonic() + 10
            while bindings.counts(60).get("node-1", 0) < 4 and time.monotonic() < deadline:
                arrived.wait(0.1)
        finally:
            watcher.stop()
        assert bindings.counts(60) == {"node-1": 4}
        result = scorer.refresh_hot()
    assert result is not None and result.queries == 0
    node1 = apistub.get("nodes", "node-1")["metadata"]["labels"]
    assert node1["kube-steer.github.io/score"] == "60"  # 80 - 4 pods * 5 points
    assert node1["kube-steer.github.io/score-util"] == "90"  # the measurement itself is unchanged
    assert (
        apistub.get("nodes", "node-2")["metadata"]["labels"]["kube-steer.github.io/score"] == "80"
    )
    assert result.plan.node("node-1").hot_pods == 4  # type: ignore[union-attr]

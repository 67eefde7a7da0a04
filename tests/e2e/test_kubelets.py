"""Real kubelets in the kit (kits/hollow_nodes.py): kubemark hollow nodes against the
session control plane. A pod on one runs; a kubelet restart admits every bound pod again
against the node as it is *now*, which fake Node objects cannot show.

The product moves labels and advertised resources under running pods, so these tests record
what a restart does with them, the resource cases side by side:

    resource on the node         request  after the change        after a kubelet restart
    example.com/foo 1000         600      patched to 100          Failed OutOfexample.com/foo
    example.com/foo 1000         600      removed from status     Running (the kubelet drops
                                                                  requests of extended
                                                                  resources the node lacks)
    pools....kubernetes.io/cpu   600      patched to 100          Failed OutOf<name>
    pools....kubernetes.io/cpu   600      removed from status     Failed OutOf<name>
                                                                  (a native name is not dropped)

The restart scenarios share one experiment (`restarted`): their nodes start, restart and settle
side by side, since a rejected pod shows `Failed` only ~10 s after its kubelet restarts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.hollow_nodes import (
    ZONE,
    HollowNode,
    PodState,
    pod_state,
    restart_all,
    rolling_restart,
    start_all,
    wait_pods_phase,
    wait_pods_running,
)
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeJson
from tests.e2e.conftest import node_name
from tests.e2e.waiting import NOT_YET

FOO = "example.com/foo"  # an extended resource: requests need an equal limit
NATIVE = "pools.kube-steer.kubernetes.io/cpu"  # "kubernetes.io/" in the name: native, no limit
POOL = "steer.test/pool"
# The kubelet writes the Node's status on a change or every 5 minutes; its heartbeat is the Lease.
STATUS_WATCH_S = 15.0


def pod_body(
    name: str,
    node: str,
    *,
    requests: Mapping[str, str] | None = None,
    pool: str | None = None,
    token: bool = False,
) -> dict[str, Any]:
    """A pod bound straight to `node` (no scheduler: the kubelet alone decides). Without the
    service-account token volume it runs in ~0.2 s instead of ~4 s."""
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
        # An extended resource cannot be overcommitted: its limit must equal its request.
        limits = {k: v for k, v in requests.items() if "kubernetes.io/" not in k}
        if limits:
            resources["limits"] = limits
    spec: dict[str, Any] = {
        "nodeName": node,
        "automountServiceAccountToken": token,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "registry.example/app:1", "resources": resources}],
    }
    if pool:
        term = {"matchExpressions": [{"key": POOL, "operator": "In", "values": [pool]}]}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    return {"metadata": {"name": name}, "spec": spec}


def create_pods(plane: ControlPlane, namespace: str, bodies: list[dict[str, Any]]) -> list[str]:
    api = KubeJson(plane.api_client())
    for body in bodies:
        api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)
    return [b["metadata"]["name"] for b in bodies]


# -- one restart experiment, several scenarios ----------------------------------------------------


@dataclass
class Scenario:
    """One hollow node with one pod, a change made while the pod runs, then a kubelet restart."""

    node: HollowNode
    pod: dict[str, Any]
    advertised: Mapping[str, str]  # patched into status before the pod is created
    change: Callable[[HollowNode], object]
    # What the experiment saw: the pod before and after the restart (once the new kubelet
    # settled), the Node just before, just after and STATUS_WATCH_S after the restart.
    running: PodState = field(default_factory=lambda: PodState(""))
    after: PodState = field(default_factory=lambda: PodState(""))
    node_before_restart: dict[str, Any] = field(default_factory=dict)
    node_after_restart: dict[str, Any] = field(default_factory=dict)
    node_later: dict[str, Any] = field(default_factory=dict)
    restarted_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def pod_name(self) -> str:
        return str(self.pod["metadata"]["name"])


@pytest.fixture(scope="module")
def restarted(control_plane: ControlPlane) -> Iterator[dict[str, Scenario]]:
    plane = control_plane
    namespace = f"kubelets-{uuid.uuid4().hex[:6]}"
    plane.ensure_namespace(namespace)

    def scenario(
        role: str,
        change: Callable[[HollowNode], object],
        *,
        requests: Mapping[str, str] | None = None,
        advertised: Mapping[str, str] | None = None,
        pool: str | None = None,
        **node: Any,
    ) -> Scenario:
        hollow_node = HollowNode(plane, node_name(role), **node)
        pod = pod_body(role, hollow_node.name, requests=requests, pool=pool)
        return Scenario(hollow_node, pod, advertised or {}, change)

    scenarios = {
        # The pod's term no longer matches; the zone label moves too (the kubelet owns it).
        "affinity": scenario(
            "affinity",
            lambda n: n.label({POOL: "b", ZONE: "zone-b"}),
            pool="a",
            zone="zone-a",
            labels={POOL: "a"},
        ),
        "foo-shrunk": scenario(
            "foo-shrunk",
            lambda n: n.advertise({FOO: "100"}),
            requests={FOO: "600"},
            advertised={FOO: "1000"},
        ),
        "foo-removed": scenario(
            "foo-removed",
            lambda n: n.advertise({FOO: None}),
            requests={FOO: "600"},
            advertised={FOO: "1000"},
        ),
        "native-kept": scenario(
            "native-kept",
            lambda n: None,
            requests={NATIVE: "600"},
            advertised={NATIVE: "1000"},
        ),
        "native-shrunk": scenario(
            "native-shrunk",
            lambda n: n.advertise({NATIVE: "100"}),
            requests={NATIVE: "600"},
            advertised={NATIVE: "1000"},
        ),
        "native-removed": scenario(
            "native-removed",
            lambda n: n.advertise({NATIVE: None}),
            requests={NATIVE: "600"},
            advertised={NATIVE: "1000"},
        ),
    }
    try:
        start_all(s.node for s in scenarios.values())
        for s in scenarios.values():
            if s.advertised:
                s.node.advertise(s.advertised)
        create_pods(plane, namespace, [s.pod for s in scenarios.values()])
        running = wait_pods_running(plane, namespace, [s.pod_name for s in scenarios.values()])
        for s in scenarios.values():
            s.running = running[s.pod_name]
            s.change(s.node)
            s.node_before_restart = s.node.read()
        began = time.monotonic()
        restarted_at = datetime.now(UTC)
        restart_all(s.node for s in scenarios.values())
        for s in scenarios.values():
            s.restarted_at = restarted_at
            s.after = pod_state(plane, namespace, s.pod_name)
            s.node_after_restart = s.node.read()
        time.sleep(max(0.0, STATUS_WATCH_S - (time.monotonic() - began)))
        for s in scenarios.values():
            s.node_later = s.node.read()
        yield scenarios
    finally:
        for s in scenarios.values():
            s.node.delete()
        plane.delete_pods(namespace)
        KubeJson(plane.api_client()).request("DELETE", f"/api/v1/namespaces/{namespace}")


def rejected(state: PodState, reason: str) -> bool:
    return (
        state.phase == "Failed"
        and state.reason == reason
        and state.message.startswith("Pod was rejected:")
    )


def test_restart_rejects_a_pod_whose_required_node_affinity_no_longer_matches(
    restarted: dict[str, Scenario],
) -> None:
    s = restarted["affinity"]
    assert s.running.phase == "Running"
    assert rejected(s.after, "NodeAffinity"), s.after
    labels = s.node_after_restart["metadata"]["labels"]
    # The kubelet puts back the well-known labels it registers with, and no others.
    assert labels[ZONE] == "zone-a"
    assert labels[POOL] == "b"


def test_restart_rejects_a_pod_whose_extended_resource_shrank(
    restarted: dict[str, Scenario],
) -> None:
    s = restarted["foo-shrunk"]
    assert s.running.phase == "Running"
    assert rejected(s.after, f"OutOf{FOO}"), s.after
    assert "requested: 600, used: 0, capacity: 100" in s.after.message


def test_restart_keeps_a_pod_whose_extended_resource_the_node_no_longer_advertises(
    restarted: dict[str, Scenario],
) -> None:
    """The kubelet ignores requests of extended resources the node does not list at all
    (removeMissingExtendedResources), so removing one is no eviction."""
    s = restarted["foo-removed"]
    assert s.after.phase == "Running" and s.after.ready, s.after
    assert FOO not in s.node_after_restart["status"]["allocatable"]


def test_prefixed_native_resource_runs_and_survives_the_kubelets_status_writes(
    restarted: dict[str, Scenario],
) -> None:
    s = restarted["native-kept"]
    # (a) requested without a limit, it runs where the node advertises enough.
    assert s.running.phase == "Running"
    assert s.after.phase == "Running" and s.after.ready, s.after
    # (b) the restarted kubelet rewrote the Node's status (new heartbeat) and kept the
    # resource it does not own, in capacity and allocatable; nor did it drop it later.
    # The node as the restarted kubelet first wrote it: on a loaded machine that write can
    # come after the pod's verdict and the first read.
    seen = s.node_before_restart["metadata"]["resourceVersion"]
    after = wait_until(
        "the restarted kubelet writes its node",
        lambda: node if (node := s.node.read())["metadata"]["resourceVersion"] != seen else None,
        timeout=120,
        ignoring=NOT_YET,
    )
    for node in (after, s.node_later):
        assert node["status"]["capacity"][NATIVE] == "1k"
        assert node["status"]["allocatable"][NATIVE] == "1k"
    heartbeat = next(
        c["lastHeartbeatTime"] for c in after["status"]["conditions"] if c["type"] == "Ready"
    )
    assert datetime.fromisoformat(heartbeat) >= s.restarted_at.replace(microsecond=0)


def test_prefixed_native_resource_shrunk_or_removed_rejects_the_pod_at_restart(
    restarted: dict[str, Scenario],
) -> None:
    """(c) shrunk below the request, and (d) removed from the status altogether: unlike an
    extended resource, a native name is never dropped from the request, so a node that no
    longer lists it has capacity 0 for it."""
    shrunk, removed = restarted["native-shrunk"], restarted["native-removed"]
    assert rejected(shrunk.after, f"OutOf{NATIVE}"), shrunk.after
    assert "capacity: 100" in shrunk.after.message
    assert rejected(removed.after, f"OutOf{NATIVE}"), removed.after
    assert "capacity: 0" in removed.after.message


# -- single nodes ---------------------------------------------------------------------------------


def test_a_scheduled_pod_runs_on_a_hollow_node(
    control_plane: ControlPlane,
    make_namespace: Callable[..., str],
    hollow: Callable[..., HollowNode],
) -> None:
    taint = {"key": "steer.test/dedicated", "value": "kubelets", "effect": "NoSchedule"}
    node = hollow(
        "run",
        zone="zone-a",
        labels={"steer.test/role": "gpu"},
        taints=[taint],
        extended_resources={"nvidia.com/gpu": 8},
        max_pods=20,
    ).start()
    registered = node.read()
    assert registered["metadata"]["labels"][ZONE] == "zone-a"
    assert registered["metadata"]["labels"]["steer.test/role"] == "gpu"
    assert registered["spec"]["taints"] == [taint]
    assert registered["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert registered["status"]["allocatable"]["pods"] == "20"
    namespace = make_namespace(prefix="kubelets")
    body = pod_body("gpu", node.name, requests={"nvidia.com/gpu": "1"}, token=True)
    del body["spec"]["nodeName"]  # the real scheduler places it
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node.name}
    body["spec"]["tolerations"] = [{"key": taint["key"], "operator": "Exists"}]
    create_pods(control_plane, namespace, [body])
    state = wait_pods_running(control_plane, namespace, ["gpu"])["gpu"]
    assert state.node == node.name and state.ready
    usage = node.usage()
    assert 0 < usage.rss_bytes < 300 * 2**20, usage


def test_kubelet_admission_of_resources_the_node_does_not_advertise(
    control_plane: ControlPlane,
    make_namespace: Callable[..., str],
    hollow: Callable[..., HollowNode],
) -> None:
    """Bound straight to a node that lists neither: the extended request is dropped and the pod
    runs; the native-prefixed one is rejected at once."""
    node = hollow("absent").start()
    namespace = make_namespace(prefix="kubelets")
    create_pods(
        control_plane,
        namespace,
        [
            pod_body("foo", node.name, requests={FOO: "600"}),
            pod_body("native", node.name, requests={NATIVE: "600"}),
        ],
    )
    assert wait_pods_running(control_plane, namespace, ["foo"])["foo"].ready
    # Rejected at once, shown Failed ~10 s later (see HollowNode.restart).
    state = wait_pods_phase(control_plane, namespace, ["native"], "Failed")["native"]
    assert rejected(state, f"OutOf{NATIVE}"), state
    assert "capacity: 0" in state.message


def test_a_rolling_restart_with_nothing_changed_leaves_pods_running(
    control_plane: ControlPlane,
    make_namespace: Callable[..., str],
    hollow: Callable[..., HollowNode],
) -> None:
    nodes = start_all([hollow("roll", labels={POOL: "a"}), hollow("roll", labels={POOL: "a"})])
    for node in nodes:
        node.advertise({FOO: "1000", NATIVE: "1000"})
    namespace = make_namespace(prefix="kubelets")
    bodies = [
        pod_body(f"{kind}-{i}", node.name, pool="a", requests=requests, token=kind == "token")
        for i, node in enumerate(nodes)
        for kind, requests in (
            ("plain", {}),
            ("token", {}),
            ("resources", {FOO: "600", NATIVE: "600"}),
        )
    ]
    names = create_pods(control_plane, namespace, bodies)
    wait_pods_running(control_plane, namespace, names)
    pids = [node.pid for node in nodes]
    rolling_restart(nodes)
    assert [node.pid for node in nodes] != pids
    after = {name: pod_state(control_plane, namespace, name) for name in names}
    assert all(s.phase == "Running" and s.ready for s in after.values()), after

"""GPUs through Dynamic Resource Allocation on the real kube-apiserver, kube-scheduler (steer
profiles) and kube-controller-manager v1.36.2, in a cluster that mixes DRA and device-plugin GPU
nodes (kits/dra.py: the `gpu.nvidia.com` DeviceClass mapping `nvidia.com/gpu`, one ResourceSlice
of 8 devices per DRA node).

The real webhook steers every pod of the opted-in namespaces with the example policy, whose
`gpu` pod class also names the DeviceClass; the real scorer runs in process on recorded
readings (the hot nodes' GPUs 95 % busy from outside Kubernetes) with the cluster's DRA
devices as its device source. GPU jobs come in the three forms a mixed cluster sees: a claim
template, a plain `nvidia.com/gpu` request (a DRA node serves it through a claim the
scheduler makes; a device-plugin node from its allocatable) and a whole-node claim template.
Then: no GPU job on a hot node, the one-GPU jobs packed so that the whole-node jobs find
whole nodes and bind, CPU pods off the cool GPU nodes while CPU nodes have room, and the DRA
inventory (free, allocated, whole nodes, fragmentation, per node) equal to what the
scheduler allocated, as kits.dra reads the claims.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.dra import API as DRA_API
from kits.dra import DEVICE_CLASS, DraKit, claim_pod_spec, pod_devices
from kits.service_processes import register_admission, running_webhook, unregister_admission
from kits.waiting import WaitTimeout, wait_until
from steer.adapters.dra import DraStore
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.core.policy import parse_policy
from tests.e2e.test_real_kubelets import InProcessScorer, Observations
from tests.e2e.test_scheduler import wait_bound
from tests.e2e.waiting import NOT_YET

from .conftest import ROOT

EXAMPLE = ROOT / "examples" / "policy.yaml"
GPU = "nvidia.com/gpu"
OPT_IN = "kube-steer.github.io/enabled"
PREFIX = "kube-steer.github.io/"
GPU_HOT = f"{PREFIX}gpu-hot"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"


def pod(name: str, cpu: str, memory: str, *, gpus: int = 0, template: str | None = None) -> Any:
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu, "memory": memory},
    }
    if gpus:
        resources["requests"][GPU] = resources["limits"][GPU] = str(gpus)
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.example/app:1", "resources": resources}],
    }
    if template is not None:
        spec = claim_pod_spec(spec, template)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def webhook(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Path]:
    """The webhook registered for the policy; yields the policy file."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(EXAMPLE.read_text())
    with running_webhook(control_plane, policy_file, tmp_path) as hook:
        register_admission(control_plane, hook)
        try:
            yield policy_file
        finally:
            unregister_admission(control_plane)


@pytest.fixture
def dra(admin: KubeJson) -> Iterator[DraKit]:
    """The DRA kit; its DeviceClass and ResourceSlices go at teardown."""
    kit = DraKit(admin)
    kit.ensure_device_class()
    yield kit
    kit.delete_slices()
    with contextlib.suppress(Exception):
        admin.request("DELETE", f"{DRA_API}/deviceclasses/{DEVICE_CLASS}")


@contextlib.contextmanager
def stopping(store: DraStore) -> Iterator[None]:
    try:
        yield
    finally:
        store.stop()


def test_dra_and_device_plugin_gpus_are_steered_alike(
    control_plane: ControlPlane,
    make_node: Any,
    make_namespace: Any,
    admin: KubeJson,
    scorer_user: Path,
    webhook: Path,
    dra: DraKit,
) -> None:
    set_id = uuid.uuid4().hex[:5]
    shorts = ("dra-1", "dra-2", "dra-3", "dra-hot", "dp-1", "dp-hot", "cpu-1", "cpu-2")
    name = {short: f"dra-{set_id}-{short}" for short in shorts}
    dra_nodes = [name[s] for s in ("dra-1", "dra-2", "dra-3", "dra-hot")]
    plugin_nodes = [name["dp-1"], name["dp-hot"]]
    gpu_nodes = dra_nodes + plugin_nodes
    hot = {name["dra-hot"], name["dp-hot"]}
    cpu_nodes = [name["cpu-1"], name["cpu-2"]]
    for node in dra_nodes:
        make_node(node, cpu="64", memory="512Gi", labels={INSTANCE_TYPE: "gpu-8x"})
        dra.publish_gpus(node)
    for node in plugin_nodes:
        make_node(node, cpu="64", memory="512Gi", gpus=8, labels={INSTANCE_TYPE: "gpu-8x"})
    for node in cpu_nodes:
        make_node(node, cpu="16", memory="64Gi", labels={INSTANCE_TYPE: "cpu-16"})
    team_a = make_namespace({"tenant": "dept-a", OPT_IN: "true"}, prefix="team-a")
    team_b = make_namespace({"tenant": "dept-b", OPT_IN: "true"}, prefix="team-b")
    dra.ensure_claim_template(team_a, "one-gpu", 1)
    dra.ensure_claim_template(team_b, "eight-gpus", 8)

    observations = Observations()
    observations.values = {
        "gpu-util": {n: 95.0 if n in hot else 0.0 for n in gpu_nodes},
        "gpu-free": {n: 0.0 if n in hot else 8.0 for n in gpu_nodes},
        "gpu-frag": dict.fromkeys(gpu_nodes, 0.0),
        "power": dict.fromkeys(name.values(), 300.0),
        "idle-power": {n: 800.0 if n in gpu_nodes else 150.0 for n in name.values()},
        "health": dict.fromkeys(name.values(), 1.0),
        "overcommit-pct": {},  # under scheduler enforcement no budget reads it
    }
    scoring = InProcessScorer(scorer_user, parse_policy(EXAMPLE.read_text()), observations)
    # The scorer's own DRA watches, as `steer scorer serve` runs them, with the scorer's RBAC.
    store = DraStore(make_api_client(str(scorer_user)))
    store.start()
    assert store.wait_synced(30), store.status().message
    scoring.scorer.devices = store
    with scoring, stopping(store):
        scoring.cycle()
        scoring.cycle()  # gpu-hot: setAfterCycles 2
        for node in name.values():
            wait_until(
                f"the scorer's pools on {node}",
                lambda n=node: (  # type: ignore[misc]
                    f"{PREFIX}pool-cpu"
                    in admin.request("GET", f"/api/v1/nodes/{n}")["status"]["allocatable"]
                ),
                timeout=30,
                ignoring=NOT_YET,
            )
        tainted = {
            n
            for n in gpu_nodes
            if any(
                t["key"] == GPU_HOT
                for t in admin.request("GET", f"/api/v1/nodes/{n}")["spec"].get("taints") or ()
            )
        }
        assert tainted == hot, "gpu-hot must taint the hot DRA node as the device-plugin one"

        # One-GPU jobs in both DRA forms and a plain request, one after the other as a trace
        # brings them, then two whole-node jobs.
        pods_a = "/api/v1/namespaces/" + team_a + "/pods"
        ones = []
        for i in range(6):
            job = f"one-{i}"
            template = "one-gpu" if i % 2 == 0 else None
            body = pod(job, "2", "8Gi", gpus=0 if template else 1, template=template)
            admin.request("POST", pods_a, body=body)
            wait_bound(control_plane, team_a, [job], timeout=30)
            scoring.settle()
            ones.append(job)
        wholes = ["whole-0", "whole-1"]
        for job in wholes:
            body = pod(job, "8", "64Gi", template="eight-gpus")
            admin.request("POST", f"/api/v1/namespaces/{team_b}/pods", body=body)
        # CPU services: the two CPU nodes hold them all (12 of 32 cores).
        services = [f"svc-{i}" for i in range(6)]
        for svc in services:
            admin.request("POST", pods_a, body=pod(svc, "2", "4Gi"))
        placed_a = wait_bound(control_plane, team_a, [*ones, *services], timeout=30)
        placed_b = control_plane.wait_for_bindings(team_b, wholes, timeout=30)

        allocations = dra.allocations()
        held = pod_devices(allocations)
        for job in ones:  # a claim's devices are on the node its pod is bound to
            key = f"{team_a}/{job}"
            if key in held:
                assert held[key] == (placed_a[job], 1), (job, held[key], placed_a[job])
        for job, whole_node in placed_b.items():
            if whole_node:
                assert held.get(f"{team_b}/{job}") == (whole_node, 8), (job, held)
        # Three one-GPU templates and two whole-node ones; the scheduler's own claims for the
        # plain requests served by DRA devices.
        assert sum(1 for a in allocations if not a.extended) == 3 + 2
        plain_on_dra = sum(1 for j in ones[1::2] if placed_a[j] in dra_nodes)
        assert sum(1 for a in allocations if a.extended) == plain_on_dra

        # The goals, each checked and all reported together.
        unmet: list[str] = []
        gpu_jobs: dict[str, str | None] = {j: placed_a[j] for j in ones}
        gpu_jobs.update(placed_b)
        on_hot = {job: n for job, n in gpu_jobs.items() if n in hot}
        if on_hot:
            unmet.append(f"GPU jobs on hot nodes: {on_hot}")
        # Packed: the six one-GPU jobs take as few cool nodes as they need, so the two
        # whole-node jobs (which only a DRA node serves) find whole DRA nodes and bind.
        one_nodes = sorted({placed_a[j] for j in ones})
        if len(one_nodes) != math.ceil(len(ones) / 8):
            unmet.append(f"one-GPU jobs spread over {one_nodes}")
        if not all(placed_b.values()) or len(set(placed_b.values())) != len(wholes):
            unmet.append(f"whole-node jobs not each on a node of their own: {placed_b}")
        # CPU pods keep off the GPU nodes kept for GPU pods, DRA or device plugin, while the
        # CPU nodes have room. A hot GPU node is kept for no one (GPU jobs avoid it: reserving
        # it would waste it, scorer/cycle/plan/node.py), so a CPU pod there is not counted.
        cool = set(gpu_nodes) - hot
        off = {s: placed_a[s] for s in services if placed_a[s] in cool}
        if off:
            unmet.append(f"CPU pods on cool GPU nodes: {off}")

        # The DRA inventory the scorer reads agrees with the scheduler's allocations (once its
        # watch has seen the last claim's status).
        allocated = dict.fromkeys(dra_nodes, 0)
        for a in allocations:
            allocated[a.node] += len(a.devices)
        total = 8 * len(dra_nodes)
        free = total - sum(allocated.values())
        scattered = sum(8 - a for a in allocated.values() if a)
        expected = (
            total,
            total - free,
            free,
            sum(1 for a in allocated.values() if a == 0),
            round(scattered / free if free else 0.0, 6),
        )

        def seen_summary() -> tuple[int, int, int, int, float]:
            summary = scoring.scorer.inventory().summary(DEVICE_CLASS)
            return (
                summary.total,
                summary.allocated,
                summary.free,
                summary.whole_free_nodes,
                round(summary.fragmentation, 6),
            )

        with contextlib.suppress(WaitTimeout):
            wait_until("the scorer's inventory", lambda: seen_summary() == expected, timeout=10)
        seen = seen_summary()
        inventory = scoring.scorer.inventory()
        # The next cycle exports the same figures (steer_scorer_devices and friends).
        scoring.cycle()
        registry = scoring.scorer.metrics.registry
        exported = tuple(
            registry.get_sample_value(
                "steer_scorer_devices", {"device_class": DEVICE_CLASS, "state": state}
            )
            for state in ("total", "allocated", "free")
        )
        if exported != tuple(float(x) for x in expected[:3]):
            unmet.append(f"steer_scorer_devices {exported}, allocations say {expected[:3]}")
        if seen != expected:
            unmet.append(
                f"inventory summary (total, allocated, free, whole, fragmentation) {seen}, "
                f"allocations say {expected}"
            )
        for node in dra_nodes:
            devices = inventory.node(node)
            if devices is None:
                unmet.append(f"no DRA devices of {node} in the scorer's inventory")
                continue
            counts = devices.counts(DEVICE_CLASS)
            want = (8, allocated[node], 8 - allocated[node])
            if (counts.total, counts.allocated, counts.free) != want:
                unmet.append(f"{node}: inventory counts {counts}, allocations say {want}")
        placements = {**gpu_jobs, **{s: placed_a[s] for s in services}}
        schedulers = {
            j: admin.request("GET", f"/api/v1/namespaces/{ns}/pods/{j}")["spec"]["schedulerName"]
            for ns, jobs in ((team_a, ones), (team_b, wholes))
            for j in jobs
        }
        steer = {n: steer_marks(admin, n) for n in gpu_nodes}
        assert not unmet, "\n".join(
            [*unmet, f"placements: {placements}", f"schedulers: {schedulers}", f"nodes: {steer}"]
        )


def steer_marks(admin: KubeJson, node: str) -> dict[str, str]:
    """The steer labels and taints of a node, for a failure message."""
    stored = admin.request("GET", f"/api/v1/nodes/{node}")
    marks = {
        k.removeprefix(PREFIX): v
        for k, v in (stored["metadata"].get("labels") or {}).items()
        if k.startswith(PREFIX)
    }
    for taint in stored["spec"].get("taints") or ():
        marks[f"taint:{taint['key'].removeprefix(PREFIX)}"] = taint["effect"]
    return marks

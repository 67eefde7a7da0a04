"""DRA GPUs packed within a burst, on the real kube-apiserver, kube-scheduler (steer profiles)
and kube-controller-manager v1.36.2.

Seven 8-GPU nodes whose GPUs are DRA devices only (kits/dra.py: one ResourceSlice each, the
`gpu.nvidia.com` DeviceClass mapping `nvidia.com/gpu`), as a cluster has them mid-day: `a1`
to `a4` each run a four-GPU job from earlier (16 GPUs free in halves), `b` and `c` run CPU work
(24 and 16 cores of pods outside the steered namespaces), `e` is idle. Sixteen one-GPU jobs
then arrive at once, alternating a claim template of one device and a plain `nvidia.com/gpu: 1`
(which the scheduler serves from the DRA devices through a claim it makes itself), and after
them three whole-node jobs (a claim template of eight devices). The real webhook steers them
with the example policy, and the real scorer (in process, the cluster's DRA devices as its
device source) publishes the `gpu` class's device counter on each node
(steer/core/device_counter.py).

The sixteen fit in the free halves of `a1` to `a4`, which leaves `b`, `c` and `e` whole for
the three whole-node jobs. The v1.36.2 scheduler scores a DRA-backed extended resource on the
devices of its DeviceClass (NodeResourcesFit, `calculateDRAExtendedResourceAllocatableRequest`),
so the mapped form fills the halves; a claim it does not score at all, so without the counter
the claim form follows `steer-binpack`'s MostAllocated on cpu and memory to `b`, the node with
the most CPU work, and a whole-node job waits while eight GPUs sit in halves. With the counter,
which both forms request, MostAllocated counts the units the scheduler has just assumed on
each node (weight 5 beside cpu and memory at 1): the halves fill first and every whole-node job
binds. The test reports the GPUs per node and the counter each node carries, and checks that
every pod requested as many units as the devices it got.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kits.control_plane import ControlPlane
from kits.dra import DraKit, claim_pod_spec, pod_devices
from kits.waiting import wait_until
from steer.adapters.dra import DraStore
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.core.policy import parse_policy
from tests.e2e.test_dra import EXAMPLE, GPU, INSTANCE_TYPE, OPT_IN, PREFIX, dra, stopping, webhook
from tests.e2e.test_real_kubelets import InProcessScorer, Observations
from tests.e2e.test_scheduler import wait_bound
from tests.e2e.waiting import NOT_YET

__all__ = ["dra", "webhook"]  # the fixtures this module uses, from test_dra

COUNTER = f"{PREFIX}devices-gpu"
HALVES = ("a1", "a2", "a3", "a4")
ONES = 16
WHOLES = 3
# Cores of CPU work (pods of a namespace kube-steer does not steer) on the whole nodes.
CPU_WORK = {"b": 24, "c": 16, "e": 0}


def job(name: str, *, gpus: int = 0, template: str | None = None) -> dict[str, Any]:
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": "1", "memory": "4Gi"},
        "limits": {"cpu": "1", "memory": "4Gi"},
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


def one_gpu(name: str, i: int) -> dict[str, Any]:
    """The claim form for even `i`, the mapped `nvidia.com/gpu` form for odd."""
    claim = i % 2 == 0
    return job(name, gpus=0 if claim else 1, template="one-gpu" if claim else None)


def cpu_work(name: str, node: str, cores: int) -> dict[str, Any]:
    size = {"cpu": str(cores), "memory": f"{4 * cores}Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/app:1",
                    "resources": {"requests": size, "limits": size},
                }
            ],
        },
    }


@contextlib.contextmanager
def scorer_with_devices(scorer_user: Path, nodes: list[str]) -> Iterator[InProcessScorer]:
    observations = Observations()
    observations.values = {
        "gpu-util": dict.fromkeys(nodes, 0.0),
        "gpu-free": dict.fromkeys(nodes, 8.0),
        "gpu-frag": dict.fromkeys(nodes, 0.0),
        "power": dict.fromkeys(nodes, 300.0),
        "idle-power": dict.fromkeys(nodes, 800.0),
        "health": dict.fromkeys(nodes, 1.0),
        "overcommit-pct": {},
    }
    scoring = InProcessScorer(scorer_user, parse_policy(EXAMPLE.read_text()), observations)
    store = DraStore(make_api_client(str(scorer_user)))
    store.start()
    assert store.wait_synced(30), store.status().message
    scoring.scorer.devices = store
    with scoring, stopping(store):
        yield scoring


def test_a_burst_of_one_gpu_dra_jobs_fills_partly_used_nodes_first(
    control_plane: ControlPlane,
    make_node: Any,
    make_namespace: Any,
    admin: KubeJson,
    scorer_user: Path,
    webhook: Path,
    dra: DraKit,
) -> None:
    set_id = uuid.uuid4().hex[:5]
    node = {short: f"pack-{set_id}-{short}" for short in (*HALVES, *CPU_WORK)}
    nodes = list(node.values())
    team = make_namespace({"tenant": "dept-a", OPT_IN: "true"}, prefix="pack")
    other = make_namespace({}, prefix="cpu-work")
    dra.ensure_claim_template(team, "one-gpu", 1)
    dra.ensure_claim_template(team, "four-gpus", 4)
    dra.ensure_claim_template(team, "eight-gpus", 8)
    pods = f"/api/v1/namespaces/{team}/pods"

    def allocatable(name: str) -> dict[str, str]:
        found: dict[str, str] = admin.request("GET", f"/api/v1/nodes/{name}")["status"][
            "allocatable"
        ]
        return found

    def published(names: list[str]) -> None:
        for name in names:
            wait_until(
                f"the device counter on {name}",
                lambda n=name: allocatable(n).get(COUNTER) == "8",  # type: ignore[misc]
                timeout=30,
                ignoring=NOT_YET,
            )

    with scorer_with_devices(scorer_user, nodes) as scoring:
        # Earlier: a four-GPU job on each of a1..a4 (one per node: a required anti-affinity).
        for short in HALVES:
            make_node(node[short], cpu="64", memory="512Gi", labels={INSTANCE_TYPE: "gpu-8x"})
            dra.publish_gpus(node[short])
        scoring.cycle()
        published([node[s] for s in HALVES])
        earlier = [f"earlier-{i}" for i in range(len(HALVES))]
        for name in earlier:
            body = job(name, template="four-gpus")
            body["metadata"]["labels"] = {"role": "earlier"}
            body["spec"]["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"role": "earlier"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
            admin.request("POST", pods, body=body)
        wait_bound(control_plane, team, earlier, timeout=60)

        # The whole nodes, two with CPU work.
        for short, cores in CPU_WORK.items():
            make_node(node[short], cpu="64", memory="512Gi", labels={INSTANCE_TYPE: "gpu-8x"})
            dra.publish_gpus(node[short])
            if cores:
                body = cpu_work(f"work-{short}", node[short], cores)
                admin.request("POST", f"/api/v1/namespaces/{other}/pods", body=body)
        scoring.settle()
        scoring.cycle()
        scoring.cycle()
        published(nodes)

        # The burst: sixteen one-GPU jobs, the two forms alternating, created back to back.
        ones = [f"one-{i:02d}" for i in range(ONES)]
        started = time.monotonic()
        for i, name in enumerate(ones):
            admin.request("POST", pods, body=one_gpu(name, i))
        created_s = time.monotonic() - started
        placed = wait_bound(control_plane, team, ones, timeout=90)
        scoring.settle()

        wholes = [f"whole-{i}" for i in range(WHOLES)]
        for name in wholes:
            admin.request("POST", pods, body=job(name, template="eight-gpus"))
        bound = control_plane.wait_for_bindings(team, wholes, timeout=30)

        shorts = {full: short for short, full in node.items()}
        burst = {s: sum(1 for j in ones if shorts[placed[j]] == s) for s in node}
        held = pod_devices(dra.allocations(team))
        gpus = {
            s: sum(n for where, n in held.values() if where == full) for s, full in node.items()
        }
        counters = {shorts[n]: allocatable(n).get(COUNTER) for n in nodes}
        requested = {
            name: admin.request("GET", f"{pods}/{name}")["spec"]["containers"][0]["resources"]
            .get("requests", {})
            .get(COUNTER)
            for name in [*earlier, *ones, *wholes]
        }
        waiting = sorted(j for j, n in bound.items() if not n)
        report = (
            f"burst created in {created_s:.1f}s; burst jobs per node {burst}; GPUs allocated "
            f"per node {gpus}; whole-node jobs waiting {waiting}; counters {counters}; "
            f"counter units requested {sorted(set(requested.values()), key=str)}"
        )
        print(report)
        # Each pod requested as many units as devices it got: the claim form and the mapped
        # form alike (`nvidia.com/gpu` allocated through the scheduler's own claim).
        for name in earlier:
            assert requested[name] == "4", report
        for name in ones:
            assert requested[name] == "1", report
            assert held.get(f"{team}/{name}", (None, 0))[1] == 1, (name, held)
        for name in wholes:
            assert requested[name] == "8", report
        assert not waiting, f"whole-node jobs waiting: {report}"
        fragments = {s: n for s, n in gpus.items() if 0 < n < 8}
        assert not fragments, f"GPUs stranded in fragments: {report}"

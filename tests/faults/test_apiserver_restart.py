"""Fault: the apiserver stopped for 30 s, then back, in the middle of a scorer cycle's writes and
of a pod burst (issue: when the control plane misbehaves), on the real kube-apiserver, etcd and
kube-scheduler v1.36.2, the real scorer and webhook processes and a real Prometheus.

Eight nodes, each with its GPU utilisation in Prometheus; a tenant at a 0 % budget whose pods
(Guaranteed, so no gate ever moves) are placed by the scheduler through the budget pools. The
scorer writes at most one node a second (`writeQps: 1`), so when the data of four nodes changes,
one cycle writes them over four seconds: the apiserver is stopped a moment after the first of
those writes, while pods are being created at 4/s, and started again 30 s later (etcd, the
scheduler, the scorer and the webhook keep running). The scorer runs as a user of its own,
whose every request the apiserver's audit log records.

What must hold, and is printed as figures:
- the four nodes whose data changed end with their new labels, each written once (no write lost
  or applied twice); the four whose data did not change are not written at all (no flap) from
  the steady state to the end, through the burst, the outage and the recovery;
- the scorer's watches resume: at most one list of each collection after the restart (a 410
  from the restarted apiserver's fresh watch cache costs one relist), none while it is down;
- the webhook answers from memory while the apiserver is down (a review sent straight to it is
  steered) and its metrics say how stale its namespace cache is;
- every pod the client created (before, and retried after) is steered and bound, none Failed,
  and no node holds more limits than it has (the 0 % budget).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.waiting import wait_until
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.core.budget import pod_limits
from steer.core.quantity import parse_quantity
from tests.faults.control_plane_support import (
    CHANGED,
    GROUP,
    NODES,
    POLICY,
    PREFIX,
    SCORE,
    UNCHANGED,
    grant_group,
    guaranteed_pod,
    labels_of,
    lists,
    make_nodes,
    node_writes,
    scorer_kubeconfig,
    steady_rig,
)

SCORER_USER = "fault-scorer"
OPT_IN = "kube-steer.github.io/enabled"
TRACE = f"{PREFIX}trace"
DOWN_S = 30.0
BURST_RATE = 4.0  # pods a second


@dataclass
class Burst:
    """Pods created at BURST_RATE by a client that retries a create the apiserver did not
    answer (as a controller would), until `stop`."""

    admin: KubeJson
    namespace: str
    created: list[str] = field(default_factory=list)
    retries: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            name = f"burst-{i:03d}"
            while not self.stopped.is_set():
                try:
                    self.admin.request(
                        "POST",
                        f"/api/v1/namespaces/{self.namespace}/pods",
                        body=guaranteed_pod(name, {"app": "burst"}),
                    )
                    break
                except KubeApiError as exc:
                    if exc.status == 409:  # created by the attempt whose answer was lost
                        break
                    self.retries += 1
                    time.sleep(0.5)
            self.created.append(name)
            i += 1
            time.sleep(1 / BURST_RATE)


def review(namespace: str) -> dict[str, Any]:
    """An AdmissionReview of a pod creation, as the apiserver would send it."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "fault-client", "groups": ["system:authenticated"]},
            "object": {**guaranteed_pod("during-outage"), "metadata": {"namespace": namespace}},
        },
    }


def metric_value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module alone (its apiserver is stopped), auditing GROUP."""
    with ControlPlane.start(
        tmp_path_factory.mktemp("apiserver-restart"), audit_groups=[GROUP]
    ) as started:
        yield started


def test_an_apiserver_restart_mid_cycle_and_mid_burst_loses_nothing_and_flaps_nothing(
    plane: ControlPlane, tmp_path: Path, fault_summary: Callable[[str], None]
) -> None:
    admin = KubeJson(make_api_client(str(plane.kubeconfig)))
    cluster = make_nodes(plane)
    namespace = f"faults-{uuid.uuid4().hex[:6]}"
    plane.ensure_namespace(namespace, {"tenant": "dept-b", OPT_IN: "true"})
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    grant_group(admin)
    kubeconfig = scorer_kubeconfig(plane, SCORER_USER)
    with contextlib.ExitStack() as stack:
        hook, _scorer = steady_rig(stack, plane, admin, cluster, policy_file, tmp_path, kubeconfig)
        time.sleep(4)  # a cycle with nothing to write: the steady state
        steady = plane.audit_offset()
        before = {n: labels_of(admin, n) for n in NODES}

        burst = Burst(admin, namespace)
        burster = threading.Thread(target=burst.run, daemon=True)
        burster.start()
        time.sleep(5)
        # The data of four nodes moves: the next cycle writes them one a second.
        written_before = len(node_writes(plane.audit_events(since=steady))[CHANGED[0]])
        for name in CHANGED:
            cluster.set_gpu_util(name, 80)
        wait_until(
            "the scorer's first write of the changed nodes",
            lambda: (
                any(
                    len(codes) > (written_before if n == CHANGED[0] else 0)
                    for n, codes in node_writes(plane.audit_events(since=steady)).items()
                    if n in CHANGED
                )
                or None
            ),
            timeout=30,
            interval=0.1,
        )
        time.sleep(0.3)
        plane.stop_apiserver()
        stopped_at = time.monotonic()
        # While it is down, the webhook answers from memory and says how stale it is.
        time.sleep(DOWN_S / 2)
        with hook.session() as session:
            answer = session.post(f"{hook.url}/mutate", json=review(namespace), timeout=5).json()
            age = metric_value(
                session.get(hook.metrics_url, timeout=5).text,
                "steer_webhook_namespace_cache_age_seconds",
            )
        assert answer["response"]["allowed"] and answer["response"].get("patch"), answer
        assert age is not None and age >= DOWN_S / 2 - 5, age
        time.sleep(max(0.0, DOWN_S - (time.monotonic() - stopped_at)))
        down_s = time.monotonic() - stopped_at
        plane.start_apiserver_again()
        back = time.monotonic()
        back_offset = plane.audit_offset()

        changed_labels = wait_until(
            "the changed nodes' new labels",
            lambda: all(labels_of(admin, n).get(SCORE) == "20" for n in CHANGED) or None,
            timeout=60,
            interval=0.5,
        )
        assert changed_labels
        recovered_s = time.monotonic() - back
        time.sleep(5)  # pods created after the restart
        burst.stopped.set()
        burster.join(timeout=30)

        def all_bound() -> list[dict[str, Any]] | None:
            pods = admin.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
            return (
                pods
                if len(pods) == len(burst.created) and all(p["spec"].get("nodeName") for p in pods)
                else None
            )

        pods = wait_until("every pod bound", all_bound, timeout=90, interval=1)
        time.sleep(4)  # one more cycle: nothing more to write
        events = plane.audit_events(since=steady)
        after_restart = plane.audit_events(since=back_offset)
        end = {n: labels_of(admin, n) for n in NODES}

    writes = node_writes(events)
    unsteered = [
        p["metadata"]["name"] for p in pods if TRACE not in p["metadata"].get("annotations", {})
    ]
    failed = [p["metadata"]["name"] for p in pods if p.get("status", {}).get("phase") == "Failed"]
    held: dict[str, Fraction] = {}
    for p in pods:
        node = p["spec"]["nodeName"]
        held[node] = held.get(node, Fraction(0)) + pod_limits(p["spec"]).cpu_m
    over = {n: m for n, m in held.items() if m > parse_quantity("16") * 1000}
    relists = lists(after_restart)
    fault_summary(
        f"apiserver down {down_s:.1f} s; changed nodes relabelled {recovered_s:.1f} s after it "
        f"was back; pods {len(pods)} ({burst.retries} creates retried by the client), "
        f"unsteered {len(unsteered)}, Failed {len(failed)}, over budget {len(over)}; "
        f"writes per changed node {[writes[n] for n in CHANGED]}, per unchanged node "
        f"{[writes[n] for n in UNCHANGED]}; lists after the restart {relists}"
    )
    for name in UNCHANGED:
        assert writes[name] == [], f"{name}: data unchanged, written {writes[name]}"
        assert end[name] == before[name], (before[name], end[name])
    for name in CHANGED:
        done = [c for c in writes[name] if c == 200]
        assert len(done) == 1, f"{name}: written {writes[name]} (one 200 expected)"
    assert not unsteered and not failed and not over, (unsteered, failed, over)
    assert all(count <= 1 for count in relists.values()), relists

"""Fault: the scorer's leader frozen in the middle of a cycle's writes (SIGSTOP, as a node under
memory pressure or a paused VM freezes it), a standby taking over, then the old leader thawed
(SIGCONT) (issue: when the control plane misbehaves), on the real kube-apiserver, etcd and
kube-scheduler v1.36.2, two real scorer processes and a real Prometheus.

Two replicas elect a leader on a Lease (15 s lease, 10 s renew deadline, 2 s retry: the
scorer's defaults). Each runs as a user of its own, so the apiserver's audit log tells whose
write each is. The data of four of the eight nodes changes, the leader starts writing them (one
a second) and is frozen after its first write. What must hold, and is printed as figures:

- the standby takes the Lease and writes the rest within the lease duration, a cycle and its
  writes (the bound: 15 s + 3 s + 4 s, stated in the assertion);
- the old leader, thawed after the standby leads, writes nothing more: its own clock says it
  has not renewed within its renew deadline (steer/adapters/lease.py), whatever its threads were doing
  when frozen;
- each changed node is written once in all (no write lost or applied twice), the unchanged
  nodes not at all.

The same faults at 5,000 nodes, the leader killed (SIGKILL) or frozen in the middle of 5,000
writes, with pools checked against the pods they hold: test_leader_failover_scale.py (`make
faults-scale`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.prometheus_server import scraped_cluster
from kits.service_processes import running_scorer
from kits.waiting import wait_until
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeApiError, KubeJson
from tests.faults.control_plane_support import (
    CHANGED,
    GROUP,
    NODES,
    POLICY,
    SCORE,
    UNCHANGED,
    grant_group,
    labels_of,
    make_nodes,
    node_writes,
    scorer_kubeconfig,
    writes_to_nodes,
)

LEASE_NS = "kube-steer"
LEASE = "steer-scorer"
LEASE_S, INTERVAL_S, WRITES_S = 15.0, 3.0, 4.0  # the failover bound's parts


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane.start(
        tmp_path_factory.mktemp("leader-failover"), audit_groups=[GROUP]
    ) as started:
        yield started


def holder(admin: KubeJson) -> str | None:
    try:
        lease = admin.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE}"
        )
    except KubeApiError:
        return None
    found: str | None = lease["spec"].get("holderIdentity")
    return found


def test_a_frozen_leader_is_replaced_and_writes_nothing_once_thawed(
    plane: ControlPlane, tmp_path: Path, fault_summary: Callable[[str], None]
) -> None:
    admin = KubeJson(make_api_client(str(plane.kubeconfig)))
    cluster = make_nodes(plane)
    plane.ensure_namespace(LEASE_NS)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    grant_group(admin)
    users = {"a": "fault-scorer-a", "b": "fault-scorer-b"}
    with contextlib.ExitStack() as stack:
        _exporter, prom = stack.enter_context(scraped_cluster(cluster, scrape_interval_s=0.5))

        def replica(name: str) -> Any:
            return stack.enter_context(
                running_scorer(
                    plane,
                    policy_file,
                    prom.url,
                    tmp_path,
                    name=f"scorer-{name}",
                    kubeconfig=scorer_kubeconfig(plane, users[name]),
                    extra_args=["--lease-namespace", LEASE_NS, "--identity", f"replica-{name}"],
                )
            )

        first = replica("a")
        first.wait_ready()
        wait_until("replica-a leads", lambda: holder(admin) == "replica-a" or None, timeout=30)
        standby = replica("b")
        wait_until(
            "every node labelled",
            lambda: all(labels_of(admin, n).get(SCORE) == "90" for n in NODES) or None,
            timeout=60,
            interval=0.5,
        )
        time.sleep(2 * INTERVAL_S)  # steady: nothing left to write
        steady = plane.audit_offset()
        for name in CHANGED:
            cluster.set_gpu_util(name, 80)
        wait_until(
            "the leader's first write of a changed node",
            lambda: (
                any(codes for codes in node_writes(plane.audit_events(since=steady)).values())
                or None
            ),
            timeout=30,
            interval=0.1,
        )
        os.kill(first.process.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            wait_until(
                "replica-b leads",
                lambda: holder(admin) == "replica-b" or None,
                timeout=LEASE_S + 15,
                interval=0.2,
            )
            took_over_s = time.monotonic() - frozen_at
            wait_until(
                "the changed nodes' new labels",
                lambda: all(labels_of(admin, n).get(SCORE) == "20" for n in CHANGED) or None,
                timeout=LEASE_S + INTERVAL_S + WRITES_S + 15,
                interval=0.2,
            )
            published_s = time.monotonic() - frozen_at
        finally:
            os.kill(first.process.pid, signal.SIGCONT)
        thawed = plane.audit_offset()
        time.sleep(3 * INTERVAL_S)  # the thawed replica's threads run on
        assert first.running and standby.running
        events = plane.audit_events(since=steady)
        after_thaw = plane.audit_events(since=thawed)

    writes = node_writes(events)
    by_a = [e["objectRef"]["name"] for e in writes_to_nodes(events, users["a"])]
    by_b = [e["objectRef"]["name"] for e in writes_to_nodes(events, users["b"])]
    stale = [e["objectRef"]["name"] for e in writes_to_nodes(after_thaw, users["a"])]
    fault_summary(
        f"leader frozen mid-cycle: standby led after {took_over_s:.1f} s, every changed node "
        f"published {published_s:.1f} s after the freeze; writes by the frozen leader {by_a}, "
        f"by the new one {by_b}, by the old leader once thawed {stale}; writes per unchanged "
        f"node {[writes[n] for n in UNCHANGED]}"
    )
    assert not stale, f"the thawed old leader wrote {stale}"
    assert published_s <= LEASE_S + INTERVAL_S + WRITES_S + 5, published_s
    for name in CHANGED:
        assert [c for c in writes[name] if c == 200] == [200], (name, writes[name])
    for name in UNCHANGED:
        assert writes[name] == [], (name, writes[name])

"""Fault: every watch of the scorer expired (issue: when the control plane misbehaves), on the
real kube-apiserver, etcd and kube-scheduler v1.36.2, the real scorer and webhook processes and
a real Prometheus.

The apiserver serves watches from etcd (`--watch-cache=false`) and compacts etcd every 3 s
(`--etcd-compaction-interval`). The scorer reaches it through a relay that is cut (a network
partition between the scorer and the apiserver alone) while 40 steered pods are created and
bound and 8 of them deleted, long enough for two compactions: every version the scorer's
watches would resume from is gone, so the apiserver answers each with 410 Gone. What must hold,
and is printed as figures:

- each collection is listed once after the partition heals, no more (a relist, not a storm);
- the budget ledger misses no binding and no deletion: every node's pool says it holds exactly
  the pool requests of the pods bound there (`/explain/node`), and publishes no less;
- nodes whose data did not change are not written.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from kits.control_plane import ControlPlane
from kits.waiting import wait_until
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.core.quantity import parse_quantity
from tests.faults.control_plane_support import (
    GROUP,
    NODES,
    POLICY,
    POOL_CPU,
    grant_group,
    guaranteed_pod,
    lists,
    make_nodes,
    node_writes,
    scorer_kubeconfig,
    steady_rig,
)
from tests.faults.partition import partitioned

OPT_IN = "kube-steer.github.io/enabled"
COMPACTION_S = 3
PODS, DELETED = 40, 8


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane.start(
        tmp_path_factory.mktemp("expired-watches"),
        apiserver_args=["--watch-cache=false", f"--etcd-compaction-interval={COMPACTION_S}s"],
        audit_groups=[GROUP],
    ) as started:
        yield started


def through(kubeconfig: Path, url: str) -> Path:
    """The kubeconfig with its server replaced by `url` (the relay)."""
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = url
    relayed = kubeconfig.with_name(f"relayed-{kubeconfig.name}")
    relayed.write_text(yaml.safe_dump(config))
    relayed.chmod(0o600)
    return relayed


def held_by_pods(admin: KubeJson, namespace: str) -> dict[str, Fraction]:
    """Per node, the pool-cpu requests of the pods bound there (what the ledger must hold)."""
    out = {n: Fraction(0) for n in NODES}
    for p in admin.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]:
        node = p["spec"].get("nodeName")
        if node in out and not p["metadata"].get("deletionTimestamp"):
            for c in p["spec"]["containers"]:
                out[node] += parse_quantity(c["resources"]["requests"].get(POOL_CPU, "0"))
    return out


def pool_cpu(scorer: Any, node: str) -> dict[str, Any] | None:
    """The node's cpu pool as the scorer plans it; None while it plans none (a ledger not
    synced: pools are never planned from a ledger that may miss pods)."""
    pools = scorer.get(f"/explain/node/{node}")["budgetPools"]["pools"]
    found: dict[str, Any] | None = next((p for p in pools if p["resource"] == POOL_CPU), None)
    return found


def test_expired_watches_relist_once_and_the_ledger_misses_no_binding(
    plane: ControlPlane, tmp_path: Path, fault_summary: Callable[[str], None]
) -> None:
    admin = KubeJson(make_api_client(str(plane.kubeconfig)))
    cluster = make_nodes(plane)
    namespace = f"expiry-{uuid.uuid4().hex[:6]}"
    plane.ensure_namespace(namespace, {"tenant": "dept-b", OPT_IN: "true"})
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    grant_group(admin)
    with contextlib.ExitStack() as stack:
        relay = stack.enter_context(partitioned(plane.ports["apiserver"]))
        kubeconfig = through(scorer_kubeconfig(plane, "fault-scorer-expiry"), relay.url)
        _hook, scorer = steady_rig(stack, plane, admin, cluster, policy_file, tmp_path, kubeconfig)
        steady = plane.audit_offset()

        relay.cut()
        cut_at = time.monotonic()
        names = [f"expiry-{i:02d}" for i in range(PODS)]
        for name in names:
            made = admin.request(
                "POST", f"/api/v1/namespaces/{namespace}/pods", body=guaranteed_pod(name)
            )
            assert POOL_CPU in made["spec"]["containers"][0]["resources"]["requests"], made
        wait_until(
            "every pod bound",
            lambda: (
                all(
                    p["spec"].get("nodeName")
                    for p in admin.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
                )
                or None
            ),
            timeout=60,
            interval=0.5,
        )
        for name in names[:DELETED]:
            admin.request(
                "DELETE",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                query={"gracePeriodSeconds": "0"},
            )
        time.sleep(3 * COMPACTION_S)  # two compactions past every version the scorer saw
        healed = plane.audit_offset()
        relay.heal()
        cut_s = time.monotonic() - cut_at
        expected = held_by_pods(admin, namespace)

        def exact() -> dict[str, Any] | None:
            found = {n: pool_cpu(scorer, n) for n in NODES}
            ok = all(
                (pool := found[n]) is not None
                and Fraction(pool["taken"]) == expected[n]
                and Fraction(pool["capacity"]) >= expected[n]
                for n in NODES
            )
            return found if ok else None

        pools = wait_until("the ledger exact again", exact, timeout=60, interval=0.5)
        recovered_s = time.monotonic() - cut_at - cut_s
        time.sleep(4)  # a cycle more: nothing more to list or write
        after_heal = plane.audit_events(since=healed)
        events = plane.audit_events(since=steady)
        expired = scorer.log(200_000).count("410")

    relists = lists(after_heal)
    writes = node_writes(events)
    fault_summary(
        f"scorer partitioned {cut_s:.1f} s while {PODS} pods bound and {DELETED} left, etcd "
        f"compacted every {COMPACTION_S} s: {expired} watch expiries logged, lists after the "
        f"heal {relists}, ledger exact {recovered_s:.1f} s after the heal (held "
        f"{[str(pools[n]['taken']) for n in NODES]}), node writes {sum(map(len, writes.values()))}"
    )
    assert expired >= 1, "no watch expired: the fault did not happen"
    assert all(count == 1 for count in relists.values()), relists
    assert "nodes" in relists and "pods?spec.nodeName!=" in relists, relists
    assert not any(writes.values()), writes  # no node's data changed

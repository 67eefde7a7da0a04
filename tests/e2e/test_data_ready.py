"""The data checks on the real apiserver: the scorer (`steer scorer run --policy-resource`, as
the scorer manifest's ClusterRole allows) reads a SteeringPolicy whose GPU dimension groups by
DCGM exporter's old `Hostname` label while the exporter (as released now) says `hostname`. The
object's `DataReady` condition turns False with the fix, `/readyz` lists it, and the operator's
edit to `hostname` turns it True, naming the exporter form the query read; no node gets a score
from the unresolved data meanwhile."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.service_processes import running_scorer
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.adapters.policy_resource import object_path
from steer.core.policy.crd import DATA_READY
from tests.e2e.waiting import NOT_YET, install_policy_crd

NODES = ("data-e2e-1", "data-e2e-2")
MERGE = "application/merge-patch+json"


def policy_object(name: str, label: str) -> dict[str, Any]:
    """`gpu-util` grouped by `label`, its answer marked with the form it reads (as the example
    policy's queries do: docs/exporters.md)."""
    query = (
        f"label_replace(avg by ({label}) (DCGM_FI_DEV_GPU_UTIL), "
        f'"form", "dcgm-exporter {label}", "", "")'
    )
    return {
        "apiVersion": "kube-steer.github.io/v1alpha1",
        "kind": "SteeringPolicy",
        "metadata": {"name": name},
        "spec": {
            "scoring": {"intervalSeconds": 1, "ttlSeconds": 60},
            "dimensions": [
                {
                    "name": "gpu-util",
                    "query": query,
                    "nodeLabel": label,
                    "unit": "pct",
                    "direction": "lowerIsBetter",
                    "normalization": {"method": "fixed", "min": 0, "max": 100},
                    "weight": 1,
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def scraped() -> Iterator[PrometheusServer]:
    cluster = SyntheticCluster(nodes=2, gpus_per_node=1, node_prefix="data-e2e-")
    cluster.set_gpu_util(NODES[0], 30)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", lambda r: len(r.samples) == 2)
        yield prom


def data_ready(obj: dict[str, Any]) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond["type"] == DATA_READY:
            return dict(cond)
    return None


def test_the_policy_status_says_what_the_data_lacks_and_clears_when_it_is_fixed(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_node: Callable[..., dict[str, Any]],
    scorer_user: Path,
    scraped: PrometheusServer,
    tmp_path: Path,
) -> None:
    install_policy_crd(control_plane, admin)
    for node in NODES:
        make_node(node, gpus=1)
    name = f"data-{uuid.uuid4().hex[:6]}"
    path = object_path(name)
    wait_until(
        "the CRD serves SteeringPolicies",
        lambda: admin.request(
            "POST",
            "/apis/kube-steer.github.io/v1alpha1/steeringpolicies",
            body=policy_object(name, "Hostname"),
        ),
        timeout=30,
        ignoring=NOT_YET,
    )
    try:
        with running_scorer(
            control_plane,
            None,
            scraped.url,
            tmp_path,
            policy_resource=name,
            kubeconfig=scorer_user,
            extra_args=["--no-leader-election"],
        ) as scorer:
            scorer.wait_ready()
            told = wait_until(
                "DataReady False",
                lambda: admin.request("GET", path),
                timeout=60,
                until=lambda o: (data_ready(o) or {}).get("status") == "False",
            )
            cond = data_ready(told)
            assert cond is not None and cond["reason"] == "DataProblems"
            assert "gpu-util:" in cond["message"] and "set nodeLabel: hostname" in cond["message"]
            ready = scorer.get("/readyz")
            assert any("set nodeLabel: hostname" in line for line in ready["data"]["lines"])
            for node in NODES:
                labels = admin.request("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"]
                assert "kube-steer.github.io/score-gpu-util" not in labels

            fixed = policy_object(name, "hostname")["spec"]
            admin.request("PATCH", path, body={"spec": fixed}, content_type=MERGE)
            good = wait_until(
                "DataReady True",
                lambda: admin.request("GET", path),
                timeout=60,
                until=lambda o: (data_ready(o) or {}).get("status") == "True",
            )
            assert good["status"]["observedGeneration"] == 2
            cond = data_ready(good)
            assert cond is not None and cond["message"].endswith(
                "; read dcgm-exporter hostname: gpu-util"
            )
            labels = admin.request("GET", f"/api/v1/nodes/{NODES[0]}")["metadata"]["labels"]
            assert labels["kube-steer.github.io/score-gpu-util"] == "70"
            assert scorer.get("/readyz")["data"]["problems"] == 0
            table = control_plane.kubectl("get", "steeringpolicies", name)
            assert table.split("\n")[0].split()[:5] == [
                "NAME",
                "ACCEPTED",
                "MODE",
                "VERSION",
                "DATA",
            ]
            assert table.split("\n")[1].split()[4] == "True"
    finally:
        with contextlib.suppress(KubeApiError):
            admin.request("DELETE", path)

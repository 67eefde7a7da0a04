"""`kubectl steer` as kubectl runs it: the real kubectl v1.36.2 finds `kubectl-steer` on PATH and
the plugin asks a real `steer scorer run` through the real apiserver's Service proxy, with the
kubeconfig, context and namespace kubectl's flags name.

The apiserver proxies a Service only to an endpoint address that is the IP of a Pod of the
Service's namespace (and never to loopback), so the scorer listens on this machine's own
address and a Pod object carries that address in its status: the Service, its Endpoints and
that Pod are what a cluster would have, the process behind them is the real scorer.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kits.control_plane import ControlPlane
from kits.net import free_port
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.service_processes import RunningScorer, running_scorer
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeJson
from tests.conftest import EXAMPLE_POLICY
from tests.e2e.waiting import NOT_YET
from tests.scorer_support import SMALL_POLICY

NODES = ("plugin-e2e-1", "plugin-e2e-2")
POLICY_TEXT = SMALL_POLICY.replace("intervalSeconds: 30}", "intervalSeconds: 2}")
SERVICE = "steer-scorer"


def host_address() -> str:
    """An address of this machine the apiserver may proxy to (not loopback, not link-local)."""
    for probe in ("192.0.2.1", "10.255.255.255", "172.31.255.255", "192.168.255.255"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.connect((probe, 9))  # UDP: picks the route's source address, sends nothing
            except OSError:
                continue
            address = ipaddress.ip_address(s.getsockname()[0])
        if not (address.is_loopback or address.is_link_local or address.is_unspecified):
            return str(address)
    pytest.fail("this machine has no non-loopback IPv4 address for the Service's endpoint")


@pytest.fixture(scope="module")
def scraped() -> Iterator[PrometheusServer]:
    cluster = SyntheticCluster(nodes=len(NODES), gpus_per_node=2, node_prefix="plugin-e2e-")
    for name, util in zip(NODES, (30, 80), strict=True):
        cluster.set_gpu_util(name, util)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        yield prom


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    """kubectl's environment: PATH with the installed `kubectl-steer` (beside this Python) and
    nothing else of ours, and a HOME of its own (no ~/.kube/config to fall back on)."""
    script = Path(sys.executable).parent / "kubectl-steer"
    assert script.exists(), f"{script} missing: install the project (`make venv`)"
    bin_dir = tmp_path / "plugin-bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl-steer").symlink_to(script)
    (tmp_path / "home").mkdir()
    return {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp_path / "home"),
    }


def serve_through_service(admin: KubeJson, namespace: str, address: str, port: int) -> None:
    """The scorer's Service as the manifest has it (port `http` 8080), with the Pod and the
    Endpoints a running scorer replica would give it."""
    pod = {
        "metadata": {"name": "steer-scorer-0", "labels": {"app.kubernetes.io/name": SERVICE}},
        # Bound to no real node: nothing schedules, runs or counts it.
        "spec": {"nodeName": "plugin-e2e-absent", "containers": [{"name": "scorer", "image": "x"}]},
    }
    admin.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
    admin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/steer-scorer-0/status",
        body={"status": {"podIP": address, "podIPs": [{"ip": address}]}},
        content_type="application/merge-patch+json",
    )
    service = {
        "metadata": {"name": SERVICE},
        "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": port}]},
    }
    admin.request("POST", f"/api/v1/namespaces/{namespace}/services", body=service)
    target = {"kind": "Pod", "namespace": namespace, "name": "steer-scorer-0"}
    endpoints = {
        "metadata": {"name": SERVICE},
        "subsets": [
            {
                "addresses": [{"ip": address, "targetRef": target}],
                "ports": [{"name": "http", "port": port}],
            }
        ],
    }
    admin.request("POST", f"/api/v1/namespaces/{namespace}/endpoints", body=endpoints)


def two_context_kubeconfig(admin_kubeconfig: Path, out: Path, namespace: str) -> Path:
    """The admin kubeconfig as context `e2e` (default namespace `namespace`), and a current
    context `elsewhere` whose apiserver does not exist: only --context e2e reaches the cluster."""
    doc = yaml.safe_load(admin_kubeconfig.read_text())
    (cluster,) = doc["clusters"]
    (user,) = doc["users"]
    doc["clusters"].append(
        {"name": "elsewhere", "cluster": {**cluster["cluster"], "server": "https://127.0.0.1:1"}}
    )
    doc["contexts"] = [
        {
            "name": "e2e",
            "context": {"cluster": cluster["name"], "user": user["name"], "namespace": namespace},
        },
        {"name": "elsewhere", "context": {"cluster": "elsewhere", "user": user["name"]}},
    ]
    doc["current-context"] = "elsewhere"
    out.write_text(yaml.safe_dump(doc))
    return out


@pytest.fixture
def cluster_scorer(
    scraped: PrometheusServer,
    control_plane: ControlPlane,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    admin: KubeJson,
    tmp_path: Path,
) -> Iterator[tuple[RunningScorer, str]]:
    """A scorer that scored both nodes, behind its Service in a namespace of its own."""
    for name in NODES:
        make_node(name, cpu="8", memory="32Gi", gpus=2)
    steer_namespace = make_namespace(prefix="plugin-steer")
    address, port = host_address(), free_port()
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY_TEXT)
    with running_scorer(
        control_plane,
        policy_file,
        scraped.url,
        tmp_path,
        name="scorer-plugin",
        listen=f"{address}:{port}",
        extra_args=["--no-leader-election"],
    ) as scorer:
        scorer.wait_ready()
        wait_until(
            "the scorer scored both nodes",
            lambda: (
                all(
                    n["labels"].get("kube-steer.github.io/score-util")
                    for n in scorer.get("/explain/nodes")["nodes"]
                    if n["node"] in NODES
                )
                and {n["node"] for n in scorer.get("/explain/nodes")["nodes"]} >= set(NODES)
            ),
            timeout=30,
            ignoring=NOT_YET,
        )
        serve_through_service(admin, steer_namespace, address, port)
        yield scorer, steer_namespace


def kubectl(
    plane: ControlPlane,
    base: dict[str, str],
    args: Sequence[str],
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(plane.bin_dir / "kubectl"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
    )


def test_kubectl_steer_explains_nodes_and_pods_through_the_apiserver_and_validates_policies(
    cluster_scorer: tuple[RunningScorer, str],
    control_plane: ControlPlane,
    make_namespace: Callable[..., str],
    admin: KubeJson,
    plugin_env: dict[str, str],
    tmp_path: Path,
) -> None:
    scorer, steer_namespace = cluster_scorer
    apps = make_namespace(prefix="plugin-apps")
    kubeconfig = two_context_kubeconfig(control_plane.kubeconfig, tmp_path / "kc.yaml", apps)
    pod = {
        "metadata": {"name": "web-0"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    admin.request("POST", f"/api/v1/namespaces/{apps}/pods", body=pod)
    where = ["--scorer-namespace", steer_namespace]

    # kubectl hands `steer --help` to the plugin.
    helped = kubectl(control_plane, plugin_env, ["steer", "--help"])
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: kubectl steer ")
    for command in ("explain", "policy", "--context", "--kubeconfig", "--namespace"):
        assert command in helped.stdout

    # explain node, through the Service proxy, with --kubeconfig and --context after the words.
    node = kubectl(
        control_plane,
        plugin_env,
        ["steer", "explain", "node", NODES[1], "-o", "json", "--kubeconfig", str(kubeconfig),
         "--context", "e2e", *where],
    )  # fmt: skip
    assert node.returncode == 0, node.stderr
    answer = json.loads(node.stdout)
    direct = scorer.get(f"/explain/node/{NODES[1]}")
    assert answer["node"] == direct["node"] == NODES[1]
    assert answer["labels"] == direct["labels"]
    assert answer["labels"]["kube-steer.github.io/score-util"] == "20"  # 80 % busy GPUs
    table = kubectl(
        control_plane,
        plugin_env,
        ["steer", "--context", "e2e", "explain", "node", NODES[0], *where],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    assert table.returncode == 0, table.stderr
    assert NODES[0] in table.stdout and "score-util" in table.stdout

    # The current context's apiserver does not exist: the plugin used it, and says so.
    elsewhere = kubectl(
        control_plane,
        plugin_env,
        ["steer", "explain", "node", NODES[0], *where],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    assert elsewhere.returncode != 0
    assert "cannot reach the Kubernetes API at https://127.0.0.1:1" in elsewhere.stderr

    # explain pod NAME: the namespace is the context's (apps), as kubectl's own.
    explained = kubectl(
        control_plane,
        plugin_env,
        ["steer", "explain", "pod", "web-0", "--context=e2e", "-o", "json", *where],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    assert explained.returncode == 0, explained.stderr
    verdict = json.loads(explained.stdout)
    direct_verdict = scorer.get(f"/explain/pod/{apps}/web-0")
    for key in ("policyVersion", "steered", "allowed", "excluded"):
        assert verdict[key] == direct_verdict[key], key
    assert {v["node"] for v in verdict["allowed"] + verdict["excluded"]} >= set(NODES)
    # NAMESPACE/NAME and -n say the same; a pod that does not exist is named in the error.
    by_ref = kubectl(
        control_plane,
        plugin_env,
        ["steer", "explain", "pod", f"{apps}/web-0", "--context", "e2e", *where],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    assert by_ref.returncode == 0, by_ref.stderr
    assert "not steered: not-opted-in" in by_ref.stdout  # apps is not opted in
    assert all(name in by_ref.stdout for name in NODES)
    missing = kubectl(
        control_plane,
        plugin_env,
        ["steer", "explain", "pod", "-n", "default", "nope", "--context", "e2e", *where],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    assert missing.returncode != 0 and "nope" in missing.stderr and "404" in missing.stderr

    # explain pod -f: a pod not created yet, posted through the proxy; the context's namespace.
    manifest = tmp_path / "what-if.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", **pod}))
    what_if = kubectl(
        control_plane,
        plugin_env,
        ["steer", "explain", "pod", "-f", str(manifest), "--context", "e2e", "-o", "json", *where],
        env={"KUBECONFIG": str(kubeconfig)},
    )
    assert what_if.returncode == 0, what_if.stderr
    posted = json.loads(what_if.stdout)
    assert posted["allowed"] == verdict["allowed"] and "scheduler" not in posted

    # policy validate needs no cluster.
    valid = kubectl(control_plane, plugin_env, ["steer", "policy", "validate", str(EXAMPLE_POLICY)])
    assert valid.returncode == 0, valid.stderr
    assert "valid policy" in valid.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(POLICY_TEXT.replace("weight: 3", "weight: -3"))
    invalid = kubectl(
        control_plane, plugin_env, ["steer", "policy", "validate", str(bad), "-o", "json"]
    )
    assert invalid.returncode == 1
    errors = json.loads(invalid.stdout)["errors"]
    assert [e["path"] for e in errors] == ["spec.dimensions[0].weight"]

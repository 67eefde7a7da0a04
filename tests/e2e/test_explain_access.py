"""Explain answers each caller what that caller may read, on the real v1.36.2 apiserver.

A real `steer scorer run --authorization apiserver`, under a user bound to the scorer
manifest's ClusterRole and `system:auth-delegator` (what the install gives its
ServiceAccount), behind its Service as in tests/e2e/test_kubectl_plugin.py. Callers hold real
ServiceAccount tokens (`kubectl create token`): a tenant with `get pods` in its namespace
(and `get services/proxy` on the scorer's Service, as the install docs grant), an operator
who also reads nodes, and Prometheus with `get` on the non-resource URL /metrics.

Also upstream's behaviour this relies on: the Service proxy drops `Authorization` before it
proxies, and passes `X-Steer-Authorization` on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from kits.control_plane import ControlPlane
from kits.net import free_port
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.service_processes import RunningScorer, running_scorer
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeJson
from tests.e2e.test_kubectl_plugin import host_address, kubectl, serve_through_service
from tests.e2e.waiting import NOT_YET
from tests.scorer_support import SMALL_POLICY

NODES = ("access-e2e-1", "access-e2e-2")
POLICY_TEXT = SMALL_POLICY.replace("intervalSeconds: 30}", "intervalSeconds: 2}")
RBAC = "/apis/rbac.authorization.k8s.io/v1"
DATA_PATHS = (
    "/",
    "/ui/page.js",
    "/metrics",
    "/explain/nodes",
    f"/explain/node/{NODES[0]}",
    "/explain/audit",
    "/explain/pod/default/anything",
)
AUTH_DELEGATOR = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}


@pytest.fixture(scope="module")
def scraped() -> Iterator[PrometheusServer]:
    cluster = SyntheticCluster(nodes=len(NODES), gpus_per_node=2, node_prefix="access-e2e-")
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        yield prom


def sa_with_token(admin: KubeJson, plane: ControlPlane, namespace: str, name: str) -> str:
    admin.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body={"metadata": {"name": name}}
    )
    return plane.kubectl("create", "token", name, "-n", namespace, "--duration=1h").strip()


def grant(
    admin: KubeJson, namespace: str | None, name: str, rules: list[Any], sa: tuple[str, str]
) -> None:
    """A Role (or, without `namespace`, a ClusterRole) `name` with `rules`, bound to the
    ServiceAccount `sa` (namespace, name)."""
    subject = {"kind": "ServiceAccount", "namespace": sa[0], "name": sa[1]}
    kind = "Role" if namespace else "ClusterRole"
    where = f"{RBAC}/namespaces/{namespace}" if namespace else RBAC
    admin.request(
        "POST", f"{where}/{kind.lower()}s", body={"metadata": {"name": name}, "rules": rules}
    )
    admin.request(
        "POST",
        f"{where}/{kind.lower()}bindings",
        body={
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [subject],
        },
    )


def token_kubeconfig(admin_kubeconfig: Path, token: str, out: Path) -> Path:
    """The admin kubeconfig's cluster, with a user that is only `token`."""
    doc = yaml.safe_load(admin_kubeconfig.read_text())
    doc["users"] = [{"name": "token-user", "user": {"token": token}}]
    for context in doc["contexts"]:
        context["context"]["user"] = "token-user"
    out.write_text(yaml.safe_dump(doc))
    return out


def get(url: str, token: str | None = None, header: str = "Authorization") -> requests.Response:
    with requests.Session() as s:
        s.trust_env = False
        return s.get(url, headers={header: f"Bearer {token}"} if token else {}, timeout=15)


@pytest.fixture
def guarded_scorer(
    scraped: PrometheusServer,
    control_plane: ControlPlane,
    admin: KubeJson,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    scorer_user: Path,
    tmp_path: Path,
) -> Iterator[tuple[RunningScorer, str]]:
    """The scorer as installed: `--authorization apiserver`, its identity the manifest's
    ClusterRole plus system:auth-delegator; behind its Service in a namespace of its own."""
    for name in NODES:
        make_node(name, cpu="8", memory="32Gi", gpus=2)
    user = yaml.safe_load(scorer_user.read_text())["users"][0]["name"]
    delegator = {
        "metadata": {"name": f"{user}-auth-delegator"},
        "roleRef": {**AUTH_DELEGATOR, "name": "system:auth-delegator"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    admin.request("POST", f"{RBAC}/clusterrolebindings", body=delegator)
    steer_namespace = make_namespace(prefix="access-steer")
    address, port = host_address(), free_port()
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY_TEXT)
    try:
        with running_scorer(
            control_plane,
            policy_file,
            scraped.url,
            tmp_path,
            name="scorer-access",
            listen=f"{address}:{port}",
            kubeconfig=scorer_user,
            authorization="apiserver",
            extra_args=["--no-leader-election", "--dry-run"],
        ) as scorer:
            scorer.wait_ready()
            serve_through_service(admin, steer_namespace, address, port)
            yield scorer, steer_namespace
    finally:
        admin.request("DELETE", f"{RBAC}/clusterrolebindings/{user}-auth-delegator")


def test_each_caller_reads_only_what_the_apiserver_lets_it(
    guarded_scorer: tuple[RunningScorer, str],
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    tmp_path: Path,
) -> None:
    scorer, steer_namespace = guarded_scorer
    team, other = make_namespace(prefix="access-team"), make_namespace(prefix="access-other")
    pod = {"spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    for namespace, name in ((team, "web"), (other, "db")):
        admin.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", body={"metadata": {"name": name}, **pod}
        )
    proxy_rule = {
        "apiGroups": [""],
        "resources": ["services/proxy"],
        "verbs": ["get", "create"],
    }
    tenant = sa_with_token(admin, control_plane, team, "tenant")
    grant(admin, team, "read-pods", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
          (team, "tenant"))  # fmt: skip
    grant(admin, steer_namespace, "tenant-proxy", [proxy_rule], (team, "tenant"))
    operator = sa_with_token(admin, control_plane, other, "operator")
    grant(admin, None, f"{other}-operator",
          [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]}],
          (other, "operator"))  # fmt: skip
    grant(admin, steer_namespace, "operator-proxy", [proxy_rule], (other, "operator"))
    prometheus = sa_with_token(admin, control_plane, other, "prometheus")
    grant(admin, None, f"{other}-prometheus",
          [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], (other, "prometheus"))  # fmt: skip
    url = scorer.url

    # Unauthenticated: every data-bearing path 401; the probes answer and hold no pod or node.
    for path in DATA_PATHS:
        assert get(url + path).status_code == 401, path
        assert get(url + path, "not-a-token").status_code == 401, path
    for probe in ("/healthz", "/readyz"):
        answer = get(url + probe)
        assert answer.status_code == 200, probe
        assert not any(n in answer.text for n in (*NODES, team, other, "web")), answer.text

    # The tenant: its own pod, nothing else (RBAC may take a moment to see the bindings).
    wait_until(
        "the tenant's binding is in force",
        lambda: get(f"{url}/explain/pod/{team}/web", tenant).status_code == 200,
        timeout=30,
        ignoring=NOT_YET,
    )
    own = get(f"{url}/explain/pod/{team}/web", tenant).json()
    assert own["namespace"] == team
    refused = get(f"{url}/explain/pod/{other}/db", tenant)
    assert refused.status_code == 403
    assert f"may not get pods 'db' in namespace '{other}'" in refused.json()["error"]
    for path in ("/explain/nodes", f"/explain/node/{NODES[0]}", "/explain/audit", "/metrics"):
        assert get(url + path, tenant).status_code == 403, path

    # The operator reads the node views; Prometheus the metrics (and nothing else).
    wait_until(
        "the operator's and Prometheus's bindings are in force",
        lambda: (
            get(f"{url}/explain/node/{NODES[0]}", operator).status_code == 200
            and get(f"{url}/metrics", prometheus).status_code == 200
        ),
        timeout=30,
        ignoring=NOT_YET,
    )
    assert get(f"{url}/explain/audit", operator).status_code == 200
    assert "steer_scorer_cycle_duration_seconds" in get(f"{url}/metrics", prometheus).text
    assert get(f"{url}/explain/nodes", prometheus).status_code == 403

    # Upstream: the Service proxy drops Authorization (so the scorer sees no token) and
    # passes X-Steer-Authorization on.
    api = control_plane.url
    proxied = f"{api}/api/v1/namespaces/{steer_namespace}/services/steer-scorer:http/proxy"
    with requests.Session() as s:
        s.trust_env = False
        s.verify = str(control_plane.ca_file)
        bare = s.get(f"{proxied}/explain/pod/{team}/web",
                     headers={"Authorization": f"Bearer {tenant}"}, timeout=15)  # fmt: skip
        assert bare.status_code == 401 and "no bearer token" in bare.json()["error"]
        again = s.get(f"{proxied}/explain/pod/{team}/web",
                      headers={"Authorization": f"Bearer {tenant}",
                               "X-Steer-Authorization": f"Bearer {tenant}"}, timeout=15)  # fmt: skip
        assert again.status_code == 200, again.text

    # kubectl steer with each one's own kubeconfig (a token user), through the apiserver.
    env = {"PATH": plugin_path(tmp_path), "HOME": str(tmp_path)}
    if "PYTHONPATH" in os.environ:  # a checkout run without reinstalling
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    where = ["--scorer-namespace", steer_namespace]
    as_tenant = token_kubeconfig(control_plane.kubeconfig, tenant, tmp_path / "tenant.yaml")
    mine = kubectl(control_plane, env, ["steer", "explain", "pod", f"{team}/web", "-o", "json",
                                        "--kubeconfig", str(as_tenant), *where])  # fmt: skip
    assert mine.returncode == 0, mine.stderr
    assert json.loads(mine.stdout)["namespace"] == team
    theirs = kubectl(control_plane, env, ["steer", "explain", "pod", f"{other}/db",
                                          "--kubeconfig", str(as_tenant), *where])  # fmt: skip
    assert theirs.returncode != 0
    assert (
        "HTTP 403" in theirs.stderr
        and f"may not get pods 'db' in namespace '{other}'" in theirs.stderr
    )
    node = kubectl(control_plane, env, ["steer", "explain", "node", NODES[0],
                                        "--kubeconfig", str(as_tenant), *where])  # fmt: skip
    assert node.returncode != 0 and "may not get nodes" in node.stderr
    as_operator = token_kubeconfig(control_plane.kubeconfig, operator, tmp_path / "op.yaml")
    nodes = kubectl(control_plane, env, ["steer", "explain", "node", NODES[0], "-o", "json",
                                         "--kubeconfig", str(as_operator), *where])  # fmt: skip
    assert nodes.returncode == 0, nodes.stderr
    assert json.loads(nodes.stdout)["node"] == NODES[0]
    # A client-certificate user (the admin) has no token to pass on: the message says so.
    admin_cert = kubectl(control_plane, env, ["steer", "explain", "nodes", "--kubeconfig",
                                              str(control_plane.kubeconfig), *where])  # fmt: skip
    assert admin_cert.returncode != 0 and "--token" in admin_cert.stderr
    with_token = kubectl(control_plane, env, ["steer", "explain", "nodes", "--kubeconfig",
                                              str(control_plane.kubeconfig), "--token", operator,
                                              *where])  # fmt: skip
    assert with_token.returncode == 0, with_token.stderr

    # What a review costs: a new token (TokenReview + SubjectAccessReview) and a cached one.
    fresh = [sa_with_token(admin, control_plane, other, f"fresh-{i}") for i in range(10)]
    # Each new token: its first request (TokenReview + SubjectAccessReview, both on the
    # apiserver) and its second (both answers cached), the same path and answer (403).
    timings: dict[str, list[float]] = {"uncached": [], "cached": [], "probe": []}
    for token in fresh:
        for kind in ("uncached", "cached"):
            started = time.perf_counter()
            assert get(f"{url}/explain/node/{NODES[0]}", token).status_code == 403
            timings[kind].append(time.perf_counter() - started)
        started = time.perf_counter()
        assert get(f"{url}/healthz").status_code == 200
        timings["probe"].append(time.perf_counter() - started)
    medians = {k: sorted(v)[len(v) // 2] * 1000 for k, v in timings.items()}
    print("access cost, median ms: " + ", ".join(f"{k} {v:.1f}" for k, v in medians.items()))


def plugin_path(tmp_path: Path) -> str:
    """PATH with the installed `kubectl-steer` (beside this Python) and the system's."""
    bin_dir = tmp_path / "plugin-bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "kubectl-steer"
    if not link.exists():
        link.symlink_to(Path(sys.executable).parent / "kubectl-steer")
    return f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"

"""The scorer's HTTP endpoints, its APScheduler loop and the `steer scorer` / `steer explain`
commands, over real HTTP against a real (backfilled) Prometheus and the API stand-in."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from kits.apistub import ApiStub
from kits.prometheus_server import PrometheusServer
from kits.synthetic_exporter import SyntheticCluster
from launcher.commands import main
from scorer.app import create_app
from scorer.cycle.loop import ScorerLoop
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from steer.adapters.http_server import HttpServer
from steer.adapters.kubejson import MERGE_PATCH, KubeJson, pod_path
from steer.adapters.lease import LeaseElector
from steer.core.mutation import MutationPlan, mutate_pod
from steer.core.policy import parse_policy
from tests.apistub_fixtures import client_for
from tests.scorer_support import SMALL_POLICY, backfilled_prometheus, stub_nodes

POLICY = parse_policy(SMALL_POLICY)
NODES = ("node-1", "node-2", "node-3")
GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-b"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "trainer",
                "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}},
            }
        ]
    },
}


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusServer]:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    for name, util in zip(NODES, (20, 50, 95), strict=True):
        cluster.set_gpu_util(name, util)
    with backfilled_prometheus(cluster, span_s=240) as server:
        yield server


@pytest.fixture
def cluster_api(apistub: ApiStub) -> ApiStub:
    stub_nodes(apistub, NODES)
    apistub.add_namespace("team-b", {"tenant": "dept-b", "kube-steer.github.io/enabled": "true"})
    return apistub


def scorer_for(stub: ApiStub, tmp_path: Path, prom: PrometheusServer, **kwargs: Any) -> Scorer:
    kube = client_for(stub, tmp_path / f"kubeconfig-{time.monotonic_ns()}")
    return Scorer(lambda: POLICY, NodeApi(KubeJson(kube)), prometheus_url=prom.url, **kwargs)


def session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    return s


def test_health_readiness_and_metrics(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    scorer = scorer_for(cluster_api, tmp_path, prom)
    http = session()
    with HttpServer(create_app(scorer)) as server:
        assert http.get(f"{server.url}/healthz").status_code == 200
        assert http.get(f"{server.url}/readyz").status_code == 503
        assert http.get(f"{server.url}/explain/nodes").status_code == 503
        scorer.run_cycle()
        assert http.get(f"{server.url}/readyz").status_code == 200
        text = http.get(f"{server.url}/metrics").text
    for needle in (
        "steer_scorer_cycle_duration_seconds_count 1.0",
        'steer_scorer_query_duration_seconds_count{dimension="util"} 1.0',
        'steer_scorer_queries_total{dimension="power"} 1.0',
        'steer_scorer_node_writes_total{result="ok"} 3.0',
        'steer_scorer_dimension_stale{dimension="overcommit-pct"} 0.0',
        "steer_scorer_leader 1.0",
        f'steer_scorer_policy_info{{version="{POLICY.version}"}} 1.0',
    ):
        assert needle in text


def test_explain_nodes_and_one_node(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    scorer = scorer_for(cluster_api, tmp_path, prom)
    scorer.run_cycle()
    scorer.run_cycle()
    http = session()
    with HttpServer(create_app(scorer)) as server:
        table = http.get(f"{server.url}/explain/nodes").json()
        detail = http.get(f"{server.url}/explain/node/node-3").json()
        missing = http.get(f"{server.url}/explain/node/nope")
    assert [n["node"] for n in table["nodes"]] == list(NODES)
    assert table["nodes"][0]["labels"]["kube-steer.github.io/score-util"] == "80"
    assert table["nodes"][0]["raw"]["util"] == 20.0
    assert table["leader"] is True
    assert [d["dimension"] for d in table["dimensions"]] == ["util", "power", "overcommit-pct"]
    assert detail["policyVersion"] == POLICY.version
    assert detail["dimensions"][0]["query"] == "avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)"
    assert detail["dimensions"][0]["raw"] == 95.0
    assert detail["taints"] == [
        {"key": "kube-steer.github.io/gpu-hot", "value": "true", "effect": "NoSchedule"}
    ]
    assert detail["conditions"][0]["active"] is True
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_explain_a_posted_and_an_existing_pod(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    scorer = scorer_for(cluster_api, tmp_path, prom)
    scorer.run_cycle()
    scorer.run_cycle()
    cluster_api.create("pods", GPU_POD)
    http = session()
    with HttpServer(create_app(scorer)) as server:
        posted = http.post(
            f"{server.url}/explain/pod",
            data=yaml.safe_dump(GPU_POD),
            headers={"Content-Type": "application/yaml"},
        ).json()
        existing = http.get(f"{server.url}/explain/pod/team-b/train").json()
        absent = http.get(f"{server.url}/explain/pod/team-b/nope")
        bad = http.post(f"{server.url}/explain/pod", data=b"[1, 2")
        malformed = http.post(
            f"{server.url}/explain/pod",
            json={**GPU_POD, "spec": {**GPU_POD["spec"], "tolerations": "all"}},
        )
    for body in (posted, existing):
        assert body["tenant"] == "dept-b" and body["podClass"] == "gpu"
        # node-2 has no limits in this cluster, so no overcommit label: allowed as unscored;
        # node-1 carries foreign taints the pod does not tolerate; node-3 is gpu-hot, which
        # the gpu class avoids and its taint forbids
        assert [(a["node"], a["rank"], a["steeringWeight"]) for a in body["allowed"]] == [
            ("node-2", 1, 50)
        ]
        rules = {e["node"]: {x["rule"] for x in e["exclusions"]} for e in body["excluded"]}
        assert rules == {
            "node-1": {
                "taint node.kubernetes.io/unreachable:NoExecute",
                "taint dedicated=ml:NoSchedule",
            },
            "node-3": {"avoid:gpu-hot", "taint kube-steer.github.io/gpu-hot=true:NoSchedule"},
        }
    assert absent.status_code == 404
    assert bad.status_code == 400 and "body" in bad.json()["error"]
    assert malformed.status_code == 400 and "spec.tolerations" in malformed.json()["error"]


def failed_scheduling(name: str, uid: str, message: str, at: str, **extra: Any) -> dict[str, Any]:
    """A FailedScheduling event as the scheduler's events.k8s.io recorder leaves it in core/v1."""
    return {
        "metadata": {"name": name, "namespace": "team-b"},
        "involvedObject": {"kind": "Pod", "namespace": "team-b", "name": "train", "uid": uid},
        "reason": "FailedScheduling",
        "type": "Warning",
        "message": message,
        "eventTime": at,
        "reportingComponent": "default-scheduler",
        "source": {},
        **extra,
    }


def test_a_live_pod_answer_carries_the_schedulers_own_verdict(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    scorer = scorer_for(cluster_api, tmp_path, prom)
    scorer.run_cycle()
    scorer.run_cycle()
    uid = cluster_api.create("pods", GPU_POD)["metadata"]["uid"]
    waiting = "0/3 nodes are available: 1 node(s) had untolerated taint {kube-steer.github.io/gpu-hot: true}."
    KubeJson(client_for(cluster_api, tmp_path / "kc-scheduler")).request(
        "PATCH",
        f"{pod_path('team-b', 'train')}/status",
        body={
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": waiting,
                        "lastTransitionTime": "2026-12-01T10:00:00Z",
                    }
                ]
            }
        },
        content_type=MERGE_PATCH,
    )
    for event in (
        failed_scheduling("train.1", uid, "an older verdict", "2026-12-01T10:00:00.000001Z"),
        failed_scheduling(
            "train.2",
            uid,
            waiting,
            "2026-12-01T10:00:00.500000Z",
            series={"count": 4, "lastObservedTime": "2026-12-01T10:05:00.250000Z"},
        ),
        # A pod of the same name deleted before, and another reason: not this verdict.
        failed_scheduling("train.3", "an-earlier-pod", "gone", "2026-12-01T11:00:00.000000Z"),
        {**failed_scheduling("train.4", uid, "pulled", "2026-12-01T11:00:00Z"), "reason": "Pulled"},
    ):
        cluster_api.create("events", event)
    http = session()
    cluster_api.clear_requests()
    with HttpServer(create_app(scorer)) as server:
        live = http.get(f"{server.url}/explain/pod/team-b/train").json()
        posted = http.post(f"{server.url}/explain/pod", json=GPU_POD).json()
    assert live["scheduler"] == {
        "node": None,
        "phase": "Pending",
        "podScheduled": {
            "status": "False",
            "reason": "Unschedulable",
            "message": waiting,
            "lastTransitionTime": "2026-12-01T10:00:00Z",
        },
        "failedScheduling": {
            "message": waiting,
            "count": 4,
            "lastSeen": "2026-12-01T10:05:00.250000Z",
            "reporter": "default-scheduler",
        },
        "eventsError": None,
    }
    # Beside kube-steer's own verdict on the node the scheduler names.
    rules = {e["node"]: {x["rule"] for x in e["exclusions"]} for e in live["excluded"]}
    assert "taint kube-steer.github.io/gpu-hot=true:NoSchedule" in rules["node-3"]
    (listed,) = [r for r in cluster_api.requests if r.path.endswith("/events")]
    assert listed.path == "/api/v1/namespaces/team-b/events"
    assert "involvedObject.name%3Dtrain" in listed.query and "FailedScheduling" in listed.query
    assert "scheduler" not in posted  # a pod that is not live has no scheduler verdict


def test_the_explain_page_is_served_with_its_own_files_only(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    scorer = scorer_for(cluster_api, tmp_path, prom)
    http = session()
    with HttpServer(create_app(scorer)) as server:
        page = http.get(f"{server.url}/")
        script = http.get(f"{server.url}/ui/page.js")
        style = http.get(f"{server.url}/ui/page.css")
        missing = [http.get(f"{server.url}/ui/{name}") for name in ("nope.js", "__init__.py")]
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    # Relative URLs only: the page works behind `kubectl proxy` and port-forwards.
    assert 'src="ui/page.js"' in page.text and 'href="ui/page.css"' in page.text
    assert "http://" not in page.text and "https://" not in page.text
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert script.status_code == 200 and "explain/nodes" in script.text
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert style.status_code == 200 and style.headers["Content-Type"].startswith("text/css")
    assert [r.status_code for r in missing] == [404, 404]


def test_a_replica_that_is_not_leader_serves_explain_but_never_writes(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    holder = LeaseElector(
        KubeJson(client_for(cluster_api, tmp_path / "kc-holder")),
        namespace="default",
        identity="other",
    )
    assert holder.try_acquire_or_renew()
    elector = LeaseElector(
        KubeJson(client_for(cluster_api, tmp_path / "kc-me")), namespace="default", identity="me"
    )
    assert not elector.try_acquire_or_renew()
    scorer = scorer_for(cluster_api, tmp_path, prom, elector=elector)
    cluster_api.clear_requests()
    scorer.run_cycle()
    with HttpServer(create_app(scorer)) as server:
        body = session().get(f"{server.url}/explain/nodes").json()
    assert body["leader"] is False and body["leaseHolder"] == "other"
    assert body["nodes"][0]["pendingLabelChanges"]["kube-steer.github.io/score-util"] == "80"
    assert cluster_api.count("PATCH") == 0


def test_the_scheduler_loop_runs_cycles_and_stops(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    fast = parse_policy(SMALL_POLICY.replace("intervalSeconds: 30", "intervalSeconds: 0.2"))
    kube = client_for(cluster_api, tmp_path / "kubeconfig")
    scorer = Scorer(lambda: fast, NodeApi(KubeJson(kube)), prometheus_url=prom.url)
    loop = ScorerLoop(scorer)
    loop.start()
    try:
        deadline = time.monotonic() + 20
        while loop.cycles < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        job = loop.scheduler.get_job("score")
        assert job.max_instances == 1 and job.coalesce is True and job.misfire_grace_time >= 1
    finally:
        loop.stop()
    assert loop.cycles >= 3 and loop.failures == 0
    assert (
        cluster_api.get("nodes", "node-3")["metadata"]["labels"]["kube-steer.github.io/gpu-hot"]
        == "true"
    )


def test_cli_once_dry_run_prints_the_plan_and_writes_nothing(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(SMALL_POLICY)
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    args = [
        "scorer",
        "once",
        "--policy",
        str(policy_file),
        "--prometheus",
        prom.url,
        "--kubeconfig",
        str(kubeconfig),
        "--dry-run",
    ]
    cluster_api.clear_requests()
    assert main([*args, "--output", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["dryRun"] is True and body["queries"] == 3 and body["nodesWritten"] == 0
    assert body["nodesToWrite"] == 3
    assert body["nodes"][1]["pendingLabelChanges"]["kube-steer.github.io/score-util"] == "50"
    assert main(args) == 0
    table = capsys.readouterr().out
    header = ["NODE", "LABELS", "TAINTS", "GATES", "AND", "POOL", "CHANGES"]
    assert header in [line.split() for line in table.splitlines()]
    assert "dry run: nothing written" in table
    assert cluster_api.count("PATCH") == 0
    # without --dry-run it writes
    assert main([*args[:-1], "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodesWritten"] == 3
    assert (
        cluster_api.get("nodes", "node-2")["metadata"]["labels"]["kube-steer.github.io/score-util"]
        == "50"
    )


def test_cli_once_names_what_to_check_when_every_dimension_fails(
    cluster_api: ApiStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(SMALL_POLICY)
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    args = ["scorer", "once", "--policy", str(policy_file), "--kubeconfig", str(kubeconfig)]
    # Nothing listens on port 9: every Prometheus query fails.
    assert main([*args, "--prometheus", "http://127.0.0.1:9", "--dry-run"]) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("every dimension failed: check --prometheus / spec.prometheus.url")
    )


def test_cli_explain_queries_a_running_scorer(
    cluster_api: ApiStub, tmp_path: Path, prom: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    scorer = scorer_for(cluster_api, tmp_path, prom)
    scorer.run_cycle()
    scorer.run_cycle()
    cluster_api.create("pods", GPU_POD)
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(GPU_POD))
    with HttpServer(create_app(scorer)) as server:
        assert main(["explain", "node", "node-3", "--scorer", server.url]) == 0
        node_out = capsys.readouterr().out
        assert main(["explain", "nodes", "--scorer", server.url]) == 0
        nodes_out = capsys.readouterr().out
        assert main(["explain", "pod", str(pod_file), "--scorer", server.url]) == 0
        pod_out = capsys.readouterr().out
        assert (
            main(
                [
                    "explain",
                    "pod",
                    "--ref",
                    "team-b/train",
                    "--scorer",
                    server.url,
                    "--output",
                    "json",
                ]
            )
            == 0
        )
        pod_json = json.loads(capsys.readouterr().out)
    assert "avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)" in node_out
    assert "condition gpu-hot: util (raw) Gt 90 observed 95 active=True" in node_out
    assert nodes_out.splitlines()[0].split() == [
        "NODE",
        "score-util",
        "score-power",
        "overcommit-pct",
        "score",
        "score-class-gpu",
        "TAINTS",
    ]
    util_row = next(line for line in node_out.splitlines() if line.startswith("util "))
    assert util_row.split()[:6] == ["util", "fresh", "95", "pct", "5", "score-util=10"]
    assert "excluded node-3: avoid:gpu-hot" in pod_out
    assert [a["node"] for a in pod_json["allowed"]] == ["node-2"]


def test_explain_audit_and_the_report_command(
    cluster_api: ApiStub,
    tmp_path: Path,
    prom: PrometheusServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`/explain/audit` reads the bound pods and namespaces from the API and judges the audited
    ones; `steer audit report` prints it."""
    audit_policy = parse_policy(SMALL_POLICY.replace("spec:\n", "spec:\n  mode: audit\n", 1))
    kube = client_for(cluster_api, tmp_path / "kubeconfig-audit")
    scorer = Scorer(lambda: audit_policy, NodeApi(KubeJson(kube)), prometheus_url=prom.url)
    scorer.run_cycle()
    scorer.run_cycle()
    plan = MutationPlan.from_policy(audit_policy)
    # node-1 carries foreign taints the pod does not tolerate (tests/scorer_support.py):
    # node-2 is the only node enforce mode would allow.
    for name, node in (("on-hot", "node-3"), ("on-best", "node-2"), ("waiting", None)):
        pod = copy.deepcopy({**GPU_POD, "metadata": {**GPU_POD["metadata"], "name": name}})
        stored = mutate_pod(plan, pod, audit_policy.tenant("dept-b")).apply(pod)
        if node is not None:
            stored["spec"]["nodeName"] = node
        cluster_api.create("pods", stored)
    cluster_api.create(
        "pods", {**GPU_POD, "metadata": {"name": "plain", "namespace": "team-b"}}
    )  # no trace: not audited
    http = session()
    with HttpServer(create_app(scorer)) as server:
        report = http.get(f"{server.url}/explain/audit").json()
        refused = http.get(f"{server.url}/explain/audit?limit=0")
        assert main(["audit", "report", "--scorer", server.url]) == 0
    assert report["pods"] == 2 and report["leader"] is True
    assert [(p["name"], p["node"]) for p in report["divergent"]] == [("on-hot", "node-3")]
    assert "avoid:gpu-hot" in report["divergent"][0]["excludedBy"]
    assert report["policyVersion"] == audit_policy.version
    assert refused.status_code == 400 and "limit" in refused.json()["error"]
    out = capsys.readouterr().out
    assert "2 audited pods judged, 1 on the policy's first choice (50 %)" in out
    assert "team-b/on-hot" in out

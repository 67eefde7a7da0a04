"""Install, renew, uninstall: `steer certs rotate` and `steer scorer cleanup` on the real
kube-apiserver v1.36.2, run as operators run them (`steer ...` subprocesses).

- Certificates: rotate creates the Secret and sets the caBundle of real webhook
  configurations (made here with unique names, failurePolicy Ignore and a namespaceSelector
  that matches nothing, so no other test's pods meet them), a second run changes nothing, a
  near-expiry or foreign certificate is issued again under the same CA, and the apiserver
  accepts the real webhook serving the rotated certificate.
- Uninstall: after real scorer cycles (labels, a NoSchedule taint, annotations and a budget
  pool in the node status), cleanup leaves every foreign label, taint, annotation and resource
  byte-identical and nothing of ours; a labelPrefix change seen by the running scorer takes the
  old prefix's keys off.
- Upgrade: nodes as release 0.1.0 left them (scores under `steer.io/<dimension>`) get the label
  contract in the scorer's first writes, every old key (and pool) goes, and the hot node's
  NoSchedule taint is on it, under the old key or the new, in every state the apiserver holds.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography import x509
from kubernetes import client

from certs.pki import CertificateAuthority, WebhookIdentity, issue_serving_cert, new_ca
from certs.store import CaStore
from kits.control_plane import ROOT, ControlPlane
from kits.net import free_port
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.service_processes import _spawn, _wait_http, running_scorer
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from steer.adapters.kubejson import MERGE_PATCH, KubeJson, node_path
from tests.e2e.waiting import NOT_YET
from tests.scorer_support import SMALL_POLICY

EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"


def steer(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`steer ARGS` from this checkout, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# ===================================================================================== certs

ADMISSION = "/apis/admissionregistration.k8s.io/v1"


@pytest.fixture
def webhook_configs(admin: KubeJson) -> Iterator[Callable[..., str]]:
    """configs(ca_bundle, url=..., failure="Ignore", selector=None) -> a unique name used by
    one MutatingWebhookConfiguration (one webhook) and one ValidatingWebhookConfiguration (two
    webhooks); both deleted at teardown."""
    made: list[str] = []

    def make(
        ca_bundle: str | None = None,
        url: str = "https://127.0.0.1:1/unused",
        failure: str = "Ignore",
        selector: Mapping[str, Any] | None = None,
    ) -> str:
        name = f"lifecycle-{uuid.uuid4().hex[:8]}"
        # Matches no namespace unless the test gives a selector of its own.
        never = selector or {"matchLabels": {f"lifecycle.example.com/{name}": "never"}}

        def hook(hook_name: str, path: str) -> dict[str, Any]:
            config: dict[str, Any] = {"url": url.replace("/unused", path)}
            if ca_bundle:
                config["caBundle"] = ca_bundle
            return {
                "name": hook_name,
                "admissionReviewVersions": ["v1"],
                "clientConfig": config,
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": never,
                "failurePolicy": failure,
                "sideEffects": "None",
                "timeoutSeconds": 5,
            }

        admin.request(
            "POST",
            f"{ADMISSION}/mutatingwebhookconfigurations",
            body={
                "metadata": {"name": name},
                "webhooks": [hook("m.lifecycle.kube-steer.github.io", "/mutate")],
            },
        )
        made.append(name)
        admin.request(
            "POST",
            f"{ADMISSION}/validatingwebhookconfigurations",
            body={
                "metadata": {"name": name},
                "webhooks": [
                    hook("v1.lifecycle.kube-steer.github.io", "/validate"),
                    hook("v2.lifecycle.kube-steer.github.io", "/validate/security"),
                ],
            },
        )
        return name

    yield make
    for name in made:
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            with contextlib.suppress(Exception):
                admin.request("DELETE", f"{ADMISSION}/{plural}/{name}")


def bundles(admin: KubeJson, name: str) -> dict[str, str | None]:
    out = {}
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        obj = admin.request("GET", f"{ADMISSION}/{plural}/{name}")
        for hook in obj["webhooks"]:
            out[hook["name"]] = hook["clientConfig"].get("caBundle")
    return out


def versions(admin: KubeJson, name: str) -> tuple[str, ...]:
    return tuple(
        admin.request("GET", f"{ADMISSION}/{plural}/{name}")["metadata"]["resourceVersion"]
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    )


def secret_path(namespace: str, name: str = "steer-webhook-tls") -> str:
    return f"/api/v1/namespaces/{namespace}/secrets/{name}"


def serving(admin: KubeJson, namespace: str) -> tuple[dict[str, Any], x509.Certificate]:
    secret = admin.request("GET", secret_path(namespace))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    return secret, cert


def put_cert(admin: KubeJson, namespace: str, ca: CertificateAuthority, days: int) -> None:
    """Replace the Secret's certificate by one of `ca` valid for `days` (and add a label)."""
    secret = admin.request("GET", secret_path(namespace))
    issued = issue_serving_cert(ca, WebhookIdentity("steer-webhook", namespace), days=days)
    secret["data"]["tls.crt"] = base64.b64encode(issued.cert_pem).decode()
    secret["data"]["tls.key"] = base64.b64encode(issued.key_pem).decode()
    secret["metadata"].setdefault("labels", {})["team.example.com/owner"] = "platform"
    admin.request("PUT", secret_path(namespace), body=secret)


def rotate_args(namespace: str, kubeconfig: Path, ca_dir: Path, *configs: str) -> list[str]:
    args = ["certs", "rotate", "--namespace", namespace, "--service", "steer-webhook"]
    args += ["--secret", "steer-webhook-tls", "--kubeconfig", str(kubeconfig)]
    args += ["--ca-dir", str(ca_dir)]
    for name in configs:
        args += ["--webhook-config", name]
    return args


def test_rotate_creates_the_secret_patches_ca_bundles_and_then_changes_nothing(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    webhook_configs: Callable[..., str],
    tmp_path: Path,
) -> None:
    ns = make_namespace(prefix="certs")
    stale = base64.b64encode(new_ca().cert_pem).decode()
    name = webhook_configs(stale)
    missing = f"lifecycle-missing-{uuid.uuid4().hex[:6]}"
    ca_dir = tmp_path / "ca"
    args = rotate_args(ns, control_plane.kubeconfig, ca_dir, name, missing)

    dry = steer(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would make a new CA" in dry.stdout and "dry run: nothing written" in dry.stdout
    assert not ca_dir.exists()
    assert bundles(admin, name) == dict.fromkeys(bundles(admin, name), stale)

    first = steer(*args)
    assert first.returncode == 0, first.stderr
    assert f"made a new CA in {ca_dir}" in first.stdout
    assert f"Secret {ns}/steer-webhook-tls: created" in first.stdout
    assert "because the Secret does not exist" in first.stdout
    assert f"MutatingWebhookConfiguration {name}: caBundle set in 1 of 1 webhooks" in first.stdout
    assert f"ValidatingWebhookConfiguration {name}: caBundle set in 2 of 2 webhooks" in first.stdout
    assert f"{missing}: no MutatingWebhookConfiguration or ValidatingWebhookConfiguration" in (
        first.stdout
    )

    ca = CaStore(ca_dir).load()
    bundle = base64.b64encode(ca.cert_pem).decode()
    assert bundles(admin, name) == {
        "m.lifecycle.kube-steer.github.io": bundle,
        "v1.lifecycle.kube-steer.github.io": bundle,
        "v2.lifecycle.kube-steer.github.io": bundle,
    }
    secret, cert = serving(admin, ns)
    assert secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["ca.crt"]) == ca.cert_pem
    cert.verify_directly_issued_by(ca.certificate)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"steer-webhook.{ns}.svc" in names.get_values_for_type(x509.DNSName)
    assert cert.not_valid_after_utc - datetime.now(UTC) > timedelta(days=364)

    before = (secret["metadata"]["resourceVersion"], versions(admin, name))
    second = steer(*args)
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout
    assert f"Secret {ns}/steer-webhook-tls: current" in second.stdout
    after_secret, _ = serving(admin, ns)
    assert (after_secret["metadata"]["resourceVersion"], versions(admin, name)) == before


def test_a_near_expiry_or_foreign_certificate_is_renewed_under_the_same_ca(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    webhook_configs: Callable[..., str],
    tmp_path: Path,
) -> None:
    ns = make_namespace(prefix="certs")
    name = webhook_configs()
    ca_dir = tmp_path / "ca"
    args = rotate_args(ns, control_plane.kubeconfig, ca_dir, name)
    assert steer(*args).returncode == 0
    ca = CaStore(ca_dir).load()
    configs_before = versions(admin, name)

    put_cert(admin, ns, ca, days=2)  # same CA, expires inside the 30-day window
    renewed = steer(*args)
    assert renewed.returncode == 0, renewed.stderr
    assert f"Secret {ns}/steer-webhook-tls: replaced" in renewed.stdout
    assert "within --renew-before (30 days)" in renewed.stdout
    secret, cert = serving(admin, ns)
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.not_valid_after_utc - datetime.now(UTC) > timedelta(days=364)
    assert secret["metadata"]["labels"] == {"team.example.com/owner": "platform"}
    # Same CA: the configurations were not written at all.
    assert versions(admin, name) == configs_before
    assert "caBundle current in all 2 webhooks" in renewed.stdout

    # A shorter window keeps a 2-day certificate; another CA's certificate is replaced.
    put_cert(admin, ns, ca, days=2)
    kept = steer(*args, "--renew-before", "1")
    assert "nothing to do" in kept.stdout, kept.stdout
    put_cert(admin, ns, new_ca(), days=300)
    foreign = steer(*args)
    assert "because tls.crt is not signed by the CA" in foreign.stdout
    serving(admin, ns)[1].verify_directly_issued_by(ca.certificate)


def test_rotate_reports_an_unreachable_apiserver_and_a_denial_without_a_traceback(
    control_plane: ControlPlane, make_namespace: Callable[..., str], tmp_path: Path
) -> None:
    ns = make_namespace(prefix="certs")
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(
        control_plane.kubeconfig.read_text().replace(
            control_plane.url, f"https://127.0.0.1:{free_port()}"
        )
    )
    unreachable = steer(*rotate_args(ns, dead, tmp_path / "ca"), timeout=120)
    assert unreachable.returncode == 2
    assert "steer certs rotate: cannot reach the Kubernetes API" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr + unreachable.stdout

    nobody = control_plane.user_kubeconfig(f"lifecycle-{uuid.uuid4().hex[:6]}")
    denied = steer(*rotate_args(ns, nobody, tmp_path / "ca"))
    assert denied.returncode == 2
    assert "the Kubernetes API refused GET /api/v1/namespaces/" in denied.stderr
    assert "(HTTP 403)" in denied.stderr and "needs get, create and update on secrets" in (
        denied.stderr
    )
    assert "Traceback" not in denied.stderr + denied.stdout


def test_the_apiserver_calls_the_webhook_serving_the_rotated_certificate(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    webhook_configs: Callable[..., str],
    tmp_path: Path,
) -> None:
    """failurePolicy Fail on one namespace of this test: a pod is created there only if the
    apiserver completed TLS with the webhook under the caBundle that rotate set."""
    ns = make_namespace(prefix="certs")
    target = make_namespace({"lifecycle.example.com/target": ns}, prefix="certs-target")
    port, metrics_port = free_port(), free_port()
    name = webhook_configs(
        url=f"https://127.0.0.1:{port}/unused",
        failure="Fail",
        selector={"matchLabels": {"lifecycle.example.com/target": ns}},
    )
    args = rotate_args(ns, control_plane.kubeconfig, tmp_path / "ca", name)
    done = steer(*args, "--ip", "127.0.0.1")
    assert done.returncode == 0, done.stderr

    secret = admin.request("GET", secret_path(ns))
    certs = tmp_path / "serving"
    certs.mkdir(mode=0o700)
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (certs / key).write_bytes(base64.b64decode(secret["data"][key]))
    (certs / "tls.key").chmod(0o600)
    hook = _spawn(
        "webhook",
        [
            "webhook", "serve", "--policy", str(EXAMPLE_POLICY),
            "--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key"),
            "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{metrics_port}",
            "--kubeconfig", str(control_plane.kubeconfig), "--workers", "1",
        ],
        tmp_path / "webhook.log",
    )  # fmt: skip
    try:
        _wait_http(hook, f"https://127.0.0.1:{port}/readyz", 60, verify=str(certs / "ca.crt"))
        core = client.CoreV1Api(control_plane.api_client())
        pod = {
            "metadata": {"name": "through-the-webhook"},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause"}]},
        }

        # The webhook's namespace cache learns the namespace a moment after it appears.
        def created() -> bool:
            try:
                core.create_namespaced_pod(target, pod)
            except client.ApiException as exc:
                assert "failed calling webhook" not in str(exc.body) or "x509" not in str(
                    exc.body
                ), exc.body
                return False
            return True

        wait_until("pod admitted through the webhook", created, timeout=30, ignoring=NOT_YET)
        # The apiserver did call it (the pod was not admitted around it).
        with requests.Session() as session:
            session.trust_env = False
            metrics = session.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        answered = [
            line
            for line in metrics.splitlines()
            if line.startswith("steer_webhook_admission_duration_seconds_count")
            and 'endpoint="mutate"' in line
        ]
        assert answered and any(float(line.split()[-1]) >= 1 for line in answered), metrics
    finally:
        hook.stop()
    assert "Traceback" not in hook.log()


# ================================================================================== cleanup

NODES = ("lifecycle-1", "lifecycle-2", "lifecycle-3")
FOREIGN_LABELS = {
    "team.example.com/owner": "ml",
    "kube-steer.github.io/not-ours": "1",  # our prefix, a key we never wrote
    "kube-steer.github.io.example.com/score-util": "7",  # a look-alike prefix
}
FOREIGN_ANNOTATIONS = {
    "team.example.com/note": "hands off",
    "kube-steer.github.io/not-ours": '{"labels":["kube-steer.github.io/score-util"]}',
    "example.com/managed": '{"labels":["team.example.com/owner"],"taints":[]}',
}
FOREIGN_TAINTS = [
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-30T03:58:30Z"},
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
]  # fmt: skip
FOREIGN_RESOURCE = "example.com/fpga"
# A node's own keys: labels, annotations, taints, extended resources in its capacity.
NodeKeys = tuple[dict[str, str], dict[str, str], list[dict[str, str]], dict[str, str]]
NEW_PREFIX = "lifecycle.example.com/"


def lifecycle_policy(prefix: str | None = None) -> str:
    """SMALL_POLICY scoring every second, budgets enforced by the scheduler (the pool
    `kube-steer.github.io/pool-cpu|memory` goes into every node's status), optionally
    another label prefix."""
    text = SMALL_POLICY.replace("intervalSeconds: 30", "intervalSeconds: 1")
    text += "  overcommit: {enforcement: scheduler}\n"
    if prefix:
        text += f"  labelPrefix: {prefix}\n"
    return text


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[SyntheticCluster, PrometheusServer]]:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2, node_prefix="lifecycle-")
    for name, util, watts in zip(NODES, (20, 50, 95), (300, 400, 500), strict=True):
        cluster.set_gpu_util(name, util)
        cluster.set_power(name, package_watts=watts)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        prom.wait_for("sum by (node_name) (kepler_node_cpu_watts)", lambda r: len(r.samples) == 3)
        yield cluster, prom


def stage_nodes(
    make_node: Callable[..., dict[str, Any]],
    admin: KubeJson,
    state: Callable[[str], NodeKeys] = lambda _name: ({}, {}, [], {}),
) -> dict[str, dict[str, Any]]:
    """The three nodes with foreign labels, annotations, taints and an extended resource, plus
    `state(name)`'s own (labels, annotations, taints, capacity), as stored before the scorer
    under test ran."""
    before = {}
    for name in NODES:
        labels, annotations, taints, capacity = state(name)
        make_node(
            name,
            gpus=2,
            labels={**FOREIGN_LABELS, **labels},
            taints=[*FOREIGN_TAINTS, *taints],
            extra_capacity={FOREIGN_RESOURCE: "1", **capacity},
        )
        admin.request(
            "PATCH",
            node_path(name),
            body={"metadata": {"annotations": {**FOREIGN_ANNOTATIONS, **annotations}}},
            content_type=MERGE_PATCH,
        )
        before[name] = admin.request("GET", node_path(name))
    return before


@pytest.fixture
def nodes(make_node: Callable[..., dict[str, Any]], admin: KubeJson) -> dict[str, dict[str, Any]]:
    return stage_nodes(make_node, admin)


@contextlib.contextmanager
def lifecycle_scorer(
    control_plane: ControlPlane, prom: PrometheusServer, tmp_path: Path
) -> Iterator[Path]:
    """`steer scorer run` (no leader election) on `lifecycle_policy()`, ready; yields the
    policy file it hot-reloads."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(lifecycle_policy())
    with running_scorer(
        control_plane, policy, prom.url, tmp_path, extra_args=["--no-leader-election"]
    ) as scorer:
        scorer.wait_ready()
        yield policy


def ours(node: Mapping[str, Any], prefix: str) -> dict[str, list[str]]:
    """Every key under `prefix` that is not foreign: labels, annotations, taints, resources."""
    meta, status = node["metadata"], node["status"]
    return {
        "labels": sorted(k for k in meta.get("labels") or {} if k.startswith(prefix) and k not in FOREIGN_LABELS),
        "annotations": sorted(k for k in meta.get("annotations") or {} if k.startswith(prefix) and k not in FOREIGN_ANNOTATIONS),
        "taints": sorted(t["key"] for t in node["spec"].get("taints") or () if t["key"].startswith(prefix)),
        "resources": sorted(r for r in {**status["capacity"], **status["allocatable"]} if r.startswith(prefix)),
    }  # fmt: skip


RESOURCES = "kube-steer.github.io/"  # the policy's resourcePrefix (pool and gates)


def written(admin: KubeJson, prefix: str) -> bool:
    """Every node carries labels, the record, and the budget pool; node 3 the hot taint."""
    for name in NODES:
        node = admin.request("GET", node_path(name))
        mine = ours(node, prefix)
        if not (mine["labels"] and f"{prefix}managed" in mine["annotations"]):
            return False
        if f"{RESOURCES}pool-cpu" not in node["status"]["allocatable"]:
            return False
    return f"{prefix}gpu-hot" in ours(admin.request("GET", node_path(NODES[2])), prefix)["taints"]


def assert_as_before(node: Mapping[str, Any], before: Mapping[str, Any]) -> None:
    """Labels, annotations and taints byte-identical to before the scorer ran; the status
    resources too."""

    def dump(obj: Any) -> str:
        return json.dumps(obj, sort_keys=True)

    assert dump(node["metadata"]["labels"]) == dump(before["metadata"]["labels"])
    assert dump(node["metadata"]["annotations"]) == dump(before["metadata"]["annotations"])
    assert dump(node["spec"].get("taints")) == dump(before["spec"].get("taints"))
    for part in ("capacity", "allocatable"):
        assert dump(node["status"][part]) == dump(before["status"][part])


def test_cleanup_after_real_cycles_leaves_foreign_keys_byte_identical_and_none_of_ours(
    control_plane: ControlPlane,
    scraped: tuple[SyntheticCluster, PrometheusServer],
    nodes: dict[str, dict[str, Any]],
    admin: KubeJson,
    tmp_path: Path,
) -> None:
    with lifecycle_scorer(control_plane, scraped[1], tmp_path) as policy:
        wait_until(
            "the scorer wrote every kind of key",
            lambda: written(admin, "kube-steer.github.io/"),
            timeout=30,
            ignoring=NOT_YET,
        )
    kubeconfig = str(control_plane.kubeconfig)

    dry = steer(
        "scorer", "cleanup", "--policy", str(policy), "--kubeconfig", kubeconfig, "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    assert (
        "dry run: 3 of" in dry.stdout and "would remove labels kube-steer.github.io/" in dry.stdout
    )
    assert written(admin, "kube-steer.github.io/")

    done = steer("scorer", "cleanup", "--policy", str(policy), "--kubeconfig", kubeconfig)
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"{NODES[2]}: removed labels " in done.stdout
    assert "taints kube-steer.github.io/gpu-hot" in done.stdout
    assert f"resources {RESOURCES}avoid-gpu-hot" in done.stdout
    for name in NODES:
        node = admin.request("GET", node_path(name))
        assert ours(node, "kube-steer.github.io/") == {
            "labels": [],
            "annotations": [],
            "taints": [],
            "resources": [],
        }
        assert ours(node, RESOURCES)["resources"] == []  # no pod held them: all gone
        assert_as_before(node, nodes[name])

    again = steer("scorer", "cleanup", "--policy", str(policy), "--kubeconfig", kubeconfig)
    assert again.returncode == 0 and "0 nodes cleaned" in again.stdout, again.stdout


def test_a_label_prefix_change_takes_the_old_prefix_off_every_node(
    control_plane: ControlPlane,
    scraped: tuple[SyntheticCluster, PrometheusServer],
    nodes: dict[str, dict[str, Any]],
    admin: KubeJson,
    tmp_path: Path,
) -> None:
    with lifecycle_scorer(control_plane, scraped[1], tmp_path) as policy:
        wait_until(
            "keys under kube-steer.github.io/",
            lambda: written(admin, "kube-steer.github.io/"),
            timeout=30,
            ignoring=NOT_YET,
        )
        # The running scorer hot-reloads the policy with the new prefix.
        policy.write_text(lifecycle_policy(NEW_PREFIX))

        def moved() -> bool:
            old = [ours(admin.request("GET", node_path(n)), "kube-steer.github.io/") for n in NODES]
            # The resources keep their prefix (the label prefix changed, the resource one not).
            return written(admin, NEW_PREFIX) and not any(
                o[part] for o in old for part in ("labels", "annotations", "taints")
            )

        wait_until("old prefix retired, new one written", moved, timeout=45, ignoring=NOT_YET)
    for name in NODES:
        node = admin.request("GET", node_path(name))
        # Foreign keys (including the kube-steer.github.io/not-ours label and annotation) are still there.
        for key, value in FOREIGN_LABELS.items():
            assert node["metadata"]["labels"][key] == value
        for key, value in FOREIGN_ANNOTATIONS.items():
            assert node["metadata"]["annotations"][key] == value
        assert node["spec"]["taints"][:2] == FOREIGN_TAINTS
        assert node["status"]["allocatable"][FOREIGN_RESOURCE] == "1"
    # And cleanup with the new policy leaves the nodes as they were before any scorer ran.
    done = steer(
        "scorer", "cleanup", "--policy", str(policy), "--kubeconfig", str(control_plane.kubeconfig)
    )
    assert done.returncode == 0, done.stderr + done.stdout
    for name in NODES:
        assert_as_before(admin.request("GET", node_path(name)), nodes[name])


# ================================================================================== upgrade

OLD_PREFIX = "steer.io/"


def release_0_1_0_state(name: str) -> NodeKeys:
    """Labels, annotations and taints as release 0.1.0's scorer left them on a node of this
    module under the same policy (key set as in tests/fixtures/nodes/written-by-0.1.0.json):
    scores under bare dimension names, `score-gpu` for the class, its record and times, and
    the 0 % cpu budget pool."""
    hot = name == NODES[2]
    labels = {f"{OLD_PREFIX}util": "50", f"{OLD_PREFIX}power": "50", f"{OLD_PREFIX}score": "50"}
    labels[f"{OLD_PREFIX}score-gpu"] = "50"
    taints = []
    if hot:
        labels[f"{OLD_PREFIX}gpu-hot"] = "true"
        taints = [{"key": f"{OLD_PREFIX}gpu-hot", "value": "true", "effect": "NoSchedule"}]
    record = {
        "labels": sorted(labels),
        "taints": [t["key"] for t in taints],
        "resources": [f"{OLD_PREFIX}limits-0pct-cpu"],
    }
    annotations = {
        f"{OLD_PREFIX}managed": json.dumps(record, separators=(",", ":")),
        f"{OLD_PREFIX}observed-at": '{"power":"2026-11-30T04:00:00Z","util":"2026-11-30T04:00:00Z"}',
    }
    return labels, annotations, taints, {f"{OLD_PREFIX}limits-0pct-cpu": "8000"}


def test_an_upgrade_from_0_1_0_moves_every_key_and_never_lifts_the_hot_taint(
    control_plane: ControlPlane,
    scraped: tuple[SyntheticCluster, PrometheusServer],
    make_node: Callable[..., dict[str, Any]],
    admin: KubeJson,
    tmp_path: Path,
) -> None:
    before = stage_nodes(make_node, admin, release_0_1_0_state)
    for name in NODES:
        assert ours(before[name], OLD_PREFIX)["resources"] == [f"{OLD_PREFIX}limits-0pct-cpu"]
    new = "kube-steer.github.io/"
    hot_keys = {f"{OLD_PREFIX}gpu-hot", f"{new}gpu-hot"}
    observed = 0
    with lifecycle_scorer(control_plane, scraped[1], tmp_path):

        def moved() -> bool:
            nonlocal observed
            hot = admin.request("GET", node_path(NODES[2]))
            observed += 1
            # Every state the apiserver holds during the upgrade keeps the hot node tainted.
            assert hot_keys & {t["key"] for t in hot["spec"].get("taints") or ()}, hot["spec"]
            old = [ours(admin.request("GET", node_path(n)), OLD_PREFIX) for n in NODES]
            return written(admin, new) and all(not any(o.values()) for o in old)

        wait_until("0.1.0 keys replaced by the label contract", moved, timeout=45, ignoring=NOT_YET)
    assert observed >= 1
    for name in NODES:
        node = admin.request("GET", node_path(name))
        labels = node["metadata"]["labels"]
        assert ours(node, OLD_PREFIX) == {
            "labels": [],
            "annotations": [],
            "taints": [],
            "resources": [],
        }
        assert {
            f"{new}score-util",
            f"{new}score-power",
            f"{new}score",
            f"{new}score-class-gpu",
        } <= set(labels)
        for key, value in FOREIGN_LABELS.items():
            assert labels[key] == value
        for key, value in FOREIGN_ANNOTATIONS.items():
            assert node["metadata"]["annotations"][key] == value
        assert node["spec"]["taints"][:2] == FOREIGN_TAINTS
        assert node["status"]["allocatable"][FOREIGN_RESOURCE] == "1"
    assert [t["key"] for t in admin.request("GET", node_path(NODES[2]))["spec"]["taints"][2:]] == [
        f"{new}gpu-hot"
    ]

"""Fault: the webhook's Deployment rolled while pods are created as fast as a client can
(issue: when the control plane misbehaves), on the real kube-apiserver, etcd and kube-scheduler
v1.36.2 and real webhook processes.

The apiserver reaches the webhook as in a cluster: through its Service (`clientConfig.service`,
TLS verified for steer-webhook.kube-steer.svc), resolved to one ready address of the Service's
endpoints per call (`--enable-aggregator-routing`: the apiserver picks the endpoint itself, as
kube-proxy would for a ClusterIP). Two replicas serve on addresses added to `lo`; the test plays the
Deployment controller, the EndpointSlice controller and the kubelet, in the manifest's order
(`maxSurge: 1, maxUnavailable: 0`): a new replica starts, becomes ready and joins the
endpoints; then an old one is deleted: its endpoint leaves the ready ones at once, the kubelet
runs its preStop hook (manifests/webhook/webhook.yaml, `lifecycle.preStop.sleep`), then sends
SIGTERM and the process drains. Meanwhile four clients create pods in an opted-in namespace
at 10 pods a second each (a scale-up of several hundred pods during the roll).

What must hold, and is printed as figures: 0 creates refused, 0 pods admitted without the
webhook's trace (failurePolicy Ignore would let them in unsteered), and the apiserver's own
count of webhook calls that failed open stays 0.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from certs import WebhookIdentity, issue_webhook_certs, write_webhook_certs
from kits.control_plane import ROOT, ControlPlane
from kits.service_processes import (
    ADMISSION_MANIFEST,
    RunningWebhook,
    ServingCertificate,
    create_or_replace,
    running_webhook,
)
from kits.waiting import wait_until
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeApiError, KubeJson
from tests.scorer_support import SMALL_POLICY

NS = "kube-steer"
SERVICE = "steer-webhook"
PORT = 8443
# Pod addresses: an Endpoints address may not be loopback, so these are added to `lo` for the
# test (as root, as CI runs) and removed after.
OLD = ("10.250.0.11", "10.250.0.12")
NEW = ("10.250.0.13", "10.250.0.14")
TRACE = "kube-steer.github.io/trace"
OPT_IN = "kube-steer.github.io/enabled"
CLIENTS = 4
CLIENT_RATE = 10.0  # pods a second each: a scale-up of several hundred pods, not a saturation test
# From a pod's deletion to the apiserver's endpoint cache without it: the EndpointSlice
# controller's write, then the apiserver's watch (well under a second on an idle control
# plane; a busy one takes longer).
ENDPOINTS_LAG_S = 1.0
WEBHOOK_MANIFEST = ROOT / "manifests" / "webhook" / "webhook.yaml"


def prestop_sleep_s() -> float:
    """The preStop sleep the manifest gives the webhook's container (0 without one)."""
    docs = [d for d in yaml.safe_load_all(WEBHOOK_MANIFEST.read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    hook = (container.get("lifecycle") or {}).get("preStop") or {}
    return float((hook.get("sleep") or {}).get("seconds") or 0)


@pytest.fixture(scope="module")
def pod_addresses() -> Iterator[None]:
    added = []
    try:
        for ip in (*OLD, *NEW):
            done = subprocess.run(
                ["ip", "addr", "add", f"{ip}/32", "dev", "lo"], capture_output=True, text=True
            )
            if done.returncode != 0 and "File exists" not in done.stderr:
                pytest.fail(f"adding {ip} to lo needs root (CAP_NET_ADMIN): {done.stderr.strip()}")
            added.append(ip)
        yield
    finally:
        for ip in added:
            subprocess.run(["ip", "addr", "del", f"{ip}/32", "dev", "lo"], capture_output=True)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane.start(
        tmp_path_factory.mktemp("webhook-rollout"),
        apiserver_args=["--enable-aggregator-routing=true"],
    ) as started:
        yield started


def set_endpoints(admin: KubeJson, ready: list[str], terminating: list[str]) -> None:
    """The Service's endpoints as the controllers keep them: `ready` serve, `terminating`
    (deleted pods) do not receive new calls. Endpoints and EndpointSlice both, as a cluster
    has both."""
    subsets: list[dict[str, Any]] = []
    if ready or terminating:
        subset: dict[str, Any] = {"ports": [{"port": PORT, "protocol": "TCP"}]}
        if ready:
            subset["addresses"] = [{"ip": ip} for ip in ready]
        if terminating:
            subset["notReadyAddresses"] = [{"ip": ip} for ip in terminating]
        subsets = [subset]
    body = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": SERVICE, "namespace": NS},
        "subsets": subsets,
    }
    put_or_create(admin, f"/api/v1/namespaces/{NS}/endpoints", body)
    endpoints = [
        {"addresses": [ip], "conditions": {"ready": True, "serving": True, "terminating": False}}
        for ip in ready
    ] + [
        {"addresses": [ip], "conditions": {"ready": False, "serving": True, "terminating": True}}
        for ip in terminating
    ]
    slice_body = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": SERVICE,
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": SERVICE},
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"port": PORT, "protocol": "TCP"}],
    }
    put_or_create(admin, f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", slice_body)


def put_or_create(admin: KubeJson, collection: str, body: dict[str, Any]) -> None:
    """Replace the object of `body`'s name in `collection`, or create it."""
    path = f"{collection}/{body['metadata']['name']}"
    try:
        current = admin.request("GET", path)
    except KubeApiError as exc:
        if exc.status != 404:
            raise
        admin.request("POST", collection, body=body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    admin.request("PUT", path, body=body)


def register(plane: ControlPlane, ca_bundle: str) -> None:
    """The manifest's admission configurations as installed: through the Service."""
    admission = client.AdmissionregistrationV1Api(plane.api_client())
    for doc in (d for d in yaml.safe_load_all(ADMISSION_MANIFEST.read_text()) if d):
        for hook in doc.get("webhooks", []):
            hook["clientConfig"]["caBundle"] = ca_bundle
        create_or_replace(admission, doc)


@contextlib.contextmanager
def storm(admin: KubeJson, namespace: str) -> Iterator[dict[str, Any]]:
    """CLIENTS threads creating CLIENT_RATE pods a second each until the block ends."""
    made: dict[str, Any] = {"created": 0, "refused": [], "unsteered": []}
    lock = threading.Lock()
    stop = threading.Event()

    def client(k: int) -> None:
        i = 0
        while not stop.wait(1 / CLIENT_RATE):
            name = f"storm-{k}-{i:04d}"
            i += 1
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                    "terminationGracePeriodSeconds": 0,
                },
            }
            try:
                pod = admin.request(
                    "POST",
                    f"/api/v1/namespaces/{namespace}/pods",
                    body=body,
                    query={"dryRun": "All"},
                )
            except KubeApiError as exc:
                with lock:
                    made["refused"].append(f"{name}: {exc.status} {exc.message[:120]}")
                continue
            with lock:
                made["created"] += 1
                if TRACE not in (pod["metadata"].get("annotations") or {}):
                    made["unsteered"].append(name)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    try:
        yield made
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)


def fail_open(plane: ControlPlane) -> float:
    """The apiserver's count of mutating calls to the webhook that failed and were ignored."""
    text = plane.kubectl("get", "--raw", "/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_admission_webhook_fail_open_count") and "mutate" in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_webhook_rollout_under_a_pod_storm_leaves_no_pod_unsteered(
    plane: ControlPlane,
    pod_addresses: None,
    tmp_path: Path,
    fault_summary: Callable[[str], None],
) -> None:
    admin = KubeJson(make_api_client(str(plane.kubeconfig)))
    plane.ensure_namespace(NS)
    namespace = f"storm-{uuid.uuid4().hex[:6]}"
    plane.ensure_namespace(namespace, {OPT_IN: "true"})
    admin.request(
        "POST",
        f"/api/v1/namespaces/{NS}/services",
        body={
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NS},
            "spec": {"ports": [{"port": 443, "targetPort": PORT, "protocol": "TCP"}]},
        },
    )
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(SMALL_POLICY)
    issued = issue_webhook_certs(WebhookIdentity(SERVICE, NS, (), (*OLD, *NEW)))
    paths = write_webhook_certs(tmp_path / "tls", issued)
    certificate = ServingCertificate(paths.cert, paths.key, paths.ca_cert)
    prestop = prestop_sleep_s()
    with contextlib.ExitStack() as stack:

        def replica(ip: str) -> RunningWebhook:
            folder = tmp_path / ip
            folder.mkdir()
            return stack.enter_context(
                running_webhook(
                    plane,
                    policy_file,
                    folder,
                    listen=f"{ip}:{PORT}",
                    certificate=certificate,
                )
            )

        replicas = {ip: replica(ip) for ip in OLD}
        set_endpoints(admin, list(OLD), [])
        register(plane, issued.ca_bundle)
        probe = {
            "metadata": {"name": "probe"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
        wait_until(
            "the webhook in force through its Service",
            lambda: (
                TRACE
                in (
                    admin.request(
                        "POST",
                        f"/api/v1/namespaces/{namespace}/pods",
                        body=probe,
                        query={"dryRun": "All"},
                    )["metadata"].get("annotations")
                    or {}
                )
                or None
            ),
            timeout=30,
            interval=0.5,
        )
        failed_before = fail_open(plane)
        started = time.monotonic()
        with storm(admin, namespace) as made:
            time.sleep(2)
            ready = list(OLD)
            for old, new in zip(OLD, NEW, strict=True):
                replicas[new] = replica(new)  # maxSurge 1: the new one first, ready
                ready.append(new)
                set_endpoints(admin, ready, [])
                time.sleep(1)
                # The old pod is deleted. Two things follow at once and race: the EndpointSlice
                # controller takes it out of the ready endpoints, which the apiserver learns
                # ENDPOINTS_LAG_S later from its watch; the kubelet runs the preStop hook,
                # then sends SIGTERM.
                ready.remove(old)
                leave = threading.Timer(ENDPOINTS_LAG_S, set_endpoints, (admin, list(ready), [old]))
                leave.start()
                time.sleep(prestop)
                replicas[old].process.terminate()
                replicas[old].process.wait(timeout=30)
                leave.join()
                set_endpoints(admin, ready, [])  # gone
            time.sleep(2)
        rolled_s = time.monotonic() - started
        failed_open = fail_open(plane) - failed_before

    fault_summary(
        f"webhook rolled (2 replicas, maxSurge 1, preStop sleep {prestop:g} s) in {rolled_s:.1f} s "
        f"under {CLIENTS} clients creating {CLIENT_RATE:g} pods a second each: {made['created']} pods admitted, "
        f"{len(made['refused'])} refused, {len(made['unsteered'])} unsteered, calls failed open "
        f"{failed_open:g}"
    )
    assert made["created"] > 100, made["created"]
    if failed_open or made["unsteered"]:
        log = (plane.logs_dir / "kube-apiserver.log").read_text(errors="replace")
        print("\n".join(ln for ln in log.splitlines() if "failed calling webhook" in ln)[-3000:])
    assert not made["refused"], made["refused"][:5]
    assert not made["unsteered"], made["unsteered"][:5]
    assert failed_open == 0

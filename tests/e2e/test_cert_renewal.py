"""The webhook's certificate renewed in the cluster while pods are created (docs/webhook.md,
"Certificates"), on the real kube-apiserver.

The apiserver calls `steer webhook serve` over TLS through the project's admission
configurations, set to failurePolicy Fail for this test's namespace: a call that fails TLS
refuses the pod. `steer controller run --webhook-certs=renew` runs as a user bound to the rules the
manifests give the controller (its ClusterRole, its Lease Role, and the renewal's Role and
ClusterRole with this test's names), leader-elected. A thread plays the kubelet: it copies the
Secret into the webhook's certificate files a second after each write, with the kubelet's atomic
swap of a `..data` symlink. Pods are created one after another the whole time; every one must
be admitted and steered (the mutating webhook's trace annotation).

- A serving certificate made to expire within two minutes is issued again under the same CA,
  the caBundles untouched.
- A CA made to expire within minutes is replaced: the new CA beside the old one in every
  caBundle, the certificate under the new CA, the old CA dropped once the webhook serves it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes import client

from certs.pki import CertificateAuthority, WebhookIdentity, issue_serving_cert, new_ca
from certs.rollover import parse_bundle
from kits.control_plane import ROOT, ControlPlane
from kits.service_processes import (
    RunningController,
    RunningWebhook,
    ServingCertificate,
    admission_configurations,
    running_controller,
    running_webhook,
)
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeApiError, KubeJson
from tests.e2e.conftest import may, user_bound_to

POLICY = ROOT / "manifests" / "policy" / "starter-policy.yaml"
CONTROLLER = ROOT / "manifests" / "controller" / "controller.yaml"
RENEWAL_RBAC = ROOT / "manifests" / "controller" / "webhook-certs.yaml"
TRACE = "kube-steer.github.io/trace"
TARGET_LABEL = "e2e.kube-steer.github.io/cert-renewal"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURALS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
# The kubelet refreshes a Secret volume a minute or more after a write, longer than the leader's
# check interval (a minute): here 5 s against 2 s, so a step that ran ahead of what the webhook
# serves would refuse pods.
KUBELET_DELAY_S = 5.0
CHECK_INTERVAL_S = 2
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_ADMISSION = "admissionregistration.k8s.io"
RBAC = f"/apis/{RBAC_GROUP}/v1"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


def expiring_in(seconds: float) -> datetime:
    """The `now` to issue a 1-day certificate (or CA) at for it to end `seconds` from now."""
    return datetime.now(UTC) - timedelta(days=1) + timedelta(seconds=seconds)


# --- the kubelet's Secret volume ---------------------------------------------------------------


class SecretVolume:
    """The Secret's keys as files in `folder`, swapped as the kubelet swaps them: a new
    timestamped folder, then one rename of the `..data` symlink (every file changes at once),
    `delay_s` after the write is seen."""

    KEYS = ("tls.crt", "tls.key", "ca.crt")

    def __init__(self, admin: KubeJson, namespace: str, name: str, folder: Path) -> None:
        self.admin = admin
        self.path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        self.folder = folder
        self.version = ""
        self.swaps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)

    def mount(self) -> ServingCertificate:
        self.folder.mkdir(mode=0o700)
        self._sync()
        for key in self.KEYS:
            (self.folder / key).symlink_to(f"..data/{key}")
        self._thread.start()
        return ServingCertificate(*(self.folder / k for k in self.KEYS))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            with contextlib.suppress(KubeApiError):
                self._sync()

    def _sync(self) -> None:
        secret = self.admin.request("GET", self.path)
        if secret["metadata"]["resourceVersion"] == self.version:
            return
        if self.version:
            time.sleep(KUBELET_DELAY_S)
        self.version = secret["metadata"]["resourceVersion"]
        stamp = self.folder / f"..{time.time_ns()}"
        stamp.mkdir(mode=0o700)
        for key in self.KEYS:
            (stamp / key).write_bytes(base64.b64decode(secret["data"][key]))
        old = (self.folder / "..data").resolve() if (self.folder / "..data").exists() else None
        (self.folder / "..data_tmp").symlink_to(stamp.name)
        os.replace(self.folder / "..data_tmp", self.folder / "..data")
        if old is not None:
            for file in old.iterdir():
                file.unlink()
            old.rmdir()
        self.swaps += 1


# --- pods created all along --------------------------------------------------------------------


@dataclass
class PodTraffic:
    """Creates pods in `namespace` one after another until stopped: each admitted and
    steered, or a failure with the apiserver's message."""

    api: client.ApiClient
    namespace: str
    admitted: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        n = 0
        while not self._stop.wait(0.1):
            n += 1
            pod = {
                "metadata": {"name": f"p{n}"},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                },
            }
            try:
                made = core.create_namespaced_pod(self.namespace, pod)
            except client.ApiException as exc:
                self.failures.append(f"p{n}: HTTP {exc.status} {exc.body}")
                continue
            if TRACE not in (made.metadata.annotations or {}):
                self.failures.append(f"p{n}: admitted without the webhook's trace annotation")
            else:
                self.admitted += 1


@dataclass
class BundleWatch:
    """The CAs every webhook's caBundle holds, each distinct state in order (fingerprints)."""

    configurations: Callable[[], list[dict[str, Any]]]
    states: list[tuple[str, ...]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._poll()
        self._thread = threading.Thread(target=self._run, name="bundles", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._poll()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with contextlib.suppress(KubeApiError):
                self._poll()

    def _poll(self) -> None:
        """The CAs of all webhooks' caBundles together, as a set (the two configurations are
        patched one after the other, so for a moment they differ: old+new in one and new in
        the other is still the set of both)."""
        state: set[str] = set()
        for config in self.configurations():
            for hook in config["webhooks"]:
                pem = base64.b64decode(hook["clientConfig"].get("caBundle", ""))
                state.update(map(fingerprint, parse_bundle(pem)))
        cas = tuple(sorted(state))
        if not self.states or self.states[-1] != cas:
            self.states.append(cas)


# --- the installation ------------------------------------------------------------------------


@dataclass
class Installed:
    admin: KubeJson
    namespace: str  # the webhook's: its Secrets and the scorer's Lease
    configuration: str
    webhook: RunningWebhook
    volume: SecretVolume
    traffic: PodTraffic
    bundles_seen: BundleWatch
    controller: RunningController

    def secret(self, name: str = "steer-webhook-tls") -> dict[str, Any]:
        return self.admin.request("GET", f"/api/v1/namespaces/{self.namespace}/secrets/{name}")

    def serving(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(base64.b64decode(self.secret()["data"]["tls.crt"]))

    def kept_ca(self) -> x509.Certificate:
        data = self.secret("steer-webhook-ca")["data"]
        return x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))

    def configurations(self) -> list[dict[str, Any]]:
        return [
            self.admin.request("GET", f"{ADMISSION}/{plural}/{self.configuration}")
            for plural in PLURALS
        ]

    def bundles(self) -> set[tuple[x509.Certificate, ...]]:
        """Each webhook's caBundle, parsed (one entry when they agree)."""
        return {
            parse_bundle(base64.b64decode(hook["clientConfig"].get("caBundle", "")))
            for config in self.configurations()
            for hook in config["webhooks"]
        }

    def served(self) -> x509.Certificate:
        """The certificate a new connection to the webhook is served."""
        port = int(self.webhook.url.rsplit(":", 1)[1])
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der)

    def scorer_metric(self, prefix: str) -> float:
        with requests.Session() as session:
            session.trust_env = False
            text = session.get(f"{self.controller.url}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
        )


def create_secret(admin: KubeJson, namespace: str, name: str, kind: str, **data: bytes) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": kind,
        "metadata": {"name": name, "namespace": namespace},
        "data": {key.replace("_", "."): b64(value) for key, value in data.items()},
    }
    admin.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)


@contextlib.contextmanager
def renewal_user(
    control_plane: ControlPlane, admin: KubeJson, namespace: str, configuration: str
) -> Iterator[Path]:
    """A user bound to what the manifests give the controller: its ClusterRole, its Lease Role,
    and the renewal's Role and ClusterRole, with this test's namespace and configuration."""
    scorer = {d["kind"]: d for d in yaml.safe_load_all(CONTROLLER.read_text()) if d}
    renewal = {d["kind"]: d for d in yaml.safe_load_all(RENEWAL_RBAC.read_text()) if d}
    user = f"renewer-{uuid.uuid4().hex[:6]}"
    subjects = [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}]
    for role in (scorer["Role"], renewal["Role"]):
        name = role["metadata"]["name"]
        admin.request(
            "POST",
            f"{RBAC}/namespaces/{namespace}/roles",
            body={**role, "metadata": {"name": name, "namespace": namespace}},
        )
        admin.request(
            "POST",
            f"{RBAC}/namespaces/{namespace}/rolebindings",
            body={
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
                "subjects": subjects,
            },
        )
    (rule,) = renewal["ClusterRole"]["rules"]
    assert rule["resourceNames"] == ["steer-webhook"]
    name = f"{user}-renewal"
    admin.request(
        "POST",
        f"{RBAC}/clusterroles",
        body={
            **renewal["ClusterRole"],
            "metadata": {"name": name},
            "rules": [{**rule, "resourceNames": [configuration]}],
        },
    )
    admin.request(
        "POST",
        f"{RBAC}/clusterrolebindings",
        body={
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        },
    )
    try:
        ready = may("patch", "validatingadmissionpolicies", RBAC_ADMISSION, "steer-security")
        with user_bound_to(control_plane, admin, scorer["ClusterRole"], user, ready) as kubeconfig:
            yield kubeconfig
    finally:
        for kind in ("clusterrolebindings", "clusterroles"):
            with contextlib.suppress(KubeApiError):
                admin.request("DELETE", f"{RBAC}/{kind}/{name}")


def admitted(control_plane: ControlPlane, namespace: str) -> bool:
    """A dry-run pod is admitted and steered (the webhook's caches and the apiserver's
    configuration watch have caught up)."""
    probe = {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    try:
        made = client.CoreV1Api(control_plane.api_client()).create_namespaced_pod(
            namespace, probe, dry_run="All"
        )
    except client.ApiException:
        return False
    return TRACE in (made.metadata.annotations or {})


@contextlib.contextmanager
def installed(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    tmp_path: Path,
    *,
    ca: CertificateAuthority,
    leaf_expires_in_s: float,
    renew_before_s: float,
) -> Iterator[Installed]:
    """The CA Secret keeping `ca`, the webhook serving a 1-day certificate of it that ends in
    `leaf_expires_in_s`, registered with failurePolicy Fail for one namespace whose caBundle
    is `ca`, pods created there all along, then the scorer renewing as its leader."""
    namespace = make_namespace(prefix="certs")
    target = make_namespace(
        {"kube-steer.github.io/enabled": "true", TARGET_LABEL: namespace}, prefix="renewal"
    )
    identity = WebhookIdentity("steer-webhook", namespace, ("localhost",), ("127.0.0.1",))
    leaf = issue_serving_cert(ca, identity, days=1, now=expiring_in(leaf_expires_in_s))
    create_secret(admin, namespace, "steer-webhook-ca", "Opaque", ca_crt=ca.cert_pem,
                  ca_key=ca.key_pem)  # fmt: skip
    create_secret(
        admin, namespace, "steer-webhook-tls", "kubernetes.io/tls",
        tls_crt=leaf.cert_pem, tls_key=leaf.key_pem, ca_crt=ca.cert_pem,
    )  # fmt: skip
    configuration = f"e2e-renewal-{uuid.uuid4().hex[:6]}"
    with contextlib.ExitStack() as stack:
        volume = SecretVolume(admin, namespace, "steer-webhook-tls", tmp_path / "tls")
        certificate = volume.mount()
        stack.callback(volume.stop)
        webhook = stack.enter_context(
            running_webhook(control_plane, POLICY, tmp_path, certificate=certificate)
        )
        for doc in admission_configurations(webhook.url, b64(ca.cert_pem)):
            doc["metadata"]["name"] = configuration
            for hook in doc["webhooks"]:
                hook["failurePolicy"] = "Fail"  # a call that fails refuses the pod
                hook["namespaceSelector"] = {"matchLabels": {TARGET_LABEL: namespace}}
            plural = PLURALS[doc["kind"] == "ValidatingWebhookConfiguration"]
            admin.request("POST", f"{ADMISSION}/{plural}", body=doc)
            stack.callback(admin.request, "DELETE", f"{ADMISSION}/{plural}/{configuration}")
        wait_until(
            "a pod is admitted through the webhook",
            lambda: admitted(control_plane, target),
            timeout=30,
            interval=0.2,
        )
        traffic = PodTraffic(control_plane.api_client(), target)
        traffic.start()
        stack.callback(traffic.stop)
        watch = BundleWatch(
            lambda: [
                admin.request("GET", f"{ADMISSION}/{plural}/{configuration}") for plural in PLURALS
            ]
        )
        watch.start()
        stack.callback(watch.stop)
        kubeconfig = stack.enter_context(
            renewal_user(control_plane, admin, namespace, configuration)
        )
        scorer = stack.enter_context(
            running_controller(
                control_plane,
                POLICY,
                tmp_path,
                kubeconfig=kubeconfig,
                extra_args=[
                    "--lease-namespace", namespace,
                    "--webhook-certs=renew", "--webhook-config", configuration,
                    "--webhook-cert-dns", "localhost", "--webhook-cert-ip", "127.0.0.1",
                    "--webhook-cert-days", "1",
                    "--webhook-cert-renew-before", f"{renew_before_s / 86400:.8f}",
                    "--webhook-cert-interval", str(CHECK_INTERVAL_S),
                ],
            )
        )  # fmt: skip
        run = Installed(admin, namespace, configuration, webhook, volume, traffic, watch, scorer)
        yield run
        log = scorer.log(100_000)
        assert "Traceback" not in log and "check failed" not in log, log


def settle_and_count(run: Installed, seconds: float = 3.0) -> tuple[int, list[str]]:
    """Pods keep coming a little longer, on the new certificate; then the traffic stops."""
    time.sleep(seconds)
    run.traffic.stop()
    run.bundles_seen.stop()
    return run.traffic.admitted, run.traffic.failures


# --- the tests ----------------------------------------------------------------------------------


def test_a_certificate_expiring_within_two_minutes_is_renewed_under_the_same_ca(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    tmp_path: Path,
) -> None:
    ca = new_ca()
    started = time.monotonic()
    with installed(
        control_plane, admin, make_namespace, tmp_path,
        ca=ca, leaf_expires_in_s=80, renew_before_s=75,
    ) as run:  # fmt: skip
        before = run.serving()
        configs_before = [c["metadata"]["resourceVersion"] for c in run.configurations()]
        assert before.not_valid_after_utc - datetime.now(UTC) < timedelta(minutes=2)
        renewed = wait_until(
            "the leader issued a new certificate",
            lambda: cert if (cert := run.serving()).serial_number != before.serial_number else None,
            timeout=60,
            interval=0.5,
        )
        assert renewed.not_valid_after_utc - datetime.now(UTC) > timedelta(hours=23)
        renewed.verify_directly_issued_by(ca.certificate)  # the same CA
        assert renewed.not_valid_after_utc > before.not_valid_after_utc
        # The webhook serves it once the "kubelet" swapped the files, before the old one ends.
        wait_until(
            "the webhook serves the new certificate",
            lambda: fingerprint(run.served()) == fingerprint(renewed),
            timeout=30,
            interval=0.2,
        )
        assert datetime.now(UTC) < before.not_valid_after_utc
        admitted_pods, failures = settle_and_count(run)
        # Same CA: neither configuration was written.
        assert [c["metadata"]["resourceVersion"] for c in run.configurations()] == configs_before
        assert run.bundles() == {(ca.certificate,)}
        assert run.bundles_seen.states == [(fingerprint(ca.certificate),)]
        assert (
            run.scorer_metric('steer_controller_webhook_cert_writes_total{object="serving"}') == 1
        )
        assert run.scorer_metric('steer_controller_webhook_cert_writes_total{object="bundle"}') == 0
    print(
        f"same CA: {admitted_pods} pods admitted while the certificate was renewed, "
        f"{len(failures)} failed, {time.monotonic() - started:.0f}s"
    )
    assert not failures, failures[:5]
    assert admitted_pods >= 50


def test_a_ca_expiring_within_minutes_is_replaced_with_both_in_the_bundle_meanwhile(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    tmp_path: Path,
) -> None:
    old = new_ca(days=1, now=expiring_in(180))  # inside the CA's renewal window at once
    started = time.monotonic()
    with installed(
        control_plane, admin, make_namespace, tmp_path,
        ca=old, leaf_expires_in_s=170, renew_before_s=60,
    ) as run:  # fmt: skip
        assert old.certificate.not_valid_after_utc - datetime.now(UTC) < timedelta(minutes=4)
        wait_until(
            "the old CA left every caBundle",
            lambda: (
                run.bundles_seen.states[-1] != (fingerprint(old.certificate),)
                and len(run.bundles_seen.states[-1]) == 1
            ),
            timeout=60,
            interval=0.2,
        )
        admitted_pods, failures = settle_and_count(run)
        assert not failures, failures[:5]
        new = run.kept_ca()
        assert new != old.certificate
        assert new.not_valid_after_utc - datetime.now(UTC) > timedelta(days=3000)
        run.serving().verify_directly_issued_by(new)
        run.served().verify_directly_issued_by(new)
        assert datetime.now(UTC) < old.certificate.not_valid_after_utc
        assert run.scorer_metric('steer_controller_webhook_cert_writes_total{object="ca"}') == 1
        assert run.scorer_metric("steer_controller_webhook_ca_bundle_cas") == 1
    names = {fingerprint(old.certificate): "old", fingerprint(new): "new"}
    seen = [
        tuple(sorted((names[ca] for ca in state), reverse=True))
        for state in run.bundles_seen.states
    ]
    print(
        f"CA rollover: caBundle {' -> '.join('+'.join(s) for s in seen)}; {admitted_pods} pods "
        f"admitted meanwhile, {len(failures)} failed, {time.monotonic() - started:.0f}s"
    )
    # The overlap: the old CA alone, both, then the new one alone.
    assert seen == [("old",), ("old", "new"), ("new",)], seen
    assert not failures, failures[:5]
    assert admitted_pods >= 20

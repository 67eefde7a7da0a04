"""The in-cluster renewal (certs/renewer.py) over HTTP against objects kept as the apiserver
keeps them (tests/certs_support.py), and a simulated webhook Deployment whose pods each see a
Secret write some checks late, as kubelets do: at every moment, before and after the pods pick
a write up, every pod's certificate verifies under every webhook's caBundle (the apiserver would
call each of them without a TLS failure). Also the CA Secret's conflicts and the TLS probe of
what endpoints serve (certs/probe.py)."""

from __future__ import annotations

import base64
import contextlib
import ssl
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from certs.ca_secret import TRUSTED_SINCE, CaSecret
from certs.files import write_webhook_certs
from certs.pki import (
    CertError,
    CertificateAuthority,
    WebhookCerts,
    WebhookIdentity,
    issue_serving_cert,
    new_ca,
)
from certs.probe import Endpoint, ServedReport, handshake_error, served_by, service_endpoints
from certs.renewal import ServingPems, signed_by, verified_by
from certs.renewer import RenewalReport, RenewerOptions, WebhookCertRenewer
from certs.rollover import parse_bundle
from certs.rotate import Conflict, RotateOptions, WebhookTrust
from tests.certs_support import Objects, object_server

NOW = datetime(2026, 6, 1, tzinfo=UTC)
NS = "kube-steer"
SERVICE = WebhookIdentity("steer-webhook", NS)
INTERVAL = timedelta(minutes=1)
SECRET = f"/api/v1/namespaces/{NS}/secrets/steer-webhook-tls"
CA_SECRET = f"/api/v1/namespaces/{NS}/secrets/steer-webhook-ca"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
CONFIGS = (
    f"{ADMISSION}/mutatingwebhookconfigurations/steer-webhook",
    f"{ADMISSION}/validatingwebhookconfigurations/steer-webhook",
)
OPTIONS = RenewerOptions(
    RotateOptions(identity=SERVICE, secret="steer-webhook-tls", days=90), settle=INTERVAL
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def serving_secret(certs: WebhookCerts) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"namespace": NS, "labels": {"team.example.com/owner": "platform"}},
        "data": {
            "tls.crt": b64(certs.cert_pem),
            "tls.key": b64(certs.key_pem),
            "ca.crt": b64(certs.ca_cert_pem),
        },
    }


def ca_secret(ca: CertificateAuthority) -> dict[str, Any]:
    data = {"ca.crt": b64(ca.cert_pem), "ca.key": b64(ca.key_pem)}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": data}


def configurations(objects: Objects, bundle: bytes = b"") -> None:
    """The manifests' two configurations (one mutating webhook, two validating ones)."""

    def hook(name: str, path: str) -> dict[str, Any]:
        config: dict[str, Any] = {
            "service": {"namespace": NS, "name": "steer-webhook", "path": path, "port": 443}
        }
        if bundle:
            config["caBundle"] = b64(bundle)
        return {"name": name, "clientConfig": config}

    objects.put(CONFIGS[0], {"webhooks": [hook("mutate.pods.kube-steer.github.io", "/mutate")]})
    objects.put(
        CONFIGS[1],
        {
            "webhooks": [
                hook("validate.pods.kube-steer.github.io", "/validate"),
                hook("security.pods.kube-steer.github.io", "/validate/security"),
            ]
        },
    )


def bundles(objects: Objects) -> list[tuple[x509.Certificate, ...]]:
    return [
        parse_bundle(base64.b64decode(hook["clientConfig"].get("caBundle", "")))
        for path in CONFIGS
        for hook in objects.get(path)["webhooks"]
    ]


def secret_pems(objects: Objects) -> ServingPems:
    data = objects.get(SECRET)["data"]
    return ServingPems(*(base64.b64decode(data[k]) for k in ("tls.crt", "tls.key", "ca.crt")))


def signer_of(pems: ServingPems | None, *cas: CertificateAuthority) -> int | None:
    """Which of `cas` signed the certificate (its index), None for none."""
    assert pems is not None and pems.cert is not None
    cert = x509.load_pem_x509_certificate(pems.cert)
    found = [i for i, ca in enumerate(cas) if signed_by(cert, ca.certificate)]
    return found[0] if found else None


@dataclass
class Pod:
    """A webhook pod: it serves what its volume holds, `lag` checks behind the Secret."""

    lag: int
    served: ServingPems | None = None
    coming: list[tuple[int, ServingPems]] = field(default_factory=list)


@dataclass
class Deployment:
    objects: Objects
    pods: list[Pod]
    seen_version: str = ""

    def start(self) -> None:
        """Every pod serves what the Secret holds now (none when there is no Secret)."""
        if SECRET in self.objects.by_path:
            self.seen_version = self.objects.get(SECRET)["metadata"]["resourceVersion"]
            for pod in self.pods:
                pod.served = secret_pems(self.objects)

    def sync(self, tick: int) -> None:
        """The kubelets: a Secret write reaches each pod `lag` checks later."""
        secret = self.objects.get(SECRET)
        if secret["metadata"]["resourceVersion"] != self.seen_version:
            self.seen_version = secret["metadata"]["resourceVersion"]
            for pod in self.pods:
                pod.coming.append((tick + pod.lag, secret_pems(self.objects)))
        for pod in self.pods:
            while pod.coming and pod.coming[0][0] <= tick:
                pod.served = pod.coming.pop(0)[1]

    def prober(
        self, _api: client.ApiClient, _hooks: Sequence[WebhookTrust], ca_pem: bytes
    ) -> ServedReport:
        """What a TLS handshake with each pod would tell (certs/probe.py does it for real)."""
        (ca,) = parse_bundle(ca_pem)
        endpoints = tuple(Endpoint(f"10.0.0.{i}", 8443, "x") for i in range(len(self.pods)))
        failures = tuple(
            f"{e}: another CA"
            for e, pod in zip(endpoints, self.pods, strict=True)
            if not verified_by(pod.served, (ca,), SERVICE, now=NOW + timedelta(days=1))
        )
        return ServedReport(endpoints, failures)

    def assert_trusted(self, now: datetime) -> None:
        """Every pod's certificate verifies under every webhook's caBundle: no admission call
        fails on TLS, whichever pod the apiserver reaches."""
        for bundle in bundles(self.objects):
            for i, pod in enumerate(self.pods):
                assert verified_by(pod.served, bundle, SERVICE, now=now), f"pod {i} untrusted"


@dataclass
class Clock:
    now: datetime = NOW

    def __call__(self) -> datetime:
        return self.now


@contextlib.contextmanager
def renewer(objects: Objects, deployment: Deployment | None = None) -> Iterator[Any]:
    clock = Clock()
    with object_server(objects) as api:
        yield (
            WebhookCertRenewer(
                api,
                OPTIONS,
                now=clock,
                prober=deployment.prober if deployment is not None else None,
            ),
            clock,
            api,
        )


def run_until_settled(
    objects: Objects, deployment: Deployment, checks: int = 20
) -> list[RenewalReport]:
    """Check every INTERVAL, the pods syncing after each check, asserting trust throughout;
    until the bundle holds one CA and every pod serves the Secret's certificate."""
    reports = []
    deployment.start()
    with renewer(objects, deployment) as (renew, clock, _api):
        for tick in range(checks):
            reports.append(renew.check())
            deployment.assert_trusted(clock.now)  # after the writes, before any pod saw them
            deployment.sync(tick)
            deployment.assert_trusted(clock.now)
            current = secret_pems(objects)
            if len({ca for b in bundles(objects) for ca in b}) == 1 and all(
                p.served == current for p in deployment.pods
            ):
                return reports
            clock.now += INTERVAL
    raise AssertionError(f"not settled after {checks} checks: {reports[-1]}")


def ending_ca() -> CertificateAuthority:
    """A CA that is 200 days from its end: inside the renewal window (a year)."""
    return new_ca(days=400, now=NOW - timedelta(days=200))


def test_a_fresh_install_gets_a_ca_a_secret_and_its_bundle_in_one_check() -> None:
    objects = Objects()
    configurations(objects)
    with renewer(objects) as (renew, _clock, _api):
        report = renew.check()
        assert report.ca_created and report.bundle_written and report.issued
        assert report.bundle_cas == 1 and report.cert_expires == NOW + timedelta(days=90)
        kept = CaSecret(_api, NS, "steer-webhook-ca").load_or_create()[0]
    ca = kept.ca
    assert {b for b in map(tuple, bundles(objects))} == {(ca.certificate,)}
    assert signer_of(secret_pems(objects), ca) == 0
    secret = objects.get(SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    assert objects.get(CA_SECRET)["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kube-steer"
    # The writes: the CA kept, both bundles, when they first held it, and only then the
    # serving Secret, so the apiserver trusts the certificate the pods are going to mount.
    assert objects.writes == [
        ("POST", f"/api/v1/namespaces/{NS}/secrets"),
        ("PATCH", CONFIGS[0]),
        ("PATCH", CONFIGS[1]),
        ("PUT", CA_SECRET),
        ("POST", f"/api/v1/namespaces/{NS}/secrets"),
    ]


def test_the_same_ca_renews_the_secret_and_never_writes_a_bundle() -> None:
    objects = Objects()
    ca = new_ca(now=NOW - timedelta(days=300))
    configurations(objects, ca.cert_pem)
    objects.put(CA_SECRET, ca_secret(ca))
    objects.put(
        SECRET,
        serving_secret(issue_serving_cert(ca, SERVICE, days=90, now=NOW - timedelta(days=70))),
    )
    pods = Deployment(objects, [Pod(lag=0), Pod(lag=2), Pod(lag=3)])
    reports = run_until_settled(objects, pods)
    assert [bool(r.issued) for r in reports][:2] == [True, False]
    assert not any(objects.writes_to(path) for path in CONFIGS)
    assert signer_of(secret_pems(objects), ca) == 0
    # The Secret keeps its labels; one more check changes nothing.
    assert objects.get(SECRET)["metadata"]["labels"] == {"team.example.com/owner": "platform"}
    with renewer(objects) as (renew, _clock, _api):
        writes = len(objects.writes)
        assert not renew.check().changed and len(objects.writes) == writes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lags=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=3))
def test_a_ca_rollover_never_leaves_a_pod_untrusted(lags: list[int]) -> None:
    """The kept CA nears its end: a new CA, in every bundle beside the old one, the Secret
    under it one check later, and the old CA gone once every pod serves the new certificate,
    whatever each pod's kubelet delay."""
    objects = Objects()
    old = ending_ca()
    configurations(objects, old.cert_pem)
    objects.put(CA_SECRET, ca_secret(old))
    objects.put(SECRET, serving_secret(issue_serving_cert(old, SERVICE, days=90, now=NOW)))
    pods = Deployment(objects, [Pod(lag) for lag in lags])
    reports = run_until_settled(objects, pods)

    first, second = reports[0], reports[1]
    assert first.new_ca is not None and "within 365 days" in first.new_ca
    assert first.bundle_written and first.bundle_cas == 2 and not first.issued
    assert second.issued and any("not signed by the CA" in r for r in second.issued)
    assert reports[-1].bundle_written and reports[-1].bundle_cas == 1
    assert all(r.bundle_cas == 2 for r in reports[:-1])
    kept = base64.b64decode(objects.get(CA_SECRET)["data"]["ca.crt"])
    (final,) = {ca for b in bundles(objects) for ca in b}
    assert final == x509.load_pem_x509_certificate(kept) != old.certificate
    assert objects.get(CA_SECRET)["metadata"]["annotations"][TRUSTED_SINCE].endswith(
        NOW.isoformat()
    )


def test_a_certificate_of_an_operators_ca_moves_to_the_kept_ca_the_same_way() -> None:
    """A cluster installed with `steer certs rotate` (its CA on a laptop): the first check makes
    the CA in the cluster and the same overlap takes the webhook over to it."""
    objects = Objects()
    laptop = new_ca(now=NOW - timedelta(days=30))
    configurations(objects, laptop.cert_pem)
    objects.put(SECRET, serving_secret(issue_serving_cert(laptop, SERVICE, days=365, now=NOW)))
    pods = Deployment(objects, [Pod(lag=1), Pod(lag=3)])
    reports = run_until_settled(objects, pods)
    assert reports[0].ca_created and reports[0].bundle_cas == 2 and not reports[0].issued
    assert reports[0].waiting is not None
    assert signer_of(secret_pems(objects), laptop) is None


def test_the_old_ca_stays_while_an_endpoint_serves_its_certificate() -> None:
    objects = Objects()
    old = ending_ca()
    configurations(objects, old.cert_pem)
    objects.put(CA_SECRET, ca_secret(old))
    objects.put(SECRET, serving_secret(issue_serving_cert(old, SERVICE, days=90, now=NOW)))
    stuck = Pod(lag=1000)  # e.g. a node whose kubelet no longer syncs
    pods = Deployment(objects, [Pod(lag=0), stuck])
    with pytest.raises(AssertionError, match="not settled after 8 checks"):
        run_until_settled(objects, pods, checks=8)
    assert len({ca for b in bundles(objects) for ca in b}) == 2
    pods.assert_trusted(NOW + 8 * INTERVAL)
    with renewer(objects, pods) as (renew, clock, _api):
        clock.now = NOW + 9 * INTERVAL
        report = renew.check()
    (problem,) = report.problems()
    assert problem.startswith("the old CA stays in caBundle: 10.0.0.1:8443 (x): another CA")


def test_an_expired_ca_is_dropped_without_asking_the_endpoints() -> None:
    objects = Objects()
    ca = new_ca(now=NOW)
    expired = new_ca(days=1, now=NOW - timedelta(days=5))
    configurations(objects, expired.cert_pem + ca.cert_pem)
    objects.put(CA_SECRET, ca_secret(ca))
    objects.put(SECRET, serving_secret(issue_serving_cert(ca, SERVICE, days=90, now=NOW)))
    with renewer(objects) as (renew, _clock, _api):  # the default prober would dial 10.x: none
        report = renew.check()
    assert report.bundle_written and report.served is None
    assert set(bundles(objects)) == {(ca.certificate,)}


def test_a_ca_secret_changed_since_it_was_read_is_a_conflict_and_junk_is_reported() -> None:
    objects = Objects()
    with object_server(objects) as api:
        store = CaSecret(api, NS, "steer-webhook-ca")
        kept, created = store.load_or_create()
        assert created and not store.load_or_create()[1]
        store.record_trusted_since(kept, NOW)  # another leader wrote in between
        with pytest.raises(Conflict):
            store.replace_ca(kept, new_ca())
        again, _ = store.load_or_create()
        assert again.trusted_since == NOW and again.ca.cert_pem == kept.ca.cert_pem

        objects.put(CA_SECRET, {"data": {"ca.crt": b64(b"junk"), "ca.key": b64(b"junk")}})
        with pytest.raises(CertError, match=r"Secret kube-steer/steer-webhook-ca: .*delete the"):
            store.load_or_create()
        # An empty Secret made beforehand (RBAC can then name it) is filled, not refused.
        objects.put(CA_SECRET, {"type": "Opaque"})
        filled, made = store.load_or_create()
        assert made and objects.get(CA_SECRET)["data"]["ca.key"]
        # A trusted-since of another CA (the Secret edited by hand) is not taken.
        other = new_ca()
        objects.put(
            CA_SECRET,
            {
                **ca_secret(other),
                "metadata": {"annotations": {TRUSTED_SINCE: f"{'0' * 64} {NOW.isoformat()}"}},
            },
        )
        assert store.load_or_create()[0].trusted_since is None
        assert filled.ca.cert_pem != other.cert_pem


# --- what endpoints serve ---------------------------------------------------------------------


@contextlib.contextmanager
def tls_server(folder: Path, certs: WebhookCerts) -> Iterator[int]:
    """A TLS server on 127.0.0.1 serving `certs`, completing handshakes only."""
    import socket

    paths = write_webhook_certs(folder, certs)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(paths.cert, paths.key)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with contextlib.suppress(OSError), context.wrap_socket(conn, server_side=True):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_a_handshake_verifies_the_served_certificate_against_one_ca(tmp_path: Path) -> None:
    identity = WebhookIdentity("steer-webhook", NS, ips=("127.0.0.1",))
    old, new = new_ca(), new_ca()
    with tls_server(tmp_path / "certs", issue_serving_cert(old, identity)) as port:
        by_ip = Endpoint("127.0.0.1", port, "127.0.0.1")
        by_service = Endpoint("127.0.0.1", port, "steer-webhook.kube-steer.svc")
        assert handshake_error(by_ip, old.cert_pem, timeout_s=5) is None
        assert handshake_error(by_service, old.cert_pem, timeout_s=5) is None
        refused = handshake_error(by_ip, new.cert_pem, timeout_s=5)
        assert refused is not None and refused.startswith("certificate not verified by the new CA")
        wrong_name = handshake_error(
            Endpoint("127.0.0.1", port, "other.kube-steer.svc"), old.cert_pem, timeout_s=5
        )
        assert wrong_name is not None and "not verified" in wrong_name
    closed = handshake_error(by_ip, old.cert_pem, timeout_s=2)
    assert closed is not None and closed.startswith("no TLS handshake")


def test_a_service_is_reached_at_the_ready_addresses_behind_its_port() -> None:
    service = {
        "metadata": {"name": "steer-webhook", "namespace": NS},
        "spec": {
            "ports": [
                {"name": "https", "port": 443, "targetPort": "https"},
                {"name": "metrics", "port": 9102, "targetPort": "metrics"},
            ]
        },
    }
    slices = [
        {
            "ports": [{"name": "metrics", "port": 9102}, {"name": "https", "port": 8443}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.2"], "conditions": {}},  # unset: ready
                {"addresses": ["10.0.0.3"], "conditions": {"ready": False}},  # terminating
            ],
        },
        {"ports": [{"name": "https", "port": 8443}], "endpoints": [{"addresses": ["fd00::4"]}]},
    ]
    found = service_endpoints(service, slices, 443)
    assert [str(e) for e in found] == [
        "10.0.0.1:8443 (steer-webhook.kube-steer.svc)",
        "10.0.0.2:8443 (steer-webhook.kube-steer.svc)",
        "[fd00::4]:8443 (steer-webhook.kube-steer.svc)",
    ]
    assert service_endpoints(service, slices, 8443) == ()


def test_a_service_webhook_is_probed_at_each_endpoint_its_slices_name(tmp_path: Path) -> None:
    """Through the API: the Service maps port 443 to the port its EndpointSlices name; each
    ready address is dialled and verified for steer-webhook.kube-steer.svc."""
    old, new = new_ca(), new_ca()
    objects = Objects()
    config = {"service": {"namespace": NS, "name": "steer-webhook", "port": 443}}
    hooks = [WebhookTrust("MutatingWebhookConfiguration", "steer-webhook", "m", config, b"")]
    with tls_server(tmp_path / "certs", issue_serving_cert(new, SERVICE)) as port:
        objects.put(
            f"/api/v1/namespaces/{NS}/services/steer-webhook",
            {"metadata": {"namespace": NS}, "spec": {"ports": [{"name": "https", "port": 443}]}},
        )
        objects.put(
            f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/steer-webhook-x1",
            {
                "metadata": {"labels": {"kubernetes.io/service-name": "steer-webhook"}},
                "ports": [{"name": "https", "port": port}],
                "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
            },
        )
        with object_server(objects) as api:
            assert served_by(api, hooks, new.cert_pem).verified
            refused = served_by(api, hooks, old.cert_pem)
            assert not refused.verified
            assert refused.describe().startswith(
                f"127.0.0.1:{port} (steer-webhook.kube-steer.svc): certificate not verified"
            )
    with object_server(Objects()) as api:  # no Service: nothing verified, nothing dropped
        missing = served_by(api, hooks, new.cert_pem)
    assert (
        not missing.verified and missing.describe() == "Service kube-steer/steer-webhook: not found"
    )

"""The product's two services as an operator runs them (`steer webhook serve`, `steer scorer
run`, each a subprocess), wired to a real control plane: the end-to-end suite and the placement
benchmark share this.

    with running_webhook(plane, policy_file, workdir) as hook:
        register_admission(plane, hook)          # manifests/webhook/admission.yaml, by URL
        apply_security_policy(plane, policy_file)  # the security rules, enforced by the apiserver
        ...
    with running_scorer(plane, policy_file, prom.url, workdir) as scorer:
        scorer.wait_ready()

Neither service needs the control plane itself, only its kubeconfig: the no-cluster demo
(kits/demo/) runs both against the Kubernetes API stand-in the same way.

The webhook's admission configurations are the project's own manifests with each
`clientConfig.service` replaced by `clientConfig.url` (https://127.0.0.1:PORT/path) and the
`caBundle` filled in, so the apiserver calls the real server over TLS exactly as in a cluster.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import requests
import yaml
from kubernetes import client
from urllib3.exceptions import InsecureRequestWarning

from certs import WebhookIdentity, issue_webhook_certs, write_webhook_certs
from kits.control_plane import ROOT, ControlPlane
from kits.net import free_port
from steer.adapters.policy_file import load_policy_file
from steer.core.admission_policy import admission_policies
from steer.core.admission_policy.security import DEFAULT_NAME, security_admission_policy

ADMISSION_MANIFEST = ROOT / "manifests" / "webhook" / "admission.yaml"
LOOPBACK_IDENTITY = WebhookIdentity("steer-webhook", "kube-steer", ("localhost",), ("127.0.0.1",))


class ApiServer(Protocol):
    """Where a service finds the Kubernetes API: a ControlPlane, or the demo's stand-in."""

    @property
    def kubeconfig(self) -> Path: ...


class ServiceError(RuntimeError):
    """A service exited or did not become ready (its log tail is in the message)."""


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    log_file: Path

    def log(self, chars: int = 4000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _spawn(name: str, args: Sequence[str], log_file: Path) -> Service:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    # The service's own temporary folders (the webhook's metrics) go where the caller's go.
    env["TMPDIR"] = tempfile.gettempdir()
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "launcher", *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Service(name, process, log_file)


def _wait_http(service: Service, url: str, timeout: float, verify: str | bool = True) -> None:
    session = requests.Session()
    session.trust_env = False  # this machine sets REQUESTS_CA_BUNDLE
    deadline = time.monotonic() + timeout
    last = ""
    try:
        while time.monotonic() < deadline:
            if not service.running:
                raise ServiceError(
                    f"{service.name} exited with {service.process.returncode}:\n{service.log()}"
                )
            try:
                with warnings.catch_warnings():
                    # verify=False: a certificate named for a Service, polled by address.
                    warnings.simplefilter("ignore", InsecureRequestWarning)
                    resp = session.get(url, timeout=2, verify=verify)
                if resp.status_code == 200:
                    return
                last = f"HTTP {resp.status_code}: {resp.text.strip()[:200]}"
            except requests.RequestException as exc:
                last = str(exc)
            time.sleep(0.2)
    finally:
        session.close()
    raise ServiceError(f"{service.name} not ready after {timeout:.0f}s ({last}):\n{service.log()}")


# -- webhook -------------------------------------------------------------------------------------


@dataclass
class RunningWebhook(Service):
    url: str = ""
    metrics_url: str = ""
    ca_file: Path = Path()
    ca_bundle: str = ""

    def session(self) -> requests.Session:
        session = requests.Session()
        session.trust_env = False
        session.verify = str(self.ca_file)
        return session


@dataclass(frozen=True)
class ServingCertificate:
    """Files of a serving certificate made elsewhere (e.g. read from the webhook's Secret)."""

    cert: Path
    key: Path
    ca_cert: Path


def _policy_args(policy_file: Path | None, policy_resource: str | None) -> list[str]:
    if policy_resource:
        return ["--policy-resource", policy_resource]
    if policy_file is None:
        raise ValueError("a policy file or a SteeringPolicy name is needed")
    return ["--policy", str(policy_file)]


@contextlib.contextmanager
def running_webhook(
    plane: ApiServer,
    policy_file: Path | None,
    workdir: Path,
    *,
    policy_resource: str | None = None,
    workers: int = 2,
    extra_args: Sequence[str] = (),
    listen: str | None = None,
    certificate: ServingCertificate | None = None,
    kubeconfig: Path | None = None,
) -> Iterator[RunningWebhook]:
    """`steer webhook serve` watching the control plane's namespaces; yields once every worker
    answers /readyz.

    By default it listens on a free loopback port with a fresh certificate for 127.0.0.1 and
    uses the admin kubeconfig. `listen`, `certificate` and `kubeconfig` make it serve as it
    would in the cluster instead: e.g. on its Service's ClusterIP, with the Secret's
    certificate (named for the Service, so /readyz is polled without verifying the name), as
    its ServiceAccount. `policy_resource` serves that SteeringPolicy object instead of
    `policy_file`."""
    if certificate is None:
        issued = issue_webhook_certs(LOOPBACK_IDENTITY)
        paths = write_webhook_certs(workdir / "webhook-certs", issued)
        certificate = ServingCertificate(paths.cert, paths.key, paths.ca_cert)
        ca_bundle, verify_name = issued.ca_bundle, True
    else:
        ca_bundle = base64.b64encode(certificate.ca_cert.read_bytes()).decode()
        verify_name = False
    address = listen or f"127.0.0.1:{free_port()}"
    metrics_port = free_port()
    base = _spawn(
        "webhook",
        [
            "webhook",
            "serve",
            *_policy_args(policy_file, policy_resource),
            "--cert",
            str(certificate.cert),
            "--key",
            str(certificate.key),
            "--listen",
            address,
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            "--kubeconfig",
            str(kubeconfig or plane.kubeconfig),
            "--workers",
            str(workers),
            *extra_args,
        ],
        workdir / "webhook.log",
    )
    hook = RunningWebhook(
        base.name,
        base.process,
        base.log_file,
        url=f"https://{address}",
        metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
        ca_file=certificate.ca_cert,
        ca_bundle=ca_bundle,
    )
    try:
        verify: str | bool = str(hook.ca_file) if verify_name else False
        for _ in range(workers * 2):  # each new connection may land on another worker
            _wait_http(hook, f"{hook.url}/readyz", 60, verify=verify)
        yield hook
    finally:
        hook.stop()


def admission_configurations(
    base_url: str, ca_bundle: str, manifest: Path = ADMISSION_MANIFEST
) -> list[dict[str, Any]]:
    """The project's admission configurations with `clientConfig.url` = base_url + the
    service's path, and the CA bundle filled in (the manifest has none: in a cluster
    `steer certs rotate` or cert-manager writes it)."""
    docs = [doc for doc in yaml.safe_load_all(manifest.read_text()) if doc]
    for doc in docs:
        for hook in doc.get("webhooks", []):
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"]["url"] = base_url + service.get("path", "/")
            hook["clientConfig"]["caBundle"] = ca_bundle
    return docs


def register_admission(
    plane: ControlPlane, hook: RunningWebhook, manifest: Path = ADMISSION_MANIFEST
) -> list[str]:
    """Create (or replace) the configurations of `manifest` pointing at `hook`; returns their
    kinds/names. The apiserver uses them for requests a moment later (it watches them)."""
    admission = client.AdmissionregistrationV1Api(plane.api_client())
    made = []
    for doc in admission_configurations(hook.url, hook.ca_bundle, manifest):
        create_or_replace(admission, doc)
        made.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return made


def printed_admission_policies(policy_file: Path) -> list[dict[str, Any]]:
    """What `steer policy admission-policy --mutating -f policy_file` prints, parsed: the
    validating and the mutating policies and their bindings."""
    command = ["policy", "admission-policy", "--mutating", "-f", str(policy_file)]
    done = subprocess.run(
        [sys.executable, "-m", "launcher", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = {d["kind"] for d in docs}
    if not {"MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"} <= kinds:
        raise RuntimeError(f"steer policy admission-policy --mutating printed {sorted(kinds)}")
    return docs


def create_or_replace(admission: Any, doc: dict[str, Any]) -> None:
    """Create an admissionregistration object, or replace the one of that name."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", doc["kind"]).lower()  # validating_admission_policy
    name = doc["metadata"]["name"]
    try:
        getattr(admission, f"create_{kind}")(doc)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        current = getattr(admission, f"read_{kind}")(name)
        doc["metadata"]["resourceVersion"] = current.metadata.resource_version
        getattr(admission, f"replace_{kind}")(name, doc)


def unregister_admission(plane: ControlPlane, manifest: Path = ADMISSION_MANIFEST) -> None:
    admission = client.AdmissionregistrationV1Api(plane.api_client())
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc:
            continue
        delete = (
            admission.delete_mutating_webhook_configuration
            if doc["kind"] == "MutatingWebhookConfiguration"
            else admission.delete_validating_webhook_configuration
        )
        with contextlib.suppress(client.ApiException):
            delete(doc["metadata"]["name"])


# -- the security rules' ValidatingAdmissionPolicy ---------------------------------------------


def security_policy_documents(policy_file: Path, name: str = DEFAULT_NAME) -> str:
    """What `steer policy admission-policy -f POLICY` prints, as YAML."""
    policy = load_policy_file(str(policy_file))
    return yaml.safe_dump_all(security_admission_policy(policy, name), sort_keys=False)


def apply_security_policy(plane: ControlPlane, policy_file: Path, name: str = DEFAULT_NAME) -> None:
    """Create (or replace) the policy's ValidatingAdmissionPolicy and binding; the apiserver
    enforces them a moment later (it loads them from a watch)."""
    # Any: the client's models are typed, the generator's dicts are plain JSON.
    admission: Any = client.AdmissionregistrationV1Api(plane.api_client())
    for doc in security_admission_policy(load_policy_file(str(policy_file)), name):
        create_or_replace(admission, doc)


def apply_admission_policies(
    plane: ControlPlane,
    policy_file: Path,
    *,
    scorer_user: str | None = None,
    also_prefixes: Sequence[str] = (),
) -> list[str]:
    """Create (or replace) every policy `steer policy admission-policy` prints (security
    rules, budget currency, the scorer's Node writes); returns their names."""
    admission: Any = client.AdmissionregistrationV1Api(plane.api_client())
    docs = admission_policies(
        load_policy_file(str(policy_file)), scorer_user=scorer_user, also_prefixes=also_prefixes
    )
    for doc in docs:
        create_or_replace(admission, doc)
    return sorted({d["metadata"]["name"] for d in docs})


def remove_admission_policies(plane: ControlPlane, names: Sequence[str]) -> None:
    admission = client.AdmissionregistrationV1Api(plane.api_client())
    for name in names:
        for delete in (
            admission.delete_validating_admission_policy_binding,
            admission.delete_validating_admission_policy,
        ):
            with contextlib.suppress(client.ApiException):
                delete(name)


def remove_security_policy(plane: ControlPlane, name: str = DEFAULT_NAME) -> None:
    admission = client.AdmissionregistrationV1Api(plane.api_client())
    for delete in (
        admission.delete_validating_admission_policy_binding,
        admission.delete_validating_admission_policy,
    ):
        with contextlib.suppress(client.ApiException):
            delete(name)


# -- scorer --------------------------------------------------------------------------------------


@dataclass
class RunningScorer(Service):
    url: str = ""

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the first scoring cycle has completed (/readyz)."""
        _wait_http(self, f"{self.url}/readyz", timeout)

    def get(self, path: str) -> Any:
        with requests.Session() as session:
            session.trust_env = False
            resp = session.get(f"{self.url}{path}", timeout=10)
        resp.raise_for_status()
        return resp.json()


@contextlib.contextmanager
def running_scorer(
    plane: ApiServer,
    policy_file: Path | None,
    prometheus_url: str,
    workdir: Path,
    *,
    policy_resource: str | None = None,
    name: str = "scorer",
    extra_args: Sequence[str] = (),
    listen: str | None = None,
    kubeconfig: Path | None = None,
    authorization: str = "none",
) -> Iterator[RunningScorer]:
    """`steer scorer run` against the control plane and a Prometheus; yields once it serves
    /healthz (call `wait_ready()` for the first cycle). `listen` (default a free loopback
    port) and `kubeconfig` (default the admin's) as for `running_webhook`. `authorization`:
    the scorer's `--authorization`, `none` unless a test checks who may read what (the
    tests' own requests carry no token; the manifests run `apiserver`)."""
    address = listen or f"127.0.0.1:{free_port()}"
    base = _spawn(
        name,
        [
            "scorer",
            "run",
            *_policy_args(policy_file, policy_resource),
            "--prometheus",
            prometheus_url,
            "--kubeconfig",
            str(kubeconfig or plane.kubeconfig),
            "--listen",
            address,
            f"--authorization={authorization}",
            *extra_args,
        ],
        workdir / f"{name}.log",
    )
    scorer = RunningScorer(base.name, base.process, base.log_file, url=f"http://{address}")
    try:
        _wait_http(scorer, f"{scorer.url}/healthz", 60)
        yield scorer
    finally:
        scorer.stop()


# -- controller ----------------------------------------------------------------------------------


@dataclass
class RunningController(Service):
    url: str = ""

    def metric(self, prefix: str) -> float:
        """The sum of the samples of `/metrics` whose line starts with `prefix`."""
        with requests.Session() as session:
            session.trust_env = False
            text = session.get(f"{self.url}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
        )


@contextlib.contextmanager
def running_controller(
    plane: ApiServer,
    policy_file: Path | None,
    workdir: Path,
    *,
    policy_resource: str | None = None,
    name: str = "controller",
    extra_args: Sequence[str] = (),
    kubeconfig: Path | None = None,
) -> Iterator[RunningController]:
    """`steer controller run` against the control plane, on a free loopback port (its health
    and metrics); yields once it answers /readyz. `kubeconfig` (default the admin's) as for
    `running_webhook`; `extra_args` carry the jobs' flags."""
    address = f"127.0.0.1:{free_port()}"
    base = _spawn(
        name,
        [
            "controller",
            "run",
            *_policy_args(policy_file, policy_resource),
            "--kubeconfig",
            str(kubeconfig or plane.kubeconfig),
            "--listen",
            address,
            *extra_args,
        ],
        workdir / f"{name}.log",
    )
    controller = RunningController(base.name, base.process, base.log_file, url=f"http://{address}")
    try:
        _wait_http(controller, f"{controller.url}/readyz", 60)
        yield controller
    finally:
        controller.stop()

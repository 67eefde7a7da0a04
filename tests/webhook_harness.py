"""A real webhook for tests: certificates made now, the API stand-in, `steer webhook serve`.

`running_webhook()` starts the server as a subprocess exactly as an operator would (gunicorn,
TLS, two gthread workers, metrics on their own port) and waits until /readyz says ready.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from prometheus_client import CollectorRegistry

from certs import WebhookIdentity, issue_webhook_certs, write_webhook_certs
from kits.apistub import ApiStub
from kits.net import free_port
from steer.adapters.policy_file import PolicyWatcher
from tests.conftest import EXAMPLE_POLICY, FIXTURES
from webhook.decision_cache import DEFAULT_ENTRIES
from webhook.devices import DeviceSource
from webhook.handler import AdmissionHandler
from webhook.metrics import WebhookMetrics
from webhook.namespaces import NamespaceCacheStatus

ROOT = Path(__file__).resolve().parent.parent
IDENTITY = WebhookIdentity("steer-webhook", "kube-steer", ("localhost",), ("127.0.0.1",))
# Namespaces as a cluster running the example policy would label them.
NAMESPACES = {
    "team-a": {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"},
    "team-b": {"tenant": "dept-b", "kube-steer.github.io/enabled": "true"},
    "team-c": {"tenant": "dept-a"},  # a tenant, not opted in to steering
    "plain": {},
    "kube-steer": {"kube-steer.github.io/enabled": "true"},  # the project's own: never mutated
}


class FixedNamespaces:
    """The harness's namespaces, synced from the start (no API server needed)."""

    synced = True

    def labels(self, name: str) -> Mapping[str, str] | None:
        return NAMESPACES.get(name)

    def status(self) -> NamespaceCacheStatus:
        return NamespaceCacheStatus(True, len(NAMESPACES), time.time(), "1", 1, None)


def in_process_handler(
    policy_file: Path = EXAMPLE_POLICY,
    devices: DeviceSource | None = None,
    *,
    decision_cache_entries: int = DEFAULT_ENTRIES,
) -> AdmissionHandler:
    """The webhook's request handler on the example policy (or `policy_file`) and `NAMESPACES`,
    in this process; `devices`: its DRA catalogue (none by default)."""
    return AdmissionHandler(
        PolicyWatcher(str(policy_file)),
        FixedNamespaces(),
        WebhookMetrics(CollectorRegistry()),
        devices=devices,
        decision_cache_entries=decision_cache_entries,
    )


def counted(handler: AdmissionHandler, metric: str, **labels: str) -> float:
    """The total of one of `handler.metrics`' counters over the samples with these labels."""
    return sum(
        sample.value
        for family in getattr(handler.metrics, metric).collect()
        for sample in family.samples
        if sample.name.endswith("_total")
        and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def admission_fixture(name: str) -> dict[str, Any]:
    """A captured request: {'path', 'headers', 'body'} exactly as the apiserver sent it."""
    data: dict[str, Any] = json.loads((FIXTURES / "admission" / name).read_text())
    return data


def review_for(name: str, namespace: str | None = None, **changes: Any) -> dict[str, Any]:
    """The fixture's AdmissionReview body, optionally moved to another namespace."""
    body: dict[str, Any] = copy.deepcopy(admission_fixture(name)["body"])
    request = body["request"]
    if namespace is not None:
        request["namespace"] = namespace
        for key in ("object", "oldObject"):
            if isinstance(request.get(key), dict):
                request[key]["metadata"]["namespace"] = namespace
    request.update(changes)
    return body


def make_certs(directory: Path) -> Path:
    """Fresh CA + serving certificate in `directory`; returns the CA file."""
    paths = write_webhook_certs(directory, issue_webhook_certs(IDENTITY))
    return paths.ca_cert


def peer_fingerprint(host: str, port: int, cafile: Path) -> str:
    """SHA-256 of the certificate a new TLS connection is served (verified against `cafile`)."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


@dataclass
class Webhook:
    url: str
    metrics_url: str
    ca_file: Path
    cert_dir: Path
    policy_file: Path
    stub: ApiStub
    process: subprocess.Popen[bytes]
    log_file: Path

    def session(self) -> requests.Session:
        session = requests.Session()
        session.trust_env = False  # this machine sets REQUESTS_CA_BUNDLE
        session.verify = str(self.ca_file)
        return session

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def metrics(self) -> str:
        response = requests.get(self.metrics_url, timeout=5)
        response.raise_for_status()
        return response.text

    def settled_metrics(self, timeout: float = 15.0) -> str:
        """The metrics once every answer so far is counted: the workers add their rule counts
        every second (webhook.metrics), so the counters of two scrapes more than a second apart
        agree."""
        text = self.metrics()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(1.5)
            again = self.metrics()
            if _counters(again) == _counters(text):
                return again
            text = again
        raise AssertionError(f"the counters did not settle in {timeout:g}s")

    @property
    def status_url(self) -> str:
        return self.metrics_url.rsplit("/", 1)[0] + "/status"

    def status(self) -> dict[str, Any]:
        """The metrics listener's /status: {"ready", "workers": [each worker's detail]}."""
        response = requests.get(self.status_url, timeout=5)
        response.raise_for_status()
        detail: dict[str, Any] = response.json()
        return detail


def _counters(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.split("{")[0].endswith("_total")]


def metric_value(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, label_text = head.partition("{")
        if metric != name:
            continue
        found = dict(
            part.split("=", 1) for part in label_text.rstrip("}").split(",") if "=" in part
        )
        found = {k: v.strip('"') for k, v in found.items()}
        if all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    return 0.0


@contextmanager
def running_webhook(
    tmp: Path,
    *,
    workers: int = 2,
    extra_args: tuple[str, ...] = (),
    metrics_on_listen_host: bool = False,
) -> Iterator[Webhook]:
    """With `metrics_on_listen_host`, `--metrics-listen` is a bare port (the --listen host)."""
    cert_dir = tmp / "certs"
    ca_file = make_certs(cert_dir)
    policy_file = tmp / "policy.yaml"
    shutil.copy(EXAMPLE_POLICY, policy_file)
    stub = ApiStub.start()
    for name, labels in NAMESPACES.items():
        stub.add_namespace(name, labels)
    kubeconfig = stub.kubeconfig(tmp / "kubeconfig")
    port, metrics_port = free_port(), free_port()
    log_file = tmp / "webhook.log"
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    command = [
        sys.executable,
        "-m",
        "launcher",
        "webhook",
        "serve",
        "--policy",
        str(policy_file),
        "--cert",
        str(cert_dir / "tls.crt"),
        "--key",
        str(cert_dir / "tls.key"),
        "--listen",
        f"127.0.0.1:{port}",
        "--metrics-listen",
        str(metrics_port) if metrics_on_listen_host else f"127.0.0.1:{metrics_port}",
        "--kubeconfig",
        str(kubeconfig),
        "--workers",
        str(workers),
        *extra_args,
    ]
    with log_file.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    hook = Webhook(
        url=f"https://127.0.0.1:{port}",
        metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
        ca_file=ca_file,
        cert_dir=cert_dir,
        policy_file=policy_file,
        stub=stub,
        process=process,
        log_file=log_file,
    )
    try:
        _wait_ready(hook, workers)
        yield hook
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        stub.stop()


def _wait_ready(hook: Webhook, workers: int, timeout: float = 30.0) -> None:
    """Until every worker says it is ready on /status (each worker's own account), and
    /readyz on the admission port agrees."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if hook.process.poll() is not None:
            raise RuntimeError(f"webhook exited with {hook.process.returncode}:\n{hook.log()}")
        try:
            detail = hook.status()
            each = detail.get("workers") or []
            if (
                len(each) >= workers
                and all(w.get("ready") for w in each)
                and requests.get(
                    f"{hook.url}/readyz", verify=str(hook.ca_file), timeout=2
                ).status_code
                == 200
            ):
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"webhook not ready after {timeout}s:\n{hook.log()}")


def metric_families(text: str) -> dict[str, Any]:
    """Prometheus text format parsed by prometheus-client: family name → family (type, samples)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {family.name: family for family in text_string_to_metric_families(text)}


def assert_json_lines(text: str) -> list[dict[str, Any]]:
    """Every non-empty line is one JSON log object with time, level, logger and message."""
    entries = []
    for line in text.splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)  # fails the test on a line that is not JSON
        assert {"time", "level", "logger", "message"} <= entry.keys(), line
        entries.append(entry)
    assert entries
    return entries

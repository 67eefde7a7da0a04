"""A second, foreign mutating webhook for the admission tests: it adds one pod label.

Registered under a configuration name that sorts after `steer-webhook`, it runs after kube-steer
and changes the pod, which is exactly the case in which the apiserver reinvokes a webhook whose
`reinvocationPolicy` is `IfNeeded`. It records every object it is shown, so a test can see
that kube-steer's patch was already applied when it ran.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client

from certs import issue_webhook_certs, write_webhook_certs
from kits.control_plane import ControlPlane
from kits.service_processes import (
    LOOPBACK_IDENTITY,
    RunningWebhook,
    apply_admission_policies,
    apply_security_policy,
    register_admission,
    remove_admission_policies,
    remove_security_policy,
    running_webhook,
    unregister_admission,
)

RELABEL_CONFIGURATION = "zz-e2e-relabel"  # sorts after "steer-webhook": runs after it
RELABEL_NAMESPACE_LABEL = "e2e.kube-steer.github.io/relabel"
RELABEL_POD_LABEL = "e2e.kube-steer.github.io/relabelled"


@dataclass
class RelabelWebhook:
    url: str
    ca_bundle: str
    seen: list[dict[str, Any]] = field(default_factory=list)


def _json_pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


Patcher = Callable[[dict[str, Any]], list[dict[str, Any]]]


def _handler(patch_for: Patcher, seen: list[dict[str, Any]]) -> type[BaseHTTPRequestHandler]:
    """Answers each AdmissionReview allowed, with the JSON Patch `patch_for(pod)` (none when
    empty); every pod it is asked about goes into `seen`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = review["request"]
            pod = request["object"]
            seen.append(pod)
            ops = patch_for(pod)
            response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
            if ops:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
            body = json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": response,
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def patching_webhook(
    plane: ControlPlane, workdir: Path, name: str, namespace_label: str, patch_for: Patcher
) -> Iterator[RelabelWebhook]:
    """A mutating webhook of the test's own, over TLS, registered as the configuration `name`
    (failurePolicy Fail, never reinvoked) for pods created in namespaces labelled
    `namespace_label`=on, answering with `patch_for(pod)`; unregistered and stopped on exit."""
    issued = issue_webhook_certs(LOOPBACK_IDENTITY)
    paths = write_webhook_certs(workdir / f"{name}-certs", issued)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(paths.cert, paths.key)
    hook = RelabelWebhook(url="", ca_bundle=issued.ca_bundle)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(patch_for, hook.seen))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    hook.url = f"https://127.0.0.1:{server.server_address[1]}/mutate"
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    admission = client.AdmissionregistrationV1Api(plane.api_client())
    admission.create_mutating_webhook_configuration(
        {
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": f"{name}.e2e.kube-steer.github.io",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": hook.url, "caBundle": hook.ca_bundle},
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {namespace_label: "on"}},
                    "failurePolicy": "Fail",
                    "reinvocationPolicy": "Never",
                    "sideEffects": "None",
                    "timeoutSeconds": 5,
                }
            ],
        }
    )
    try:
        yield hook
    finally:
        with contextlib.suppress(client.ApiException):
            admission.delete_mutating_webhook_configuration(name)
        server.shutdown()
        server.server_close()


def _relabel(pod: dict[str, Any]) -> list[dict[str, Any]]:
    labels = pod.get("metadata", {}).get("labels")
    if labels is None:
        return [{"op": "add", "path": "/metadata/labels", "value": {RELABEL_POD_LABEL: "yes"}}]
    if RELABEL_POD_LABEL not in labels:
        path = "/metadata/labels/" + _json_pointer(RELABEL_POD_LABEL)
        return [{"op": "add", "path": path, "value": "yes"}]
    return []


@contextlib.contextmanager
def relabel_webhook(plane: ControlPlane, workdir: Path) -> Iterator[RelabelWebhook]:
    """Serve the relabelling webhook over TLS and register it for pods in namespaces labelled
    RELABEL_NAMESPACE_LABEL=on; unregister and stop on exit."""
    with patching_webhook(
        plane, workdir, RELABEL_CONFIGURATION, RELABEL_NAMESPACE_LABEL, _relabel
    ) as hook:
        yield hook


@contextlib.contextmanager
def registered_webhook(
    plane: ControlPlane, policy_file: Path, workdir: Path, *, every_policy: bool = False
) -> Iterator[RunningWebhook]:
    """`steer webhook serve` for `policy_file`, registered with the apiserver by the project's
    manifests/webhook/admission.yaml, with the policy's security ValidatingAdmissionPolicy (or,
    `every_policy`, every one `steer policy admission-policy` prints); all removed at the end."""
    with running_webhook(plane, policy_file, workdir) as hook:
        register_admission(plane, hook)
        names = apply_admission_policies(plane, policy_file) if every_policy else []
        if not every_policy:
            apply_security_policy(plane, policy_file)
        try:
            yield hook
        finally:
            if every_policy:
                remove_admission_policies(plane, names)
            else:
                remove_security_policy(plane)
            unregister_admission(plane)

"""What the webhook serves, seen as the apiserver sees it: a TLS handshake with each endpoint,
verified against one CA alone, for the name the apiserver dials. The in-cluster renewal asks
this before an old CA leaves caBundle (certs/rollover.py, step 3).

A `service` clientConfig is reached at every ready address of its Service's EndpointSlices
(the port the Service maps the configured port to), each verified for SERVICE.NAMESPACE.svc; a
`url` clientConfig at its host and port. A webhook pod reloads its certificate files on every
new connection (webhook/serve.py), so one handshake per endpoint tells what it serves.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from kubernetes import client

from certs.rotate import RotateError, WebhookTrust, get_object
from steer.adapters.kubejson import KubeApiError, KubeJson

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class Endpoint:
    host: str  # the address connected to
    port: int
    server_name: str  # the name the apiserver verifies (and sends as SNI)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port} ({self.server_name})"


@dataclass(frozen=True)
class ServedReport:
    endpoints: tuple[Endpoint, ...]
    failures: tuple[str, ...]  # each endpoint that did not verify, or why none was found

    @property
    def verified(self) -> bool:
        """Every endpoint verified, and there was at least one."""
        return bool(self.endpoints) and not self.failures

    def describe(self) -> str:
        if self.verified:
            return f"all {len(self.endpoints)} endpoints serve a certificate of the new CA"
        return "; ".join(self.failures) or "no endpoint found"


def served_by(
    api: client.ApiClient,
    webhooks: Sequence[WebhookTrust],
    ca_pem: bytes,
    *,
    timeout_s: float = 3.0,
) -> ServedReport:
    """Whether every endpoint of every webhook serves a certificate `ca_pem` verifies."""
    endpoints: list[Endpoint] = []
    failures: list[str] = []
    for config in dict.fromkeys(_client_key(w.client_config) for w in webhooks):
        found, problem = _endpoints(api, dict(config))
        if problem:
            failures.append(problem)
        endpoints.extend(e for e in found if e not in endpoints)
    for endpoint in endpoints:
        error = handshake_error(endpoint, ca_pem, timeout_s=timeout_s)
        if error:
            failures.append(f"{endpoint}: {error}")
    return ServedReport(tuple(endpoints), tuple(failures))


def handshake_error(endpoint: Endpoint, ca_pem: bytes, *, timeout_s: float) -> str | None:
    """None when the endpoint completes a TLS handshake whose certificate `ca_pem` verifies for
    its server name; else what went wrong."""
    context = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    context.check_hostname = True
    try:
        with (
            socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=endpoint.server_name),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return f"certificate not verified by the new CA ({exc.verify_message})"
    except (OSError, ssl.SSLError) as exc:
        return f"no TLS handshake ({exc})"


def service_endpoints(
    service: dict[str, Any], slices: Sequence[dict[str, Any]], port: int
) -> tuple[Endpoint, ...]:
    """The ready addresses behind `port` of `service`, from its EndpointSlices (JSON)."""
    meta = service.get("metadata") or {}
    server_name = f"{meta.get('name')}.{meta.get('namespace')}.svc"
    ports = [p for p in (service.get("spec") or {}).get("ports") or () if p.get("port") == port]
    if not ports:
        return ()
    port_name = ports[0].get("name") or ""
    out: list[Endpoint] = []
    for endpoint_slice in slices:
        numbers = [
            p.get("port")
            for p in endpoint_slice.get("ports") or ()
            if (p.get("name") or "") == port_name and isinstance(p.get("port"), int)
        ]
        if not numbers:
            continue
        for endpoint in endpoint_slice.get("endpoints") or ():
            # A ready condition left unset means ready (discovery.k8s.io/v1).
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or ():
                found = Endpoint(str(address), int(numbers[0]), server_name)
                if found not in out:
                    out.append(found)
    return tuple(out)


def _client_key(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A hashable clientConfig without its caBundle, to probe each target once."""
    service = config.get("service") or {}
    return (
        ("url", config.get("url")),
        ("service", (service.get("namespace"), service.get("name"), service.get("port", 443))),
    )


def _endpoints(api: client.ApiClient, key: dict[str, Any]) -> tuple[tuple[Endpoint, ...], str]:
    url = key.get("url")
    if url:
        parts = urlsplit(url)
        if not parts.hostname:
            return (), f"{url}: no host"
        return (Endpoint(parts.hostname, parts.port or 443, parts.hostname),), ""
    namespace, name, port = key["service"]
    where = f"Service {namespace}/{name}"
    base = f"/api/v1/namespaces/{quote(str(namespace), safe='')}"
    try:
        service = get_object(api, f"{base}/services/{quote(str(name), safe='')}")
        if service is None:
            return (), f"{where}: not found"
        slices = KubeJson(api).request(
            "GET",
            f"/apis/discovery.k8s.io/v1/namespaces/{quote(str(namespace), safe='')}/endpointslices",
            query={"labelSelector": f"{SERVICE_NAME_LABEL}={name}"},
        )
    except (RotateError, KubeApiError) as exc:
        return (), f"{where}: cannot list its endpoints ({exc})"
    found = service_endpoints(service, slices.get("items") or (), int(port))
    if not found:
        return (), f"{where}: no ready endpoint for port {port}"
    return found, ""

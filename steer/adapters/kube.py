"""Kubernetes API client construction shared by both services.

Inside a cluster the service account is used; elsewhere a kubeconfig (the `--kubeconfig` flag,
then $KUBECONFIG, then ~/.kube/config). Each caller gets its own ApiClient: the client's
connection pool is not meant to be shared across unrelated threads' long watches.
"""

from __future__ import annotations

import json
import os
from typing import Any

from kubernetes import client, config


class KubeConfigError(RuntimeError):
    """No usable cluster credentials were found."""


def make_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from `kubeconfig`, the in-cluster service account, or the default kubeconfig."""
    cfg = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(client_configuration=cfg)
    except (config.ConfigException, OSError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubeConfigError(
            f"no Kubernetes credentials: {exc} (pass --kubeconfig, set KUBECONFIG, or run in a pod; tried {where})"
        ) from None
    return client.ApiClient(cfg)


class KubeRequestError(RuntimeError):
    """A non-2xx answer to `request_json` (`status` 0: the apiserver was not reached)."""

    def __init__(self, status: int, reason: str, message: str, *, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path


def request_json(
    api_client: client.ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = "application/json",
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """One API call as plain JSON, through the client's connection and auth (for the few
    calls of a command; the scorer's hot path has its own `scorer.kubeapi.KubeJson`)."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    params = api_client.param_serialize(
        method=method,
        resource_path=path,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        resp = api_client.call_api(*params, _request_timeout=timeout_s)
        data = resp.read()
    except client.ApiException as exc:
        raise KubeRequestError(
            int(exc.status or 0), str(exc.reason), str(exc.body), method=method, path=path
        ) from exc
    except Exception as exc:  # urllib3 connection, timeout and TLS errors
        raise KubeRequestError(0, type(exc).__name__, str(exc), method=method, path=path) from exc
    try:
        decoded = json.loads(data) if data else {}
    except ValueError:
        decoded = {"message": data[:200].decode("utf-8", "replace")}
    if not isinstance(decoded, dict):
        decoded = {}
    if not 200 <= resp.status <= 299:
        raise KubeRequestError(
            resp.status,
            str(decoded.get("reason", "")),
            str(decoded.get("message", "")),
            method=method,
            path=path,
        )
    return decoded

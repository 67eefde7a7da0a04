"""Kubernetes API client construction shared by both services.

Inside a cluster the service account is used; elsewhere a kubeconfig (the `--kubeconfig` flag,
then $KUBECONFIG, then ~/.kube/config). Each caller gets its own ApiClient: the client's
connection pool is not meant to be shared across unrelated threads' long watches.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Protocol

from kubernetes import client, config


class KubeConfigError(RuntimeError):
    """No usable cluster credentials were found."""


class ArgumentTarget(Protocol):
    """A parser, or a group of one (`add_mutually_exclusive_group`, `add_argument_group`)."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action: ...


def add_kubeconfig_flag(parser: ArgumentTarget, purpose: str = "") -> None:
    """`--kubeconfig FILE`, resolved as `make_api_client` resolves it; `purpose` says what the
    command reads with it."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help=f"kubeconfig{' ' + purpose if purpose else ''} (default: in-cluster service "
        "account, then $KUBECONFIG, then ~/.kube/config)",
    )


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
    # The node writer keeps 2 x 16 requests in flight (scorer.cycle.service.WRITE_CONCURRENCY) beside
    # the pod, node and DRA watches and the Lease; urllib3's default pool (5 per CPU) would open
    # and discard a connection (a TLS handshake) per write beyond it.
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, 48)
    return client.ApiClient(cfg)


def kubectl_api_client(
    kubeconfig: str | None = None, context: str | None = None
) -> tuple[client.ApiClient, str]:
    """An ApiClient chosen as kubectl chooses it, and the namespace of that context.

    `kubeconfig` (the `--kubeconfig` flag), else $KUBECONFIG (a list of files, merged), else
    ~/.kube/config; `context` or the file's current-context. Only without any kubeconfig does
    it fall back to the in-cluster service account (namespace `default`, as kubectl's)."""
    cfg = client.Configuration()
    if (
        kubeconfig is None
        and os.environ.get("KUBERNETES_SERVICE_HOST")
        and not os.environ.get("KUBECONFIG")
        and not os.path.exists(os.path.expanduser(config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION))
    ):
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException as exc:
            raise KubeConfigError(f"no Kubernetes credentials: {exc}") from None
        return client.ApiClient(cfg), "default"
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError) as exc:
        raise KubeConfigError(
            f"no Kubernetes credentials in {where}: {exc} (pass --kubeconfig or set KUBECONFIG)"
        ) from None
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return client.ApiClient(cfg), str(namespace)

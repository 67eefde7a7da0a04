"""`steer certs rotate`: keep the webhook's serving certificate valid and trusted, idempotently.

1. The CA comes from the `CaStore` (made there the first time).
2. The serving certificate in the `kubernetes.io/tls` Secret is issued again when the Secret is
   missing, or its certificate expires within `renew_before`, is not signed by the CA, lacks a
   name of the Service, or its key does not match (certs/renewal.py). The Secret is created, or
   replaced with `resourceVersion` (a concurrent change makes a 409, then it is read and
   decided again); its labels, annotations and other data keys stay.
3. Every webhook of the named Mutating/ValidatingWebhookConfigurations gets the CA as its
   `caBundle` (a JSON patch per configuration, each change guarded by a `test` of the
   webhook's name, so a reordered list fails instead of patching the wrong entry).

A renewal under the same CA leaves `caBundle` unchanged: old and new certificates both verify
while the kubelet swaps the mounted Secret, so there is no window of TLS failures.

The steps are public (`read_serving_secret`, `write_serving_secret`, `read_webhooks`,
`set_ca_bundles`): the scorer's in-cluster renewal (certs/renewer.py) runs the same reads and
writes in the order a CA change needs.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from cryptography import x509
from kubernetes import client

from certs.pki import (
    DEFAULT_DAYS,
    DEFAULT_KEY_TYPE,
    CertificateAuthority,
    KeyType,
    WebhookCerts,
    WebhookIdentity,
    ca_bundle_b64,
    issue_serving_cert,
    new_ca,
)
from certs.renewal import ServingPems, renewal_reasons
from certs.settings import DEFAULT_CONFIGURATIONS, DEFAULT_RENEW_BEFORE_DAYS
from certs.store import CaStore
from steer.adapters.kubejson import JSON_PATCH, KubeApiError, KubeJson

TLS_TYPE = "kubernetes.io/tls"
_ADMISSION = "/apis/admissionregistration.k8s.io/v1"
KINDS = (
    ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
    ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
)
_ATTEMPTS = 3


class RotateError(RuntimeError):
    """Rotation could not finish; the message says what failed and what to do."""


class Conflict(RotateError):
    """The object changed between its read and the write (HTTP 409): read it and decide again."""


@dataclass(frozen=True)
class RotateOptions:
    identity: WebhookIdentity
    secret: str
    renew_before: timedelta = timedelta(days=DEFAULT_RENEW_BEFORE_DAYS)
    configurations: tuple[str, ...] = DEFAULT_CONFIGURATIONS
    days: int = DEFAULT_DAYS
    key_type: KeyType = DEFAULT_KEY_TYPE
    dry_run: bool = False


@dataclass(frozen=True)
class BundleChange:
    kind: str
    name: str
    webhooks: int
    patched: int


@dataclass(frozen=True)
class RotateReport:
    ca_created: bool
    ca_expires: datetime
    reasons: tuple[str, ...]  # why the certificate was issued; empty: kept
    secret_action: str  # "created", "replaced" or "kept"
    cert_expires: datetime | None
    bundles: tuple[BundleChange, ...] = ()
    missing: tuple[str, ...] = ()  # configuration names found as neither kind
    dry_run: bool = False
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return (
            self.ca_created or self.secret_action != "kept" or any(b.patched for b in self.bundles)
        )


def rotate(
    api: client.ApiClient,
    store: CaStore,
    options: RotateOptions,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> RotateReport:
    """Run the three steps; `RotateError` (or `certs.pki.CertError`) on failure."""
    ca, created = _ca(store, options)
    notes = []
    ca_expires = ca.certificate.not_valid_after_utc
    if ca_expires - now() <= options.renew_before:
        notes.append(
            f"the CA expires on {ca_expires:%Y-%m-%d}: certificates it signs cannot outlive it; "
            f"move {store.directory} away and rotate to make a new CA (every caBundle changes)"
        )
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            reasons, action, expires = _secret(api, ca, options, now())
            break
        except Conflict:
            if attempt == _ATTEMPTS:
                raise RotateError(
                    f"Secret {options.identity.namespace}/{options.secret} kept changing under "
                    f"us ({_ATTEMPTS} conflicts); run again"
                ) from None
    bundles, missing = set_ca_bundles(api, ca.cert_pem, options)
    return RotateReport(
        ca_created=created,
        ca_expires=ca_expires,
        reasons=reasons,
        secret_action=action,
        cert_expires=expires,
        bundles=bundles,
        missing=missing,
        dry_run=options.dry_run,
        notes=tuple(notes),
    )


def _ca(store: CaStore, options: RotateOptions) -> tuple[CertificateAuthority, bool]:
    if store.exists():
        return store.load(), False
    if options.dry_run:
        return new_ca(key_type=options.key_type), True  # what would be made, not saved
    return store.create(key_type=options.key_type), True


def secret_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets"
    return f"{base}/{quote(name, safe='')}" if name else base


def call_api(api: client.ApiClient, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    """One API call; `Conflict` on HTTP 409, `RotateError` naming the fix on any other error."""
    try:
        return KubeJson(api).request(method, path, **kwargs)
    except KubeApiError as exc:
        if exc.status == 409:
            raise Conflict(f"{method} {path}: changed since it was read") from None
        raise RotateError(_explain(exc)) from None


def get_object(api: client.ApiClient, path: str) -> dict[str, Any] | None:
    """The object at `path`, None when there is none."""
    try:
        return KubeJson(api).request("GET", path)
    except KubeApiError as exc:
        if exc.status == 404:
            return None
        raise RotateError(_explain(exc)) from None


def _explain(exc: KubeApiError) -> str:
    where = f"{exc.method} {exc.path}"
    if exc.status == 0:
        return (
            f"cannot reach the Kubernetes API ({exc.reason}: {exc.message}); check --kubeconfig "
            "and that the apiserver is up"
        )
    if exc.status in (401, 403):
        return (
            f"the Kubernetes API refused {where} (HTTP {exc.status}): {exc.message}. "
            "Renewing the webhook's certificate (`steer certs rotate`, or the scorer with "
            "--webhook-certs=renew) needs get, create and update on secrets in the webhook's "
            "namespace, and get and patch on mutatingwebhookconfigurations and "
            "validatingwebhookconfigurations"
        )
    if exc.status == 404:
        return f"{where}: not found: {exc.message}"
    return f"{where}: HTTP {exc.status} {exc.reason}: {exc.message}"


def _pem(data: dict[str, Any], key: str) -> bytes | None:
    value = data.get(key)
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return None


@dataclass(frozen=True)
class ServingSecret:
    """The webhook's `kubernetes.io/tls` Secret as read: the object, kept for a replace."""

    obj: dict[str, Any]

    @property
    def pems(self) -> ServingPems:
        data = self.obj.get("data") or {}
        return ServingPems(_pem(data, "tls.crt"), _pem(data, "tls.key"), _pem(data, "ca.crt"))


def read_serving_secret(api: client.ApiClient, options: RotateOptions) -> ServingSecret | None:
    """The Secret, None when there is none; `RotateError` when it is not `kubernetes.io/tls`."""
    namespace = options.identity.namespace
    current = get_object(api, secret_path(namespace, options.secret))
    if current is None:
        return None
    kind = current.get("type") or "Opaque"
    if kind != TLS_TYPE:
        raise RotateError(
            f"Secret {namespace}/{options.secret} has type {kind}, not {TLS_TYPE} (a type "
            "cannot change): delete it, or pass another --secret"
        )
    return ServingSecret(current)


def write_serving_secret(
    api: client.ApiClient,
    options: RotateOptions,
    current: ServingSecret | None,
    issued: WebhookCerts,
) -> str:
    """Create the Secret, or replace `current` with its resourceVersion (`Conflict` when it
    changed since); its labels, annotations and other keys stay. "created" or "replaced"."""
    namespace = options.identity.namespace
    new_data = {
        "tls.crt": _b64(issued.cert_pem),
        "tls.key": _b64(issued.key_pem),
        "ca.crt": _b64(issued.ca_cert_pem),
    }
    if current is None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": TLS_TYPE,
            "metadata": {"name": options.secret, "namespace": namespace},
            "data": new_data,
        }
        call_api(api, "POST", secret_path(namespace), body=body)
        return "created"
    obj = current.obj
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": TLS_TYPE,
        "metadata": meta,  # keeps labels, annotations and resourceVersion
        "data": {**(obj.get("data") or {}), **new_data},
    }
    call_api(api, "PUT", secret_path(namespace, options.secret), body=body)
    return "replaced"


def _secret(
    api: client.ApiClient, ca: CertificateAuthority, options: RotateOptions, now: datetime
) -> tuple[tuple[str, ...], str, datetime | None]:
    current = read_serving_secret(api, options)
    held = current.pems if current is not None else None
    reasons = renewal_reasons(
        held, ca, options.identity, now=now, renew_before=options.renew_before
    )
    if not reasons:
        assert held is not None and held.cert is not None
        return (), "kept", x509.load_pem_x509_certificate(held.cert).not_valid_after_utc
    issued = issue_serving_cert(
        ca, options.identity, days=options.days, key_type=options.key_type, now=now
    )
    expires = x509.load_pem_x509_certificate(issued.cert_pem).not_valid_after_utc
    if options.dry_run:
        return reasons, "created" if current is None else "replaced", expires
    return reasons, write_serving_secret(api, options, current, issued), expires


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class WebhookTrust:
    """One webhook of a Mutating/ValidatingWebhookConfiguration: how the apiserver reaches it
    (`clientConfig`) and the CAs it trusts there (the PEM of `caBundle`, empty when unset)."""

    kind: str
    configuration: str
    name: str
    client_config: dict[str, Any]
    ca_bundle: bytes


def read_webhooks(
    api: client.ApiClient, configurations: Sequence[str]
) -> tuple[tuple[WebhookTrust, ...], tuple[str, ...]]:
    """Every webhook of the named configurations (each kind that exists), and the names found
    as neither kind."""
    found: list[WebhookTrust] = []
    missing: list[str] = []
    for name in dict.fromkeys(configurations):
        seen = False
        for kind, plural in KINDS:
            obj = get_object(api, f"{_ADMISSION}/{plural}/{quote(name, safe='')}")
            if obj is None:
                continue
            seen = True
            for hook in obj.get("webhooks") or ():
                config = dict(hook.get("clientConfig") or {})
                try:
                    bundle = base64.b64decode(config.get("caBundle") or "", validate=True)
                except ValueError:
                    bundle = b""
                found.append(WebhookTrust(kind, name, str(hook.get("name")), config, bundle))
        if not seen:
            missing.append(name)
    return tuple(found), tuple(missing)


def set_ca_bundles(
    api: client.ApiClient, ca_pems: bytes, options: RotateOptions
) -> tuple[tuple[BundleChange, ...], tuple[str, ...]]:
    """Make `ca_pems` (one CA, or several while a CA change overlaps) the `caBundle` of every
    webhook of the named configurations; a webhook that has it already is left alone."""
    bundle = ca_bundle_b64(ca_pems)
    changes: list[BundleChange] = []
    missing: list[str] = []
    for name in dict.fromkeys(options.configurations):
        found = False
        for kind, plural in KINDS:
            path = f"{_ADMISSION}/{plural}/{quote(name, safe='')}"
            obj = get_object(api, path)
            if obj is None:
                continue
            found = True
            webhooks: Sequence[dict[str, Any]] = obj.get("webhooks") or ()
            ops: list[dict[str, Any]] = []
            for i, hook in enumerate(webhooks):
                if (hook.get("clientConfig") or {}).get("caBundle") == bundle:
                    continue
                ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]})
                # `add` on an existing member replaces it.
                ops.append(
                    {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
                )
            if ops and not options.dry_run:
                try:
                    call_api(api, "PATCH", path, body=ops, content_type=JSON_PATCH)
                except Conflict:
                    raise RotateError(f"{kind} {name} changed while patching; run again") from None
            changes.append(BundleChange(kind, name, len(webhooks), len(ops) // 2))
        if not found:
            missing.append(name)
    return tuple(changes), tuple(missing)

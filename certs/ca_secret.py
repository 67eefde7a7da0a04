"""The webhook's CA kept in the cluster, for the in-cluster renewal: a Secret in the webhook's
namespace (`ca.crt`, `ca.key`), readable by the scorer alone (RBAC by name), instead of the
folder on an operator's machine that `steer certs rotate` keeps it in (certs/store.py).

The Secret also records when every caBundle was first seen holding this CA (an annotation with
the CA's fingerprint, so a CA put there by hand is never taken as trusted), so that the leader
after a failover knows how long the apiserver has trusted it (certs/rollover.py). Every write
carries the resourceVersion read: of two replicas that both believe they lead, one gets a 409
and decides again from what the other wrote.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes import client

from certs.pki import DEFAULT_KEY_TYPE, CertError, CertificateAuthority, KeyType, new_ca
from certs.rotate import call_api, get_object, secret_path

CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
TRUSTED_SINCE = "kube-steer.github.io/ca-trusted-since"
LABELS = {"app.kubernetes.io/part-of": "kube-steer", "app.kubernetes.io/managed-by": "steer-scorer"}


@dataclass(frozen=True)
class KeptCa:
    """The CA as the Secret holds it, and the Secret as last read or written."""

    ca: CertificateAuthority
    trusted_since: datetime | None
    obj: dict[str, Any] = field(repr=False)


def fingerprint(ca: CertificateAuthority) -> str:
    return hashlib.sha256(ca.certificate.public_bytes(Encoding.DER)).hexdigest()


class CaSecret:
    """The Secret `namespace/name` holding the CA."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name

    def __str__(self) -> str:
        return f"Secret {self.namespace}/{self.name}"

    def load_or_create(
        self, *, key_type: KeyType = DEFAULT_KEY_TYPE, now: datetime | None = None
    ) -> tuple[KeptCa, bool]:
        """The CA, and whether it was made just now: a new CA when there is no Secret, or the
        Secret holds neither key (made empty beforehand). `CertError` when it holds a CA that
        does not load: someone put it there, so it is reported, never overwritten."""
        obj = get_object(self.api, secret_path(self.namespace, self.name))
        if obj is None:
            ca = new_ca(key_type=key_type, now=now)
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": LABELS},
                "data": _data(ca),
            }
            made = call_api(self.api, "POST", secret_path(self.namespace), body=body)
            return KeptCa(ca, None, made), True
        data = obj.get("data") or {}
        if CA_CERT_KEY not in data and CA_KEY_KEY not in data:
            return self._put(obj, new_ca(key_type=key_type, now=now), None), True
        try:
            ca = CertificateAuthority.load(
                base64.b64decode(data.get(CA_CERT_KEY) or ""),
                base64.b64decode(data.get(CA_KEY_KEY) or ""),
            )
        except (CertError, ValueError) as exc:
            raise CertError(
                f"{self}: {exc}; put a CA there ({CA_CERT_KEY}, {CA_KEY_KEY}) or delete the "
                "Secret to have a new one made (the webhook stays trusted while it changes)"
            ) from None
        return KeptCa(ca, _trusted_since(obj, ca), obj), False

    def replace_ca(self, kept: KeptCa, ca: CertificateAuthority) -> KeptCa:
        """Make `ca` the CA that signs from now on; no bundle holds it yet."""
        return self._put(kept.obj, ca, None)

    def record_trusted_since(self, kept: KeptCa, when: datetime) -> KeptCa:
        return self._put(kept.obj, kept.ca, when)

    def _put(self, obj: dict[str, Any], ca: CertificateAuthority, since: datetime | None) -> KeptCa:
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()}
        annotations.pop(TRUSTED_SINCE, None)
        if since is not None:
            annotations[TRUSTED_SINCE] = f"{fingerprint(ca)} {since.isoformat()}"
        meta["annotations"] = annotations
        body = {**obj, "metadata": meta, "data": {**(obj.get("data") or {}), **_data(ca)}}
        written = call_api(
            self.api, "PUT", secret_path(self.namespace, self.name), body=body
        )  # a 409 (Conflict) when the Secret changed since it was read
        return KeptCa(ca, since, written)


def _data(ca: CertificateAuthority) -> dict[str, str]:
    return {
        CA_CERT_KEY: base64.b64encode(ca.cert_pem).decode("ascii"),
        CA_KEY_KEY: base64.b64encode(ca.key_pem).decode("ascii"),
    }


def _trusted_since(obj: dict[str, Any], ca: CertificateAuthority) -> datetime | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(TRUSTED_SINCE, "")
    print_, _, when = value.partition(" ")
    if print_ != fingerprint(ca):
        return None
    try:
        since = datetime.fromisoformat(when)
    except ValueError:
        return None
    return since if since.tzinfo is not None else None

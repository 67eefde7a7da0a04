"""Kubernetes name rules for label keys, label values and taints.

The messages are the kube-apiserver's own (apimachinery `validation.IsQualifiedName`,
`IsValidLabelValue`), so the policy validator, the scorer and the API stand-in reject the same
inputs with the same words a platform engineer will later see from a real cluster.
"""

from __future__ import annotations

import re

DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + r")*"
QUALIFIED_NAME_FMT = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = r"(" + QUALIFIED_NAME_FMT + r")?"

_DNS1123_SUBDOMAIN_RE = re.compile(r"^" + DNS1123_SUBDOMAIN_FMT + r"$")
_DNS1123_LABEL_RE = re.compile(r"^" + _DNS1123_LABEL + r"$")
_QUALIFIED_NAME_RE = re.compile(r"^" + QUALIFIED_NAME_FMT + r"$")
_LABEL_VALUE_RE = re.compile(r"^" + LABEL_VALUE_FMT + r"$")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '" + DNS1123_SUBDOMAIN_FMT + "')"
)
_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    "for validation is '" + QUALIFIED_NAME_FMT + "')"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is '" + LABEL_VALUE_FMT + "')"
)


def label_key_errors(key: str) -> list[str]:
    """Why `key` is not a valid label (or taint) key; empty when it is valid."""
    errors: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix) > DNS1123_SUBDOMAIN_MAX:
                errors.append(f"prefix part must be no more than {DNS1123_SUBDOMAIN_MAX} bytes")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errors.append("prefix part " + _SUBDOMAIN_MSG)
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '" + QUALIFIED_NAME_FMT + "') with an "
            "optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errors.append(f"name part must be no more than {QUALIFIED_NAME_MAX} bytes")
    if name and not _QUALIFIED_NAME_RE.fullmatch(name):
        errors.append(_NAME_MSG)
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why `value` is not a valid label value; empty when it is valid."""
    errors: list[str] = []
    if len(value) > LABEL_VALUE_MAX:
        errors.append(f"must be no more than {LABEL_VALUE_MAX} bytes")
    if not _LABEL_VALUE_RE.fullmatch(value):
        errors.append(_VALUE_MSG)
    return errors


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN_RE.fullmatch(value))


def is_dns1123_label(value: str) -> bool:
    """A namespace name: one lower-case RFC 1123 label of at most 63 characters."""
    return len(value) <= QUALIFIED_NAME_MAX and bool(_DNS1123_LABEL_RE.fullmatch(value))


# The domains the API conventions reserve to the Kubernetes project: keys under them "must not
# be used by third parties" (kubernetes/community contributors/devel/sig-architecture/
# api-conventions.md).
KUBERNETES_DOMAINS = ("kubernetes.io", "k8s.io")
# The keys under those domains kube-steer writes or selects on, each one Kubernetes defines
# for everyone's use ("Well-Known Labels, Annotations and Taints", kubernetes.io/docs/reference/
# labels-annotations-taints/; the recommended `app.kubernetes.io/` labels; kustomize's
# `config.kubernetes.io/local-config`, never sent to a cluster). Nothing kube-steer mints is
# here: its own names are under its label and resource prefixes.
WELL_KNOWN_KEYS = frozenset(
    {
        "app.kubernetes.io/component",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/name",
        "app.kubernetes.io/part-of",
        "app.kubernetes.io/version",
        "config.kubernetes.io/local-config",
        "kubernetes.io/hostname",
        "kubernetes.io/metadata.name",
        "node.kubernetes.io/instance-type",
        "node.kubernetes.io/unschedulable",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    }
)


def kubernetes_domain(key: str) -> bool:
    """Whether a key (or key prefix) is under a domain Kubernetes reserves: `kubernetes.io`,
    `k8s.io` or a subdomain of either."""
    if "/" not in key:
        return False
    domain = key.split("/", 1)[0]
    return any(domain == d or domain.endswith(f".{d}") for d in KUBERNETES_DOMAINS)

"""The names kube-steer writes and reads: API version, label and resource prefixes, the label
contract (docs/labels.md) and the scheduler names the apiserver uses."""

from __future__ import annotations

# The project's domain: a GitHub organisation's `<org>.github.io` belongs to that organisation
# alone, so no other project writes labels under it. Every key is under `spec.labelPrefix`.
API_VERSION = "kube-steer.github.io/v1alpha1"
# Read as API_VERSION: policies written before the project had a domain of its own.
LEGACY_API_VERSIONS = ("steer.io/v1alpha1",)
KIND = "SteeringPolicy"
DEFAULT_LABEL_PREFIX = "kube-steer.github.io/"
# Budget pools and gates (steer/core/gates.py) are node resources under this prefix: extended
# resources (integer, request = limit) under the project's own domain. Names under
# `kubernetes.io` and `k8s.io` are Kubernetes' own (api-conventions.md); a prefix containing
# `kubernetes.io/` is only accepted with `nativeResourceNames: true` (docs/resources.md).
DEFAULT_RESOURCE_PREFIX = "kube-steer.github.io/"
# Where pools and gates were before: pods that still hold them keep them published at what they
# hold, and the admission policies accept them, until the last such pod is gone.
FORMER_RESOURCE_PREFIXES = ("kube-steer.kubernetes.io/",)
NATIVE_RESOURCE_MARK = "kubernetes.io/"
# Who creates DaemonSet pods: the controller manager's daemon-set-controller ServiceAccount
# (with --use-service-account-credentials, as kubeadm sets it), or the controller manager itself.
DAEMONSET_CREATORS = (
    "system:serviceaccount:kube-system:daemon-set-controller",
    "system:kube-controller-manager",
)
# Kubelets may not set labels under this prefix (NodeRestriction admission), so a compromised
# node cannot promote itself to "best node".
NODE_RESTRICTION_PREFIX = "node-restriction.kubernetes.io/"
ALWAYS_EXCLUDED_NAMESPACES = ("kube-system",)
# What the apiserver writes into a pod that names no scheduler.
DEFAULT_SCHEDULER = "default-scheduler"
# The label contract (docs/labels.md): a dimension published as a score is
# `<prefix>score-<dimension>`, 0..100, higher is better for placement, whatever the metric's
# direction; the composites are `<prefix><compositeLabel>` (pods of no class) and
# `<prefix><compositeLabel>-class-<class>`; a dimension published raw carries the value itself
# under `<prefix><dimension>`, whose name ends with its unit (`overcommit-pct`, `power-watts`).
SCORE_PREFIX = "score-"
# Units a raw dimension's name may end with without naming `unit:` (any other one word may be
# named there).
KNOWN_UNITS = frozenset(
    {
        "pct",
        "ratio",
        "watts",
        "joules",
        "celsius",
        "seconds",
        "ms",
        "bytes",
        "count",
        "gpus",
        "cores",
    }
)
CLASS_INFIX = "-class-"
# Label suffix of the nodes a pod class reserves (`<prefix>reserved-for-<class>`).
RESERVED_PREFIX = "reserved-for-"
# Resources every node offers: a class cannot reserve nodes by them.
CORE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})

"""The MutatingAdmissionPolicy against the webhook's decision, on the real apiserver.

`steer policy admission-policy` prints a MutatingAdmissionPolicy that is meant to give a pod
exactly what the webhook gives it (steer/core/admission_policy/mutating.py). Here seeded random
pods (tenants and no tenant, GPU and chain pods, init containers and sidecars, pods that already
carry preferred terms, tolerations, spread constraints, a schedulerName, forged requests of the
project's resources or a forged trace, DaemonSet pods, pods naming their node) are created with
`dryRun=All`, and each is compared with what the webhook makes of it:

- policy path: the pod as the user wrote it, created in its namespace with the
  MutatingAdmissionPolicy bound (no webhook is registered), reinvoked as the apiserver does;
- webhook path, computed in-process with the decision the webhook serves
  (steer/core/decision.py `decide_mutation`) rather than by running the webhook server: the
  pod is first created (dry run) in a namespace no policy matches, which gives the pod the
  webhook would receive (defaults, service account, default tolerations; the spread
  constraints as written, since the apiserver merges `matchLabelKeys` into their selectors
  only after admission); the decision's JSON Patch is applied, and the result is created
  (dry run) again, so both paths end with the same post-admission processing.

- served path: the pod as the user wrote it, created (dry run) in a twin of its namespace (the
  same labels and one more) where the running webhook (`steer webhook serve`, called by the
  apiserver over TLS through the MutatingWebhookConfiguration of manifests/webhook/admission.yaml,
  its DRA watch on a real DeviceClass and claim templates) steers and the policy's binding does
  not match. It must give exactly the webhook path's pod, trace text included, and the same
  refusals: the decision in-process is the decision served.

The policy and webhook paths' pods must be equal in every field but the generated token
volume's name, and the trace annotation must be the webhook's JSON with `"via":
"admission-policy"` added. Pods the policy
leaves to the webhook (its `NotCovered` list: a DRA claim, an extended resource a DeviceClass may
map) must come out of the policy path untouched. Three policies: examples/policy.yaml, a
variant with a `reserveNodes: require` class beside the GPU class (unreserved gates, spared
classes), an audited tenant, budgets enforced by labels (overcommit gates, no pools), no
DeviceClasses (extended resources covered) and `defaultSchedulerIsUnset: false`; and the starter
policy (manifests/policy/starter-policy.yaml: preferred terms alone, every namespace opted in).

Before that, the apiserver must accept what `steer policy admission-policy` prints at all: every
policy the project ships, and a few reduced policies (no tenant, no class, no spread rule, audit
mode, none of them), each object created once with `dryRun=All` (the CEL is compiled then: a
policy that makes a list empty must still give its literals one element type).
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from kits.control_plane import ControlPlane
from kits.dra import DEVICE_CLASS, DraKit, device_class_body
from kits.service_processes import admission_configurations, running_webhook
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeJson
from steer.core.admission_policy import admission_policies
from steer.core.admission_policy.mutating import (
    TRACE_VIA,
    install_opt_in_label,
    mutating_admission_policy,
)
from steer.core.admission_policy.node_writes import scorer_username
from steer.core.decision import SKIPPED, AdmissionPlans, PodRequest, decide_mutation
from steer.core.dra.catalog import ClaimDevices
from steer.core.dra.classes import DeviceClassInfo, classes_by_extended_name
from steer.core.mutation import read_trace
from steer.core.patch import apply_ops
from steer.core.policy import ALWAYS_EXCLUDED_NAMESPACES, Policy, parse_policy
from steer.core.quantity import parse_quantity
from steer.core.steering import class_preferences, trace_annotation_key

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TEXT = (ROOT / "examples" / "policy.yaml").read_text()
STARTER_TEXT = (ROOT / "manifests" / "policy" / "starter-policy.yaml").read_text()
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
ADMIN = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}
DAEMONSET_USER = "system:serviceaccount:kube-system:daemon-set-controller"
OPT_IN = {"kube-steer.github.io/enabled": "true"}
SERVED_LABEL = "e2e.kube-steer.github.io/served"  # a twin namespace the running webhook steers
DRA = "/apis/resource.k8s.io/v1"
WEBHOOK_WORKERS = 2  # kits.service_processes.running_webhook's default
TOKEN_VOLUME = re.compile(r"kube-api-access-[a-z0-9]+")
WORKERS = 6
PLURAL = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
# Where the project ships policy files: the example and its packaged copy, the kustomize and Helm
# starter policies.
SHIPPED = (
    "examples/**/*.yaml",
    "manifests/**/*.yaml",
    "charts/*/files/**/*.yaml",
    "steer/presets/*.yaml",
)


def variant_text() -> str:
    """The example policy with more rules exercised (module doc)."""
    doc = yaml.safe_load(EXAMPLE_TEXT)
    spec = doc["spec"]
    gpu = spec["podClasses"][0]
    gpu.pop("deviceClasses")
    spec["devices"] = {}
    spec["podClasses"].append(
        {"name": "fpga", "requestsAny": ["example.com/fpga"], "reserveNodes": "require"}
    )
    spec["tenants"][1]["mode"] = "audit"
    spec["overcommit"]["enforcement"] = "labels"  # a gate per budget level, no pool
    spec["schedulerProfiles"]["defaultSchedulerIsUnset"] = False
    spec["spread"][1]["maxSkew"] = 3
    return yaml.safe_dump(doc)


def shipped_policies() -> dict[str, str]:
    """Every SteeringPolicy file the project ships, by path."""
    out = {}
    for pattern in SHIPPED:
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text()
            if any(
                isinstance(doc, dict) and doc.get("kind") == "SteeringPolicy"
                for doc in yaml.safe_load_all(text)
            ):
                out[str(path.relative_to(ROOT))] = text
    return out


def _no_tenants(spec: dict[str, Any]) -> None:
    spec["tenants"] = []
    scores = spec["clusterScores"]["scores"]
    spec["clusterScores"]["scores"] = [s for s in scores if s["kind"] != "tenantHeadroom"]


def _no_classes(spec: dict[str, Any]) -> None:
    spec["podClasses"] = []
    spec["devices"] = {}
    for dimension in spec["dimensions"]:
        if dimension.get("coverage", {}).get("nodes") == "offering":
            del dimension["coverage"]  # offering: nodes offering a class's resources
    scores = spec["clusterScores"]["scores"]
    spec["clusterScores"]["scores"] = [s for s in scores if s["kind"] != "freeResource"]


def _no_spread(spec: dict[str, Any]) -> None:
    spec["spread"] = []


def _bare(spec: dict[str, Any]) -> None:
    _no_tenants(spec)
    _no_classes(spec)
    _no_spread(spec)
    spec["taints"] = []


# The example with parts taken away: each leaves some of the CEL's lists empty for every pod.
REDUCED: dict[str, Callable[[dict[str, Any]], None]] = {
    "example-no-tenants": _no_tenants,
    "example-no-classes": _no_classes,
    "example-no-spread": _no_spread,
    "example-audit": lambda spec: spec.update(mode="audit"),
    "example-bare": _bare,
}


def reduced_policy(name: str) -> Policy:
    doc = yaml.safe_load(EXAMPLE_TEXT)
    REDUCED[name](doc["spec"])
    return parse_policy(yaml.safe_dump(doc))


# The DRA objects the webhook's watch reads in the served leg (kits/dra.py's, the class mapping
# DRA_GPU), and the in-process leg's catalogue built from the same: the class's extended names
# (DRA_GPU and, as every class's, `deviceclass.resource.kubernetes.io/<class>`), one claim
# template per namespace.
DRA_GPU = "example.com/dra-gpu"
CLAIM_TEMPLATE = "gpu-claim"


class Catalogue:
    """The webhook's DRA catalogue as its synced watch has it for kits/dra.py's DeviceClass
    (mapping DRA_GPU) and CLAIM_TEMPLATE (in every namespace of the test)."""

    def __init__(self) -> None:
        info = DeviceClassInfo.from_object(device_class_body(DEVICE_CLASS, DRA_GPU))
        self.by_extended = classes_by_extended_name({info.name: info})

    def template_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        return frozenset({DEVICE_CLASS}) if name == CLAIM_TEMPLATE else None

    def claim_classes(self, namespace: str, name: str) -> frozenset[str] | None:
        return None

    def template_devices(self, namespace: str, name: str) -> ClaimDevices | None:
        return ClaimDevices(((DEVICE_CLASS, 1),)) if name == CLAIM_TEMPLATE else None

    def class_for_extended_name(self, resource: str) -> str | None:
        return self.by_extended.get(resource)


CATALOGUE = Catalogue()
# -- the pods --------------------------------------------------------------------------------

CPU = ["100m", "250m", "0.57", "1", "1500m", "2", "1.234", "333m", "7", "250001u"]
MEMORY = ["64Mi", "100M", "1Gi", "1.5Gi", "123456789", "512Mi", "3G", "1000001k"]


def _resources(rng: random.Random, gpu: bool, extra: Mapping[str, str]) -> dict[str, Any]:
    limits: dict[str, str] = {}
    requests_: dict[str, str] = {}
    for name, values in (("cpu", CPU), ("memory", MEMORY)):
        shape = rng.random()
        if shape < 0.4:
            limits[name] = rng.choice(values)
        elif shape < 0.6:
            requests_[name] = rng.choice(values)
        elif shape < 0.85:  # both, the request at most the limit (the apiserver's rule)
            low, high = sorted(rng.sample(values, 2), key=parse_quantity)
            requests_[name], limits[name] = low, high
    if gpu:
        limits["nvidia.com/gpu"] = str(rng.randint(1, 4))
    for name, value in extra.items():  # extended resources: the request equals the limit
        limits[name] = requests_[name] = value
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests_:
        out["requests"] = requests_
    return out


def _forged(rng: random.Random) -> dict[str, str]:
    """Requests of the project's resources a pod should not make by itself."""
    if rng.random() > 0.12:
        return {}
    return rng.choice(
        [
            {"kube-steer.github.io/avoid-gpu-hot": "1"},
            {"kube-steer.github.io/pool-cpu": "7"},
            {"kube-steer.github.io/budget-0pct": "1"},
            {"kube-steer.github.io/unreserved-fpga": "2"},
            {"kube-steer.kubernetes.io/pool-memory": "5"},
        ]
    )


def make_pod(rng: random.Random, policy: Policy, name: str) -> dict[str, Any]:
    labels: dict[str, str] = {"app": "diff"}
    if rng.random() < 0.5:
        labels["order-chain"] = rng.choice(["orders", "payments"])
    if rng.random() < 0.4:
        labels["pod-template-hash"] = rng.choice(["abc12", "def34"])
    gpu = rng.random() < 0.3
    extra: dict[str, str] = {}
    roll = rng.random()
    if roll < 0.06:
        extra["deviceclass.resource.kubernetes.io/gpu.nvidia.com"] = "1"
    elif roll < 0.12:
        extra["example.com/fpga"] = "1"
    elif roll < 0.16:
        extra["example.com/dra-gpu"] = "1"
    containers = [
        {
            "name": f"c{i}",
            "image": "registry.example/app:1",
            "resources": _resources(rng, gpu and i == 0, extra if i == 0 else _forged(rng)),
        }
        # A few wide pods: the CEL's runtime cost grows with the containers.
        for i in range(rng.choice([1, 1, 1, 2, 3]) if rng.random() > 0.02 else 30)
    ]
    for container in containers:
        if not container["resources"]:
            del container["resources"]
    spec: dict[str, Any] = {"containers": containers}
    if rng.random() < 0.3:
        spec["initContainers"] = [
            {
                "name": f"init{i}",
                "image": "registry.example/init:1",
                "resources": _resources(rng, False, _forged(rng)),
                **({"restartPolicy": "Always"} if rng.random() < 0.4 else {}),
            }
            for i in range(rng.choice([1, 2]))
        ]
    _existing_affinity(rng, policy, spec, containers)
    _existing_tolerations(rng, spec)
    _existing_spread(rng, spec, labels)
    if rng.random() < 0.25:
        spec["schedulerName"] = rng.choice(["default-scheduler", "steer-spread", "custom"])
    if rng.random() < 0.05:
        spec["nodeName"] = "node-picked"
    if rng.random() < 0.04:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": CLAIM_TEMPLATE}]
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if rng.random() < 0.05:
        metadata["annotations"] = {"kube-steer.github.io/trace": '{"policy":"forged"}'}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _existing_affinity(
    rng: random.Random, policy: Policy, spec: dict[str, Any], containers: list[Any]
) -> None:
    roll = rng.random()
    if roll < 0.5:
        return
    node_affinity: dict[str, Any] = {}
    if roll < 0.65:
        # One of the terms the policy would add, already there (a copy of a steered pod).
        terms = class_preferences(policy, None)
        if policy.spec.pod_classes and any(
            "nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in containers
        ):
            terms = class_preferences(policy, policy.spec.pod_classes[0])
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            rng.choice(terms).to_k8s()
        ]
    elif roll < 0.8:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": 5,
                "preference": {
                    "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                },
            }
        ]
    elif roll < 0.9:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["amd64"]}]}
            ]
        }
    affinity: dict[str, Any] = {}
    if node_affinity:
        affinity["nodeAffinity"] = node_affinity
    else:
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "diff"}},
                    },
                }
            ]
        }
    spec["affinity"] = affinity


def _existing_tolerations(rng: random.Random, spec: dict[str, Any]) -> None:
    roll = rng.random()
    if roll < 0.6:
        return
    if roll < 0.75:
        spec["tolerations"] = [
            {
                "key": "kube-steer.github.io/gpu-hot",
                "operator": "Equal",
                "value": "true",
                "effect": "PreferNoSchedule",
            }
        ]
    elif roll < 0.85:
        spec["tolerations"] = [
            {"key": "kube-steer.github.io/gpu-hot", "value": "true", "effect": "PreferNoSchedule"}
        ]
    else:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]


def _existing_spread(rng: random.Random, spec: dict[str, Any], labels: Mapping[str, str]) -> None:
    roll = rng.random()
    if roll < 0.6:
        return
    if roll < 0.75 and "order-chain" in labels:
        # The example's zone rule, exactly as the policy would add it.
        constraint: dict[str, Any] = {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"order-chain": labels["order-chain"]}},
        }
        if "pod-template-hash" in labels:
            constraint["matchLabelKeys"] = ["pod-template-hash"]
        # Mostly the rule's own; else the same but for its nodeTaintsPolicy (another constraint).
        if rng.random() < 0.7:
            constraint["nodeTaintsPolicy"] = "Honor"
    elif roll < 0.9:
        constraint = {
            "maxSkew": 4,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "diff"}},
        }
    else:
        constraint = {
            "maxSkew": 1,
            "topologyKey": "rack",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "diff"}},
        }
    spec["topologySpreadConstraints"] = [constraint]


# -- the apiserver ---------------------------------------------------------------------------


class Api:
    """Raw JSON calls with the admin certificate, one HTTP session per thread."""

    def __init__(self, plane: ControlPlane) -> None:
        self.url = plane.url
        self.verify = str(plane.ca_file)
        self.cert = (str(plane.pki_dir / "admin.crt"), str(plane.pki_dir / "admin.key"))
        self.local = threading.local()

    def session(self) -> requests.Session:
        session = getattr(self.local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False
            session.verify = self.verify
            session.cert = self.cert
            self.local.session = session
        return session

    def call(
        self, method: str, path: str, body: Any = None, *, as_user: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Impersonate-User": as_user} if as_user else {}
        resp = self.session().request(
            method, self.url + path, json=body, headers=headers, timeout=30
        )
        return resp.status_code, resp.json()

    def dry_run(
        self, namespace: str, pod: Mapping[str, Any], as_user: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        return self.call(
            "POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod, as_user=as_user
        )


def _resubmittable(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A pod the apiserver returned, as a request body again."""
    out = copy.deepcopy(dict(pod))
    out.pop("status", None)
    metadata = out["metadata"]
    for key in (
        "uid",
        "creationTimestamp",
        "resourceVersion",
        "managedFields",
        "generation",
        "namespace",
    ):
        metadata.pop(key, None)
    metadata["name"] = name
    return out


def _normal(pod: Mapping[str, Any], trace_key: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the pod's metadata labels and annotations and its spec, token volume names unified;
    its trace, parsed)."""
    trace = read_trace(pod, trace_key)
    annotations = dict(pod["metadata"].get("annotations") or {})
    annotations.pop(trace_key, None)
    spec = json.loads(TOKEN_VOLUME.sub("kube-api-access", json.dumps(pod["spec"])))
    return {
        "labels": pod["metadata"].get("labels"),
        "annotations": annotations,
        "spec": spec,
    }, trace


def _admitted(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's labels, annotations (the trace's text among them) and spec, token volume names
    unified: what two admissions of one pod must agree on."""
    out: dict[str, Any] = json.loads(
        TOKEN_VOLUME.sub(
            "kube-api-access",
            json.dumps(
                {
                    "labels": pod["metadata"].get("labels"),
                    "annotations": pod["metadata"].get("annotations"),
                    "spec": pod["spec"],
                }
            ),
        )
    )
    return out


@dataclass
class Tally:
    compared: int = 0
    steered: int = 0  # compared pods whose spec the policy changed
    left_to_webhook: int = 0
    served: int = 0  # pods the running webhook steered exactly as its decision in-process
    refused: int = 0  # refused by the apiserver's validation on both paths
    mismatches: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    rules: dict[str, int] = field(default_factory=dict)  # traces naming each kind of rule


@dataclass(frozen=True)
class Namespaces:
    steered: Mapping[str, Mapping[str, str]]  # name -> labels, every kind of namespace
    plain: str  # no label: no policy matches it
    # steered namespace -> its twin: the same labels and SERVED_LABEL, where the running
    # webhook steers and the MutatingAdmissionPolicy's binding does not match
    served: Mapping[str, str]


def _compare_one(
    api: Api,
    policy: Policy,
    plans: AdmissionPlans,
    namespaces: Namespaces,
    rng_seed: int,
    index: int,
    tally: Tally,
    lock: threading.Lock,
) -> None:
    rng = random.Random(rng_seed * 100_000 + index)
    trace_key = trace_annotation_key(policy)
    name = f"diff-{index}"
    pod = make_pod(rng, policy, name)
    namespace = rng.choice(sorted(namespaces.steered))
    labels = namespaces.steered[namespace]
    daemonset = rng.random() < 0.04
    user = DAEMONSET_USER if daemonset else None
    if daemonset:
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": "agent",
                "uid": str(uuid.UUID(int=index)),
                "controller": True,
            }
        ]
    # The pod the webhook receives: defaulted, with the spread constraints as written.
    code, received = api.dry_run(namespaces.plain, pod, user)
    status_a, by_policy = api.dry_run(namespace, pod, user)
    if code != 201:
        with lock:
            if status_a == 201:
                tally.mismatches.append(
                    f"{name}: refused as plain ({received.get('message')}), "
                    "admitted through the policy"
                )
            else:
                tally.refused += 1
                tally.reasons.append(str(received.get("message")))
        return
    plain, received = received, copy.deepcopy(received)
    received["metadata"]["namespace"] = namespace
    received["spec"].pop("topologySpreadConstraints", None)
    if "topologySpreadConstraints" in pod["spec"]:
        received["spec"]["topologySpreadConstraints"] = copy.deepcopy(
            pod["spec"]["topologySpreadConstraints"]
        )
    # The webhook configuration's namespaceSelector (the install's opt-in label) keeps the
    # webhook from being called at all in a namespace without it.
    verdict = (
        decide_mutation(
            plans,
            PodRequest(
                pod=received,
                namespace=namespace,
                namespace_labels=labels,
                user_info={"username": DAEMONSET_USER, "groups": []} if daemonset else ADMIN,
                devices=CATALOGUE,
            ),
        )
        if labels.get(install_opt_in_label(policy)) == "true"
        else SKIPPED
    )
    steered = apply_ops(received, verdict.ops) if verdict.ops else received
    status_b, by_webhook = api.dry_run(namespaces.plain, _resubmittable(steered, name), user)
    # The running webhook, called by the apiserver over TLS: the decision above, served.
    status_c, by_server = api.dry_run(namespaces.served[namespace], pod, user)
    if status_c != status_b or (status_b == 201 and _admitted(by_server) != _admitted(by_webhook)):
        found = (
            _diff(_admitted(by_server), _admitted(by_webhook), ("served", "in-process"))
            if status_b == status_c
            else f"HTTP {status_c} ({by_server.get('message')}) != HTTP {status_b}"
        )
        with lock:
            tally.mismatches.append(f"{name} in {namespace}, the webhook served: {found}")
    else:
        with lock:
            tally.served += 1
    if status_a != 201 or status_b != 201:
        with lock:
            if status_a == status_b:
                tally.refused += 1
            else:
                tally.mismatches.append(
                    f"{name}: policy path HTTP {status_a} ({by_policy.get('message')}), webhook "
                    f"path HTTP {status_b} ({by_webhook.get('message')})"
                )
        return
    left = _left_to_webhook(policy, pod, verdict)
    seen_a, trace_a = _normal(by_policy, trace_key)
    seen_b, trace_b = _normal(plain if left else by_webhook, trace_key)
    problems = []
    if seen_a != seen_b:
        problems.append(_diff(seen_a, seen_b))
    if left:
        if trace_a != read_trace(pod, trace_key):
            problems.append(f"trace {trace_a} on a pod left to the webhook")
    elif trace_b is None or trace_b.get("policy") == "forged":
        if trace_a != trace_b:
            problems.append(f"trace {trace_a}, webhook's {trace_b}")
    else:
        # The webhook's text byte for byte, `via` added: with both installed, each takes the
        # other's trace as its own.
        text_a = by_policy["metadata"].get("annotations", {}).get(trace_key)
        text_b = by_webhook["metadata"]["annotations"][trace_key]
        if text_a != text_b[:-1] + f',"via":"{TRACE_VIA}"}}':
            problems.append(f"trace {text_a}, webhook's {text_b}")
        kinds = [r.split(":")[0] for r in trace_b["rules"]]
        kinds += ["audit"] if trace_b.get("mode") == "audit" else []
        with lock:
            for kind in kinds:
                tally.rules[kind] = tally.rules.get(kind, 0) + 1
    with lock:
        if left:
            tally.left_to_webhook += 1
        else:
            tally.compared += 1
            tally.steered += bool(verdict.ops)
        if problems:
            tally.mismatches.append(
                f"{name} in {namespace} {json.dumps(pod)}: " + "; ".join(problems)
            )


def _left_to_webhook(policy: Policy, pod: Mapping[str, Any], verdict: Any) -> bool:
    """Whether the policy's NotCovered list leaves this pod to the webhook: when a pod class
    names DeviceClasses (the example's GPU class), a pod the webhook steers that has a claim,
    or an extended resource a DeviceClass may map while its requests put it in no class
    (dra-extended-resources) or in the GPU class, whose device counter would count it
    (device-counter; the generated init containers request no GPU)."""
    if not any(c.device_classes for c in policy.spec.pod_classes):
        return False
    if verdict.mutation is None or verdict.mutation.skipped is not None:
        return False
    spec = pod["spec"]
    names = {
        name
        for part in ("containers", "initContainers")
        for container in spec.get(part) or ()
        for kind in ("requests", "limits")
        for name in (container.get("resources") or {}).get(kind) or {}
    }
    foreign = any(n.startswith("example.com/") for n in names)
    return bool(spec.get("resourceClaims")) or foreign


def _diff(a: Any, b: Any, sides: tuple[str, str] = ("policy", "webhook"), path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _diff(a.get(key), b.get(key), sides, f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _diff(x, y, sides, f"{path}[{i}]")
    return f"{path}: {sides[0]} {json.dumps(a)} != {sides[1]} {json.dumps(b)}"


# -- the test ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*shipped_policies(), *REDUCED])
def test_the_apiserver_accepts_what_admission_policy_prints_for(
    control_plane: ControlPlane, name: str
) -> None:
    """`steer policy admission-policy --mutating -f FILE | kubectl apply -f -`, as a dry run:
    every object, the MutatingAdmissionPolicy's CEL compiled by the apiserver."""
    shipped = shipped_policies()
    policy = parse_policy(shipped[name]) if name in shipped else reduced_policy(name)
    objects = [
        *admission_policies(policy, scorer_user=scorer_username(policy)),
        *mutating_admission_policy(policy).objects,
    ]
    assert "MutatingAdmissionPolicy" in [o["kind"] for o in objects]
    api = Api(control_plane)
    refused = []
    for obj in objects:
        code, answer = api.call("POST", f"{ADMISSION}/{PLURAL[obj['kind']]}?dryRun=All", obj)
        if code != 201:
            refused.append(f"{obj['kind']} {obj['metadata']['name']}: {_refusal(answer)}")
    assert not refused, "\n".join(refused)


def _refusal(answer: Mapping[str, Any]) -> str:
    """The apiserver's reasons: per field the CEL compiler's errors, not the whole expression
    its message repeats."""
    causes = (answer.get("details") or {}).get("causes") or []
    found = [
        f"{cause.get('field')}: "
        + "; ".join(
            re.findall(r"ERROR: <input>:\d+:\d+: [^\n]*", cause.get("message", ""))
            or [cause.get("message", "")[-300:]]
        )
        for cause in causes
    ]
    return "; ".join(found) or str(answer.get("message"))


def test_the_starter_and_example_policies_are_among_those_checked() -> None:
    assert {
        "examples/policy.yaml",
        "manifests/policy/starter-policy.yaml",
        "charts/kube-steer/files/starter-policy.yaml",
    } <= set(shipped_policies())


@pytest.fixture
def install(control_plane: ControlPlane) -> Iterator[Callable[[Policy], None]]:
    """install(policy): the policy's MutatingAdmissionPolicy and binding, replacing the last;
    both removed at teardown."""
    api = Api(control_plane)
    names: set[str] = set()

    def remove() -> None:
        for name in names:
            for kind in ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
                api.call("DELETE", f"{ADMISSION}/{kind}/{name}")

    def put(policy: Policy) -> None:
        remove()
        for obj in mutating_admission_policy(policy).objects:
            if obj["kind"] == "MutatingAdmissionPolicyBinding":
                # The served leg's namespaces are the webhook's alone.
                obj["spec"]["matchResources"] = {
                    "namespaceSelector": {
                        "matchExpressions": [{"key": SERVED_LABEL, "operator": "DoesNotExist"}]
                    }
                }
            code, answer = api.call("POST", f"{ADMISSION}/{PLURAL[obj['kind']]}", obj)
            assert code == 201, answer
            names.add(obj["metadata"]["name"])

    yield put
    remove()


def _wait_steered(api: Api, namespace: str, policy: Policy, via: str | None) -> None:
    """Until a probe pod in `namespace` carries this policy's trace with `via` (TRACE_VIA: the
    MutatingAdmissionPolicy's; None: the webhook's). The apiserver picks up a new policy or
    webhook configuration from its informer within a second or two."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }

    def steered() -> bool:
        code, answer = api.dry_run(namespace, probe)
        trace = read_trace(answer, trace_annotation_key(policy)) if code == 201 else None
        return trace is not None and (trace.get("policy"), trace.get("via")) == (
            policy.version,
            via,
        )

    wait_until(f"pods in {namespace} steered by {via or 'the webhook'}", steered, timeout=30)


@contextlib.contextmanager
def served_by_webhook(
    plane: ControlPlane, policy_text: str, namespaces: Iterable[str], workdir: Path
) -> Iterator[None]:
    """`steer webhook serve` for the policy, called by the apiserver through the project's
    MutatingWebhookConfiguration (manifests/webhook/admission.yaml) narrowed to namespaces
    labelled SERVED_LABEL; kits/dra.py's DeviceClass (mapping DRA_GPU), and CLAIM_TEMPLATE in
    each of `namespaces`, for its DRA watch. Yields once every worker's catalogue has synced; all
    removed at the end."""
    api = Api(plane)
    dra = DraKit(KubeJson(plane.api_client()))
    dra.ensure_device_class(DEVICE_CLASS, DRA_GPU)  # another test's of that name: ours meanwhile
    for namespace in namespaces:
        dra.ensure_claim_template(namespace, CLAIM_TEMPLATE, 1)
    policy_file = workdir / "policy.yaml"
    policy_file.write_text(policy_text)
    configuration = next(
        doc
        for doc in admission_configurations("", "")
        if doc["kind"] == "MutatingWebhookConfiguration"
    )
    try:
        with running_webhook(plane, policy_file, workdir) as hook:
            for webhook in configuration["webhooks"]:
                webhook["clientConfig"] = {
                    "url": hook.url + webhook["clientConfig"]["url"],
                    "caBundle": hook.ca_bundle,
                }
                webhook["namespaceSelector"]["matchExpressions"].append(
                    {"key": SERVED_LABEL, "operator": "Exists"}
                )
            code, answer = api.call(
                "POST", f"{ADMISSION}/mutatingwebhookconfigurations", configuration
            )
            assert code == 201, answer
            status = hook.metrics_url.removesuffix("/metrics") + "/status"
            wait_until(
                "every webhook worker's DRA catalogue synced",
                lambda: _catalogues_synced(status),
                timeout=60,
            )
            yield
    finally:
        name = configuration["metadata"]["name"]
        api.call("DELETE", f"{ADMISSION}/mutatingwebhookconfigurations/{name}")
        api.call("DELETE", f"{DRA}/deviceclasses/{DEVICE_CLASS}")


def _catalogues_synced(status_url: str) -> bool:
    with requests.Session() as session:
        session.trust_env = False
        workers = session.get(status_url, timeout=5).json()["workers"]
    return len(workers) == WEBHOOK_WORKERS and all(w["devices"]["synced"] for w in workers)


@pytest.mark.parametrize(
    ("policy_name", "pods", "seed"),
    [("example", 300, 32), ("variant", 150, 3962), ("starter", 100, 20)],
)
def test_the_mutating_admission_policy_steers_pods_as_the_webhook_does(
    control_plane: ControlPlane,
    make_namespace: Callable[..., str],
    install: Callable[[Policy], None],
    tmp_path: Path,
    policy_name: str,
    pods: int,
    seed: int,
) -> None:
    text = {"example": EXAMPLE_TEXT, "starter": STARTER_TEXT, "variant": variant_text()}[
        policy_name
    ]
    policy = parse_policy(text)
    kinds = {
        "dept-a": {**OPT_IN, "tenant": "dept-a"},
        "dept-b": {**OPT_IN, "tenant": "dept-b"},
        "none": dict(OPT_IN),
        "off": {"tenant": "dept-a"},  # not opted in: left alone by both
    }
    steered = {
        make_namespace(labels, prefix=f"mp-{kind}"): labels for kind, labels in kinds.items()
    }
    served = {
        name: make_namespace({**labels, SERVED_LABEL: "yes"}, prefix=f"ws-{kind}")
        for (name, labels), kind in zip(steered.items(), kinds, strict=True)
    }
    for name in list(steered):
        steered[name] = {**steered[name], "kubernetes.io/metadata.name": name}
    # The webhook path's first pass meets no policy: in a namespace without labels, or, when the
    # policy opts every namespace in (the starter), in one it always leaves out.
    if policy.spec.opt_in.namespace_selector.matches({}):
        plain = ALWAYS_EXCLUDED_NAMESPACES[0]
        control_plane.ensure_namespace(plain)  # its default ServiceAccount, made late otherwise
    else:
        plain = make_namespace({}, prefix="mp-plain")
    namespaces = Namespaces(steered, plain, served)
    api = Api(control_plane)
    install(policy)
    dept_a = next(n for n in steered if n.startswith("mp-dept-a"))
    _wait_steered(api, dept_a, policy, TRACE_VIA)
    plans = AdmissionPlans.from_policy(policy)
    tally = Tally()
    lock = threading.Lock()
    with served_by_webhook(control_plane, text, served.values(), tmp_path):
        _wait_steered(api, served[dept_a], policy, None)
        started = time.monotonic()
        with ThreadPoolExecutor(WORKERS) as pool:
            for future in [
                pool.submit(_compare_one, api, policy, plans, namespaces, seed, i, tally, lock)
                for i in range(pods)
            ]:
                future.result()
        took = time.monotonic() - started
    print(
        f"{policy_name}: {pods} pods in {took:.1f} s: {tally.compared} compared "
        f"({tally.steered} steered), {tally.left_to_webhook} left to the webhook, "
        f"{tally.refused} refused on both paths, {tally.served} as the running webhook serves "
        f"them; rules in traces: {sorted(tally.rules.items())}"
    )
    assert not tally.mismatches, "\n".join(tally.mismatches[:10])
    assert not tally.refused, sorted(set(tally.reasons))[:5]
    assert tally.compared >= pods * 0.85
    assert tally.steered >= pods * 0.5
    assert tally.served == tally.compared + tally.left_to_webhook
    if policy_name == "example":
        assert tally.left_to_webhook > 0
    elif policy_name == "variant":
        assert tally.rules.get("audit", 0) > 0
    else:
        assert tally.rules.get("prefer", 0) >= tally.compared * 0.5

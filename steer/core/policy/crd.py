"""The `SteeringPolicy` CustomResourceDefinition, generated from the policy models (pure).

`steer policy crd` prints `crd_manifest()`; `manifests/crd/steeringpolicies.yaml` is its output
(a test keeps them equal). The schema is pydantic's JSON schema of `SteeringPolicyDoc` made
structural, as the apiserver requires of a CRD:

- `$ref`s are inlined, titles and defaults dropped (the stored object stays what its author
  wrote: the services apply the defaults, as they do to a file);
- `X | None` becomes `X` with `nullable: true`; a `const` becomes a one-value `enum`;
- a union of models picked by one key (a dimension's `source`, a cluster score's `kind`) has
  no structural form, so it becomes one object with every variant's fields, and CEL rules
  (`x-kubernetes-validations`) say which fields each variant requires and which it does not
  use, each with the field path;
- unknown fields are pruned by the schema, and `kubectl apply` (strict field validation)
  refuses them with their path.

Checks that need the whole document (references by name, label keys that clash, weights) stay
in the services, which report them in the object's status (`accepted_status`,
`rejected_status`).

Cluster-scoped: the policy steers every node and every opted-in namespace of the cluster, one
scorer writes it, and a namespaced object would suggest a namespace admin could own one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from steer.core.policy.contract import API_VERSION, KIND

__all__ = [
    "ACCEPTED",
    "API_VERSION",
    "CRD_NAME",
    "GROUP",
    "PLURAL",
    "VERSION",
    "accepted_status",
    "crd_manifest",
    "rejected_status",
    "spec_schema",
    "status_schema",
]
from steer.core.policy.issues import PolicyIssue
from steer.core.policy.spec import SteeringPolicyDoc

if TYPE_CHECKING:  # the data check imports the policy package this module is part of
    from steer.core.datacheck import DataProblem

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "steeringpolicies"
SINGULAR = "steeringpolicy"
SHORT_NAMES = ("sp", "steerpol")
CRD_NAME = f"{PLURAL}.{GROUP}"
ACCEPTED = "Accepted"
# Whether the running policy's dimensions get the data they expect (steer/core/datacheck).
DATA_READY = "DataReady"
# The most problems the status lists (each also in the condition's message): a document with
# thousands of errors must not make a status larger than etcd takes.
MAX_STATUS_PROBLEMS = 50

# What a `X | None` node says beside its variants and keeps once it is `X`.
_CARRIED = ("description",)


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = defs[ref.rsplit("/", 1)[-1]]
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline(merged, defs)
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """One JSON-schema node as a structural OpenAPI v3 node."""
    variants = node.get("anyOf") or node.get("oneOf")
    if variants:
        kept = [v for v in variants if v.get("type") != "null"]
        nullable = len(kept) < len(variants)
        if len(kept) == 1:
            one = _structural({**kept[0], **{k: v for k, v in node.items() if k in _CARRIED}})
        else:
            one = _tagged_union(kept)
        if nullable:
            one["nullable"] = True
        return one
    out: dict[str, Any] = {}
    if "description" in node:
        out["description"] = " ".join(str(node["description"]).split())
    kind = node.get("type")
    if kind is not None:
        out["type"] = kind
    if "const" in node:
        out["enum"] = [node["const"]]
    for key in ("enum", "minimum", "maximum", "minItems", "maxItems", "pattern", "required"):
        if key in node:
            out[key] = node[key]
    if kind == "object":
        props = node.get("properties")
        if props:
            out["properties"] = {k: _structural(v) for k, v in props.items()}
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = _structural(extra)
    if kind == "array":
        out["items"] = _structural(node["items"])
    return out


def _tag_of(variants: list[dict[str, Any]]) -> str:
    """The key whose `const` names each variant."""
    common = set.intersection(*(set(v.get("properties", {})) for v in variants))
    for key in sorted(common):
        if all("const" in v["properties"][key] for v in variants):
            return str(key)
    raise ValueError("a union of models needs one key that names each variant")


def _same_field(a: dict[str, Any], b: dict[str, Any], where: str, name: str) -> dict[str, Any]:
    """One schema for a field several variants have: the same but for `nullable` (optional in
    one variant, required in another) and its description."""

    def bare(node: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in node.items() if k not in ("nullable", "description")}

    if bare(a) != bare(b):
        raise ValueError(f"field {name!r} of {where} has another type in an earlier variant")
    out = {**b, **a}
    if a.get("nullable") or b.get("nullable"):
        out["nullable"] = True
    return out


def _tagged_union(variants: list[dict[str, Any]]) -> dict[str, Any]:
    """A union picked by one key, as one object: every variant's fields, and CEL rules for what
    each variant requires and does not use."""
    key = _tag_of(variants)
    tags = [v["properties"][key]["const"] for v in variants]
    default = next(
        (v["properties"][key]["default"] for v in variants if "default" in v["properties"][key]),
        None,
    )
    props: dict[str, Any] = {}
    owners: dict[str, list[str]] = {}
    for tag, variant in zip(tags, variants, strict=True):
        for name, schema in variant["properties"].items():
            if name == key:
                continue
            converted = _structural(schema)
            if name in props:
                converted = _same_field(props[name], converted, f"{key}: {tag}", name)
            props[name] = converted
            owners.setdefault(name, []).append(tag)
    tag_expr = f"(has(self.{key}) ? self.{key} : '{default}')" if default else f"self.{key}"
    rules: list[dict[str, Any]] = []
    for tag, variant in zip(tags, variants, strict=True):
        for name in variant.get("required", ()):
            if name != key and len(owners[name]) < len(tags):
                rules.append(
                    {
                        "rule": f"{tag_expr} != '{tag}' || has(self.{name})",
                        "message": f"required for {key}: {tag}",
                        "fieldPath": f".{name}",
                        "reason": "FieldValueRequired",
                    }
                )
    for name, used_by in owners.items():
        if len(used_by) < len(tags):
            allowed = ", ".join(f"'{t}'" for t in used_by)
            rules.append(
                {
                    "rule": f"!has(self.{name}) || {tag_expr} in [{allowed}]",
                    "message": f"used only by {key}: {' or '.join(used_by)}",
                    "fieldPath": f".{name}",
                    "reason": "FieldValueForbidden",
                }
            )
    required = set.intersection(*(set(v.get("required", ())) for v in variants))
    if default:
        required.discard(key)
    out: dict[str, Any] = {
        "type": "object",
        "properties": {key: {"type": "string", "enum": tags}, **props},
    }
    if required:
        out["required"] = sorted(required, key=list(out["properties"]).index)
    out["x-kubernetes-validations"] = rules
    return out


def spec_schema() -> dict[str, Any]:
    """The structural OpenAPI schema of `spec`, from the pydantic models."""
    raw = SteeringPolicyDoc.model_json_schema(by_alias=True, mode="validation")
    inlined = _inline(raw, raw.get("$defs", {}))
    return _structural(inlined["properties"]["spec"])


def _condition_schema() -> dict[str, Any]:
    # metav1.Condition, as every CRD's status lists its conditions.
    text = {"type": "string"}
    return {
        "type": "object",
        "required": ["type", "status", "reason", "message", "lastTransitionTime"],
        "properties": {
            "type": text,
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": text,
            "message": text,
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }


def status_schema() -> dict[str, Any]:
    text = {"type": "string"}
    return {
        "type": "object",
        "description": "Written by the scorer (its leader): whether the services accepted the "
        "spec of `observedGeneration`, every problem by its field path, and the policy the "
        "scorer runs (the last good one when the spec is rejected); `admissionPolicies` by "
        "the controller's leader.",
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": {
                "type": "array",
                "items": _condition_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "problems": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["path", "message"],
                    "properties": {"path": text, "message": text},
                },
            },
            "admissionPolicies": {
                **_condition_schema(),
                "description": "Whether the admission policies on the apiserver are those "
                "compiled from the running policy (`steer controller run "
                "--admission-policies`); a field of its own, so that the scorer's writes of "
                "`conditions` never drop it.",
            },
            "scorer": {
                "type": "object",
                "description": "The policy the scorer runs: `name@hash`, the full digest, "
                "the generation it was read from and its mode (the default filled in).",
                "properties": {
                    "version": text,
                    "digest": text,
                    "generation": {"type": "integer", "format": "int64"},
                    "mode": {"type": "string", "enum": ["enforce", "audit"]},
                },
            },
        },
    }


def crd_manifest() -> dict[str, Any]:
    """The CustomResourceDefinition `steeringpolicies.kube-steer.github.io`."""
    accepted = f'.status.conditions[?(@.type=="{ACCEPTED}")]'
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "kube-steer"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Accepted", "type": "string", "jsonPath": f"{accepted}.status"},
                        {"name": "Mode", "type": "string", "jsonPath": ".status.scorer.mode"},
                        {"name": "Version", "type": "string", "jsonPath": ".status.scorer.version"},
                        {
                            "name": "Data",
                            "type": "string",
                            "jsonPath": f'.status.conditions[?(@.type=="{DATA_READY}")].status',
                        },
                        {
                            "name": "Admission",
                            "type": "string",
                            "jsonPath": ".status.admissionPolicies.status",
                            "priority": 1,
                        },
                        {
                            "name": "Reason",
                            "type": "string",
                            "jsonPath": f"{accepted}.reason",
                            "priority": 1,
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "The kube-steer policy: what the scorer publishes "
                            "on nodes and how the webhook steers pods (README).",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


# -- status ------------------------------------------------------------------------------------


def _condition(
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: str,
    before: Mapping[str, Any],
    kind: str = ACCEPTED,
) -> dict[str, Any]:
    same = before.get("status") == status
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        # Moves only when the status flips (metav1.Condition's rule).
        "lastTransitionTime": str(before["lastTransitionTime"])
        if same and before.get("lastTransitionTime")
        else now,
    }


def previous_condition(status: Mapping[str, Any] | None, kind: str = ACCEPTED) -> Mapping[str, Any]:
    for cond in (status or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return {}


# A dimension and the exporter forms its last reading found (the `form` label a query reading
# more than one release sets: docs/exporters.md), e.g. ("gpu-util", ("dcgm-exporter hostname",)).
DimensionForms = tuple[str, Sequence[str]]


def forms_read(forms: Sequence[DimensionForms]) -> str:
    """`read dcgm-exporter hostname: gpu-util, gpu-free; read kepler >= 0.10: power`: the
    dimensions grouped by the forms they found, without node counts, so that the condition
    moves when a form appears or goes, not with each node that joins."""
    by_forms: dict[str, list[str]] = {}
    for dimension, found in forms:
        if found:
            by_forms.setdefault(", ".join(sorted(found)), []).append(dimension)
    return "; ".join(f"read {names}: {', '.join(dims)}" for names, dims in by_forms.items())


def data_condition(
    problems: Sequence[DataProblem] | None,
    *,
    generation: int,
    now: str,
    before: Mapping[str, Any] | None = None,
    forms: Sequence[DimensionForms] = (),
) -> list[dict[str, Any]]:
    """`DataReady`: True when every dimension of the running policy resolves the nodes it
    expects in the units it declares, naming the exporter forms read (`forms`), False with each
    problem and its fix; no condition before the first scoring cycle (`problems` None)."""
    if problems is None:
        return []
    previous = previous_condition(before, DATA_READY)
    if not problems:
        message = "every dimension resolves the nodes it expects, in the unit it declares"
        read = forms_read(forms)
        if read:
            message += f"; {read}"
        return [_condition("True", "Resolved", message, generation, now, previous, DATA_READY)]
    shown = [p.line() for p in problems[:MAX_STATUS_PROBLEMS]]
    more = len(problems) - len(shown)
    lines = shown + ([f"... and {more} more"] if more > 0 else [])
    message = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}: " + "; ".join(lines)
    return [_condition("False", "DataProblems", message, generation, now, previous, DATA_READY)]


def accepted_status(
    *,
    generation: int,
    version: str,
    digest: str,
    mode: str,
    now: str,
    before: Mapping[str, Any] | None = None,
    data: Sequence[DataProblem] | None = None,
    forms: Sequence[DimensionForms] = (),
) -> dict[str, Any]:
    """The status of a spec the services run; `data`: what its dimensions' data lacks, `forms`:
    the exporter forms each read."""
    return {
        "observedGeneration": generation,
        "conditions": [
            _condition(
                "True",
                "Valid",
                f"running {version}",
                generation,
                now,
                previous_condition(before),
            ),
            *data_condition(data, generation=generation, now=now, before=before, forms=forms),
        ],
        "problems": [],
        "scorer": {"version": version, "digest": digest, "generation": generation, "mode": mode},
    }


def rejected_status(
    *,
    generation: int,
    issues: Iterable[PolicyIssue],
    running: Mapping[str, Any] | None,
    now: str,
    before: Mapping[str, Any] | None = None,
    data: Sequence[DataProblem] | None = None,
    forms: Sequence[DimensionForms] = (),
) -> dict[str, Any]:
    """The status of a spec the services refused: every problem with its path (`spec.…`), and
    the policy still running (`running`: the `scorer` block of the last good one)."""
    listed = list(issues)
    shown = listed[:MAX_STATUS_PROBLEMS]
    more = len(listed) - len(shown)
    lines = [str(i) for i in shown] + ([f"... and {more} more"] if more > 0 else [])
    kept = f"; still running {running['version']}" if running else ""
    message = f"{len(listed)} problem{'s' if len(listed) != 1 else ''}{kept}: " + "; ".join(lines)
    out: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": [
            _condition("False", "Invalid", message, generation, now, previous_condition(before)),
            *data_condition(data, generation=generation, now=now, before=before, forms=forms),
        ],
        "problems": [{"path": i.path, "message": i.message} for i in shown],
    }
    if running:
        out["scorer"] = dict(running)
    return out

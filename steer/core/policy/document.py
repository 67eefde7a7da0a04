"""A validated policy and its identity, and `parse_policy`: text in, `Policy` or `PolicyError`
out (pure, so the CLI, the hot-reload helper and the tests share one validator)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import yaml
from pydantic import ValidationError

from steer.core.policy.cluster_scores import SCORE_KINDS
from steer.core.policy.dimensions import SOURCES, Dimension
from steer.core.policy.issues import PolicyError, PolicyIssue, from_pydantic
from steer.core.policy.references import reference_issues
from steer.core.policy.rules import TaintRule
from steer.core.policy.spec import Spec, SteeringPolicyDoc, composite_suffix
from steer.core.policy.tenants import Tenant


@dataclass(frozen=True)
class Policy:
    """A validated policy plus its identity (name and content hash)."""

    doc: SteeringPolicyDoc
    digest: str
    # `doc.spec`, held as a field: every decision reads it, many times.
    spec: Spec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", self.doc.spec)

    @property
    def name(self) -> str:
        return self.doc.metadata.name

    @property
    def version(self) -> str:
        """Short, stable identity written into traces and annotations: `name@hash`."""
        return f"{self.name}@{self.digest[:10]}"

    def dimension(self, name: str) -> Dimension:
        for dim in self.spec.dimensions:
            if dim.name == name:
                return dim
        raise KeyError(name)

    def label_key(self, suffix: str) -> str:
        return self.spec.label_prefix + suffix

    def step_of(self, dim: Dimension) -> int:
        return dim.step if dim.step is not None else self.spec.scoring.step

    def hysteresis_of(self, dim: Dimension) -> float:
        return dim.hysteresis if dim.hysteresis is not None else self.spec.scoring.hysteresis

    def ttl_of(self, dim: Dimension) -> float:
        return dim.ttl_seconds if dim.ttl_seconds is not None else self.spec.scoring.ttl_seconds

    def composite_suffix(self, pod_class: str | None) -> str:
        return composite_suffix(self.spec.scoring, pod_class)

    def tenant(self, name: str) -> Tenant:
        for tenant in self.spec.tenants:
            if tenant.name == name:
                return tenant
        raise KeyError(name)

    def taint_rule(self, name: str) -> TaintRule:
        for rule in self.spec.taints:
            if rule.name == name:
                return rule
        raise KeyError(name)


# libyaml's safe loader where PyYAML was built with it (its wheels are), else the pure-Python
# one: the same constructor and resolver, so the same objects. libyaml is linear in nesting depth
# and refuses a document nested over 1,000 deep at once; the pure-Python scanner is quadratic in
# flow depth (1.7 s of CPU before its RecursionError on 10,000 `[`), which held each webhook
# worker's reload that long.
SAFE_LOADER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(
    yaml, "CSafeLoader", yaml.SafeLoader
)
LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"  # libyaml's ScannerError problem
TOO_DEEP = "nested too deeply to be a policy (the YAML parser gave up)"


def parse_policy(text: str | bytes) -> Policy:
    """Parse and validate a policy document; raise `PolicyError` listing every problem.

    Reported in this order: field errors, then references by name (read from the raw document,
    so they come with the field errors), then the checks that need well-typed fields (the
    spec's model validator; they run only when there are no field errors).
    """
    try:
        raw = yaml.load(text, Loader=SAFE_LOADER)
    except RecursionError:
        raise PolicyError([PolicyIssue("", TOO_DEEP)]) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        if problem == LIBYAML_TOO_DEEP:
            raise PolicyError([PolicyIssue("", TOO_DEEP)]) from None
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise PolicyError([PolicyIssue("", f"not valid YAML: {where}{problem}")]) from None
    if not isinstance(raw, dict):
        got = type(raw).__name__ if raw is not None else "an empty document"
        raise PolicyError(
            [PolicyIssue("", f"must be a YAML mapping (a SteeringPolicy), got {got}")]
        )
    spec = raw.get("spec")
    references = list(reference_issues(spec)) if isinstance(spec, dict) else []
    try:
        doc = SteeringPolicyDoc.model_validate(raw)
    except ValidationError as exc:
        fields, checks = from_pydantic(exc, (SOURCES, SCORE_KINDS))
        raise PolicyError(fields + references + checks) from None
    except RecursionError:
        raise PolicyError([PolicyIssue("", "nested too deeply to be a policy")]) from None
    if references:
        raise PolicyError(references)
    data = text.encode() if isinstance(text, str) else text
    return Policy(doc=doc, digest=hashlib.sha256(data).hexdigest())

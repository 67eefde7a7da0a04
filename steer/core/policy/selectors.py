"""Kubernetes label selectors: matching, their checks, and whether one implies another."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Literal

from pydantic import Field

from steer.core.k8s_names import label_key_errors, label_value_errors
from steer.core.policy.fields import PolicyModel
from steer.core.policy.issues import PolicyIssue


class LabelSelector(PolicyModel):
    """A Kubernetes label selector (matchLabels + matchExpressions)."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        # Loops, not any()/all() over generators: every admission matches a few selectors.
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        expressions = self.match_expressions
        return not expressions or all(req.matches(labels) for req in expressions)

    def issues(self) -> Iterator[PolicyIssue]:
        """Keys and values the apiserver accepts; values exactly where the operator takes them."""
        for key, value in self.match_labels.items():
            for problem in label_key_errors(key):
                yield PolicyIssue("matchLabels", f"key {key!r}: {problem}")
            for problem in label_value_errors(value):
                yield PolicyIssue(f"matchLabels[{key}]", f"value {value!r}: {problem}")
        for j, req in enumerate(self.match_expressions):
            for problem in label_key_errors(req.key):
                yield PolicyIssue(f"matchExpressions[{j}].key", f"{req.key!r}: {problem}")
            for k, value in enumerate(req.values):
                for problem in label_value_errors(value):
                    yield PolicyIssue(f"matchExpressions[{j}].values[{k}]", f"{value!r}: {problem}")
            if req.operator in ("In", "NotIn") and not req.values:
                yield PolicyIssue(
                    f"matchExpressions[{j}].values", f"operator {req.operator} needs values"
                )
            if req.operator in ("Exists", "DoesNotExist") and req.values:
                yield PolicyIssue(
                    f"matchExpressions[{j}].values", f"operator {req.operator} takes no values"
                )

    def implies(self, required: LabelSelector) -> bool:
        """Whether every label set this selector matches is also matched by `required` (checked
        requirement by requirement, so False may also mean "could not prove it")."""
        labels = self.match_labels
        exprs = self.match_expressions

        def implied(req: SelectorRequirement) -> bool:
            key, values = req.key, set(req.values)
            same_key = [e for e in exprs if e.key == key]
            if req.operator == "In":
                return (key in labels and labels[key] in values) or any(
                    e.operator == "In" and set(e.values) <= values for e in same_key
                )
            if req.operator == "Exists":
                return key in labels or any(e.operator in ("In", "Exists") for e in same_key)
            if req.operator == "NotIn":
                return (
                    (key in labels and labels[key] not in values)
                    or any(e.operator == "DoesNotExist" for e in same_key)
                    or any(e.operator == "NotIn" and set(e.values) >= values for e in same_key)
                    or any(e.operator == "In" and not set(e.values) & values for e in same_key)
                )
            return key not in labels and any(e.operator == "DoesNotExist" for e in same_key)

        as_requirements = [
            SelectorRequirement(key=k, operator="In", values=(v,))
            for k, v in required.match_labels.items()
        ]
        return all(implied(r) for r in (*as_requirements, *required.match_expressions))

    def describe(self) -> str:
        """`key=value, key In [a, b]`, for messages."""
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        parts += [
            f"{e.key} {e.operator}" + (f" {list(e.values)}" if e.values else "")
            for e in self.match_expressions
        ]
        return ", ".join(parts) or "every namespace"


class SelectorRequirement(PolicyModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


LabelSelector.model_rebuild()

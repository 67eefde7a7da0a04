"""Problems found in a policy, each named by its field path (`spec.tenants[1].name`), and the
translation of pydantic's errors into them.

Checks that span fields are methods beside the model they check (`issues()`), yielding paths
relative to it; `Spec`'s model validator runs them once every field is well-typed and raises
them as one pydantic error of type `policy_issues` (`raise_issues`), which `from_pydantic`
unfolds again under the spec's own path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

CHECKS_ERROR = "policy_issues"


@dataclass(frozen=True)
class PolicyIssue:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PolicyError(ValueError):
    """The document is not a valid policy; `issues` lists every problem found."""

    def __init__(self, issues: Iterable[PolicyIssue]):
        self.issues = tuple(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


def join(base: str, path: str) -> str:
    """`base` + a relative `path` (`name`, `[2].name` or empty)."""
    if not path:
        return base
    if not base or path.startswith("["):
        return base + path
    return f"{base}.{path}"


def nested(base: str, issues: Iterable[PolicyIssue]) -> Iterator[PolicyIssue]:
    """Issues of a part of the model, moved under its field path."""
    for issue in issues:
        yield PolicyIssue(join(base, issue.path), issue.message)


def raise_issues(issues: Iterable[PolicyIssue]) -> None:
    """Raise the found issues as one pydantic error (nothing if there are none)."""
    found = tuple(issues)
    if found:
        raise PydanticCustomError(
            CHECKS_ERROR, "{count} problem(s) found", {"count": len(found), "issues": found}
        )


def from_pydantic(exc: ValidationError) -> tuple[list[PolicyIssue], list[PolicyIssue]]:
    """(field errors, cross-field issues) of a failed validation."""
    fields: list[PolicyIssue] = []
    checks: list[PolicyIssue] = []
    for err in exc.errors(include_url=False):
        path = _path(err["loc"])
        if err["type"] == CHECKS_ERROR:
            checks.extend(nested(path, err.get("ctx", {}).get("issues", ())))
            continue
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; fields are camelCase)"
        elif err["type"] == "missing":
            message = "required field is missing"
        elif err["type"] == "literal_error":
            message = f"{message[0].lower()}{message[1:]}, got {err.get('input')!r}"
        elif err["type"] == "too_short" and isinstance(err.get("input"), list | tuple):
            message = "must list at least one entry"
        elif "input" in err and not message.endswith(repr(err["input"])) and "got" not in message:
            message = f"{message[0].lower()}{message[1:]}, got {_short(err['input'])}"
        fields.append(PolicyIssue(path, message))
    return fields, checks


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def duplicates(names: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    dups: set[str] = set()
    for name in names:
        (dups if name in seen else seen).add(name)
    return dups

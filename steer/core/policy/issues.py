"""Problems found in a policy, each named by its field path (`spec.tenants[1].name`), and the
translation of pydantic's errors into them.

Checks that span fields are methods beside the model they check (`issues()`), yielding paths
relative to it; `Spec`'s model validator runs them once every field is well-typed and raises
them as one pydantic error of type `policy_issues` (`raise_issues`), which `from_pydantic`
unfolds again under the spec's own path.

Where one key picks the model (a dimension's `source:`, a cluster score's `kind:`), the models
form a discriminated union described by `Variants`, which says pydantic's errors of the union
in the policy's words: the union's tag is left out of the path, a setting of another variant
is "not used by ...", a missing one reads as the variant's message for it, and a bad key reads
as the error of a `Literal` field.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel, Discriminator, ValidationError
from pydantic_core import PydanticCustomError

CHECKS_ERROR = "policy_issues"
# The error of a union input whose key names no variant (`Variants.discriminator`).
VARIANT_ERROR = "policy_variant"


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


@dataclass(frozen=True)
class Variants:
    """A discriminated union of policy models picked by the value of one key.

    `models` maps each value of `key` (the union's tag) to its model; `default` is the tag of
    an input without the key. `not_used` is the message for a setting of another variant
    (`{tag}` is the variant's), `missing` the message for a required field that is absent.
    """

    key: str
    models: Mapping[str, type[BaseModel]]
    name: str  # what the union is called in errors: "a valid dictionary or instance of ..."
    not_used: str
    missing: Mapping[str, str] = field(default_factory=dict)
    default: str | None = None

    def label(self, tag: str) -> str:
        """The `Tag` of variant `tag` in the union, as pydantic puts it into error locations:
        `source=http`, which no field name can be, so `from_pydantic` finds it anywhere."""
        return f"{self.key}={tag}"

    def tag(self, value: Any) -> str | None:
        """The label of an input's variant, a mapping or a model (None: none, an error of type
        `VARIANT_ERROR`)."""
        if isinstance(value, Mapping):
            got = value.get(self.key, self.default)
        else:
            got = getattr(value, self.key, None)
        return self.label(got) if isinstance(got, str) and got in self.models else None

    @cached_property
    def discriminator(self) -> Discriminator:
        return Discriminator(
            self.tag,
            custom_error_type=VARIANT_ERROR,
            custom_error_message=f"no {self.name} variant for the input",
            custom_error_context={"union": self.name},
        )

    @cached_property
    def settings(self) -> frozenset[str]:
        """The fields (as written) that some variants have and others do not."""
        names = [
            {f.alias or name for name, f in model.model_fields.items()}
            for model in self.models.values()
        ]
        shared = names[0].intersection(*names[1:])
        return frozenset(name for own in names for name in own - shared)

    def field_message(self, tag: str, name: str, error: str) -> str | None:
        """The message for error type `error` of field `name` of variant `tag`, if its own."""
        if error == "extra_forbidden" and name in self.settings:
            return self.not_used.format(tag=tag)
        if error == "missing":
            return self.missing.get(name)
        return None

    def tag_issue(self, value: Any) -> PolicyIssue:
        """An input that names no variant, as a `Literal` key (or a model) would say it."""
        if not isinstance(value, Mapping):
            return PolicyIssue(
                "",
                f"input should be a valid dictionary or instance of {self.name}, got "
                f"{_short(value)}",
            )
        if self.key not in value:
            return PolicyIssue(self.key, "required field is missing")
        tags = [repr(t) for t in self.models]
        expected = f"{', '.join(tags[:-1])} or {tags[-1]}" if len(tags) > 1 else tags[0]
        return PolicyIssue(self.key, f"input should be {expected}, got {value[self.key]!r}")


def from_pydantic(
    exc: ValidationError, unions: Sequence[Variants] = ()
) -> tuple[list[PolicyIssue], list[PolicyIssue]]:
    """(field errors, cross-field issues) of a failed validation; `unions` are the unions the
    validated model holds."""
    fields: list[PolicyIssue] = []
    checks: list[PolicyIssue] = []
    by_label = {union.label(tag): (union, tag) for union in unions for tag in union.models}
    by_name = {union.name: union for union in unions}
    for err in exc.errors(include_url=False):
        loc, tagged = _untagged(err["loc"], by_label)
        path = _path(loc)
        if err["type"] == CHECKS_ERROR:
            checks.extend(nested(path, err.get("ctx", {}).get("issues", ())))
            continue
        if err["type"] == VARIANT_ERROR:
            union = by_name[err.get("ctx", {})["union"]]
            fields.extend(nested(path, [union.tag_issue(err["input"])]))
            continue
        message = err["msg"].removeprefix("Value error, ")
        own = None
        if tagged is not None and len(loc) == tagged[1] + 1 and isinstance(loc[-1], str):
            union, tag = by_label[tagged[0]]
            own = union.field_message(tag, loc[-1], err["type"])
        if own is not None:
            message = own
        elif err["type"] == "extra_forbidden":
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


def _untagged(
    loc: tuple[int | str, ...], labels: Mapping[str, object]
) -> tuple[tuple[int | str, ...], tuple[str, int] | None]:
    """`loc` without the labels of union variants (`Variants.label`), and the innermost label
    with its position in the returned location (the fields of that variant start there)."""
    out: list[int | str] = []
    last: tuple[str, int] | None = None
    for part in loc:
        if isinstance(part, str) and part in labels:
            last = (part, len(out))
            continue
        out.append(part)
    return tuple(out), last


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

"""`labelSelector` and `fieldSelector` query parameters, parsed as the apiserver parses them."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kits.apistub.status import JsonObject, bad_request

Matcher = Callable[[JsonObject], bool]

_SET_RE = re.compile(r"^\s*([^\s!=<>]+)\s+(in|notin)\s+\((.*)\)\s*$")
_OP_RE = re.compile(r"^\s*([^\s!=<>]+)\s*(==|!=|=)\s*(\S*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")


def _split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside an `in (...)` value set."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return [p for p in parts if p.strip()]


def _label_requirement(text: str) -> Callable[[dict[str, str]], bool]:
    if m := _SET_RE.match(text):
        key, op = m.group(1), m.group(2)
        values = {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _OP_RE.match(text):
        key, op, value = m.groups()
        if op in ("=", "=="):
            return lambda labels: labels.get(key) == value
        return lambda labels: labels.get(key) != value
    if m := _EXISTS_RE.match(text):
        negate, key = m.groups()
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: {text.strip()!r} in labelSelector")


def label_matcher(selector: str | None) -> Matcher:
    """Equality (`=`, `==`, `!=`), sets (`in`, `notin`) and existence (`k`, `!k`)."""
    requirements = [_label_requirement(r) for r in _split_requirements(selector or "")]

    def matches(obj: JsonObject) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(req(labels) for req in requirements)

    return matches


def _field_value(obj: JsonObject, path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def field_matcher(selector: str | None) -> Matcher:
    """`path=value`, `path==value`, `path!=value` on dotted paths (`spec.nodeName`)."""
    tests: list[tuple[str, bool, str]] = []
    for text in _split_requirements(selector or ""):
        m = _OP_RE.match(text)
        if not m:
            raise bad_request(f"invalid field selector: {text.strip()!r}")
        tests.append((m.group(1), m.group(2) != "!=", m.group(3)))

    def matches(obj: JsonObject) -> bool:
        return all((_field_value(obj, path) == value) == equal for path, equal, value in tests)

    return matches

"""The metric names a PromQL expression reads, without a PromQL parser.

Good enough to ask Prometheus whether each exists: label matchers, strings, ranges and grouping
lists are blanked first, then every identifier that is not a function call, a keyword or a
number is a metric name; `{__name__="x"}` names count too. A name it misses only costs a
diagnosis its detail, never a wrong score.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_TOKEN = re.compile(
    r"(?P<number>0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[a-zA-Z]*|\.\d+)"
    r"|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<call>\s*\()?"
)
_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
        "group_left", "group_right", "inf", "nan", "atan2", "start", "end", "smoothed",
        "anchored",
    }
)  # fmt: skip


def metric_names(query: str) -> tuple[str, ...]:
    """Distinct metric names in the order they appear."""
    names: list[str] = []
    for match in _NAME_MATCHER.finditer(query):
        names.append(match.group(1))
    text = _STRING.sub('""', query)
    while True:  # braces do not nest in PromQL, but a subquery's brackets may hold matchers
        blanked = _BRACKETS.sub(" ", _BRACES.sub(" ", text))
        if blanked == text:
            break
        text = blanked
    text = _GROUPING.sub(" ", text)
    for token in _TOKEN.finditer(text):
        ident = token.group("ident")
        if ident is None or token.group("call") or ident.lower() in _KEYWORDS:
            continue
        names.append(ident)
    return tuple(dict.fromkeys(names))


_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*[\"'`]")
_LIST = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)", re.IGNORECASE
)


def label_names(query: str) -> frozenset[str]:
    """The label names a query filters on (matchers) or groups by (`by`, `on`, ...)."""
    names = {m.group(1) for m in _MATCHER.finditer(query)}
    for group in _LIST.finditer(query):
        names.update(n.strip() for n in group.group(1).split(",") if n.strip())
    names.discard("__name__")
    return frozenset(names)

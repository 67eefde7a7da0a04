"""A JSON document over HTTP, mapped to nodes by field names in the policy.

Service registries publish instance health over REST: Consul's `/v1/health/state/any` is a list
of checks with `Node` and `Status` (`passing`, `warning`, `critical`), Nacos'
`/nacos/v1/ns/instance/list` holds `hosts[]` with `ip` and `healthy`. `spec.dimensions[].http`
says where the list is (`items`), which field names the node (a name or an address, resolved
like a Prometheus label) and which holds the value (a number, or a status mapped through
`statusValues`). Entries for one node combine by `aggregate` (default `min`: the worst check).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any

import requests

from scorer.cycle.observe import DimensionFailure, read_dimension
from scorer.cycle.sources.base import (
    NodeValue,
    Readings,
    SourceContext,
    SourceFailed,
    SourceRequest,
    concurrently,
)
from steer.core.policy import Dimension, HttpDimension, HttpSource

_MISSING = object()


class HttpJsonSource:
    def __init__(self, context: SourceContext) -> None:
        self.session = requests.Session()

    def close(self) -> None:
        self.session.close()

    def read(self, request: SourceRequest) -> Readings:
        dimensions, index, at = request.dimensions, request.index, request.at

        def fetch(dim: Dimension) -> tuple[float, float, Any]:
            """(observed at, seconds taken, the node values or the failure)."""
            assert isinstance(dim, HttpDimension)  # grouped by source (scorer/cycle/service.py)
            settings = dim.http
            t0 = time.perf_counter()
            observed_at = time.time() if at is None else at
            try:
                answer: Any = node_values(self._get(settings), settings)
            except SourceFailed as exc:
                answer = exc
            return observed_at, time.perf_counter() - t0, answer

        out = Readings(requests=len(dimensions))
        # Each dimension is its own GET: a slow registry holds the cycle for one timeout.
        for dim, (observed_at, took, answer) in zip(
            dimensions, concurrently(fetch, dimensions, "http-source"), strict=True
        ):
            if isinstance(answer, SourceFailed):
                out.failures[dim.name] = DimensionFailure(
                    dim.name, dim.what, answer.kind, str(answer), took
                )
                continue
            values, skipped = answer
            samples = [NodeValue(dim.node_label, node, value) for node, value in values.items()]
            reading = read_dimension(
                dim,
                samples,
                observed_at=observed_at,
                index=index,
                duration_s=took,
            )
            if skipped:
                warning = f"{skipped} entries had no node or no usable value"
                reading = dataclasses.replace(reading, warnings=(warning,))
            out.readings[dim.name] = reading
        return out

    def _get(self, settings: HttpSource) -> Any:
        headers = {"Accept": "application/json"}
        if settings.bearer_token_file:
            # Read on every request: a mounted token is rotated in place.
            try:
                with open(settings.bearer_token_file, encoding="utf-8") as fh:
                    headers["Authorization"] = f"Bearer {fh.read().strip()}"
            except OSError as exc:
                raise SourceFailed("auth", f"bearerTokenFile: {exc}") from exc
        try:
            resp = self.session.get(
                settings.url,
                timeout=settings.timeout_seconds,
                headers=headers,
                verify=settings.ca_file or True,
            )
        except requests.RequestException as exc:
            raise SourceFailed("unavailable", f"GET {settings.url}: {exc}") from exc
        if resp.status_code in (401, 403):
            raise SourceFailed("auth", f"GET {settings.url}: HTTP {resp.status_code}")
        if resp.status_code >= 500:
            raise SourceFailed("unavailable", f"GET {settings.url}: HTTP {resp.status_code}")
        if resp.status_code != 200:
            raise SourceFailed("response", f"GET {settings.url}: HTTP {resp.status_code}")
        try:
            return resp.json()
        except ValueError as exc:
            raise SourceFailed("response", f"GET {settings.url}: not JSON: {exc}") from exc


def field_at(document: Any, path: str) -> Any:
    """The value at a dotted path (`hosts`, `Node.Address`, `items.0.name`); `_MISSING` if
    there is none. The empty path is the document itself."""
    value = document
    for part in path.split(".") if path else ():
        if isinstance(value, Mapping):
            value = value.get(part, _MISSING)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def entry_value(raw: Any, settings: HttpSource) -> float | None:
    """A field's value as a number: through `statusValues` when set (JSON true/false are
    looked up as "true"/"false"), else the number itself; None when it is neither."""
    if settings.status_values is not None:
        key = ("true" if raw else "false") if isinstance(raw, bool) else str(raw)
        return settings.status_values.get(key)
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def node_values(document: Any, settings: HttpSource) -> tuple[dict[str, float], int]:
    """Per node identity, its entries' values combined; and how many entries were skipped.
    Raises SourceFailed when `items` does not lead to a list."""
    entries = field_at(document, settings.items)
    if not isinstance(entries, list):
        where = f"at {settings.items!r}" if settings.items else "at the top of the document"
        raise SourceFailed("response", f"expected a list of entries {where}")
    grouped: dict[str, list[float]] = {}
    skipped = 0
    for entry in entries:
        node = field_at(entry, settings.node_field)
        value = entry_value(field_at(entry, settings.value_field), settings)
        if not isinstance(node, str) or not node or value is None:
            skipped += 1
            continue
        grouped.setdefault(node, []).append(value)
    return {node: _combine(values, settings.aggregate) for node, values in grouped.items()}, skipped


def _combine(values: list[float], aggregate: str) -> float:
    if aggregate == "max":
        return max(values)
    if aggregate == "mean":
        return sum(values) / len(values)
    return min(values)

"""The annotations the scorer keeps on a node: which keys it wrote, and when each label's
observation was made.

The managed record (`<prefix>managed`) lists the label and taint keys and the extended
resources this scorer has written, so a rule that leaves the policy has its keys removed and
no key the scorer did not write is ever touched (scorer/cycle/retire.py, scorer/cleanup.py).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from scorer.model import NodeState
from steer.core.policy import Policy

OBSERVED_AT_SUFFIX = "observed-at"
MANAGED_SUFFIX = "managed"


def observed_at_key(policy: Policy) -> str:
    """The annotation (not a label: it changes with every value) holding, per dimension, the
    Prometheus evaluation time of the observation behind the node's current label."""
    return policy.label_key(OBSERVED_AT_SUFFIX)


def managed_key(policy: Policy) -> str:
    """The annotation listing the label and taint keys this scorer has written to the node."""
    return policy.label_key(MANAGED_SUFFIX)


@dataclass(frozen=True)
class ManagedRecord:
    """What this scorer wrote to a node: label keys, taint keys and (budget pools) extended
    resource names. `resources` is left out of the JSON when empty, so records of nodes
    without pools read exactly as before pools existed."""

    labels: frozenset[str] = frozenset()
    taints: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str | None) -> ManagedRecord:
        return _parsed_record(text) if text else cls()

    def text(self) -> str | None:
        return _record_text(self)


@functools.lru_cache(maxsize=1024)
def _parsed_record(text: str) -> ManagedRecord:
    """A record from its JSON; nodes share a few records (every cycle parses each node's), so
    each text is read once."""
    try:
        data = json.loads(text)
    except ValueError:
        return ManagedRecord()  # hand-edited: nothing is known to be ours
    if not isinstance(data, dict):
        return ManagedRecord()
    return ManagedRecord(
        labels=frozenset(str(k) for k in data.get("labels") or () if isinstance(k, str)),
        taints=frozenset(str(k) for k in data.get("taints") or () if isinstance(k, str)),
        resources=frozenset(str(k) for k in data.get("resources") or () if isinstance(k, str)),
    )


@functools.lru_cache(maxsize=1024)
def _record_text(record: ManagedRecord) -> str | None:
    """A record's JSON; nodes share a few records, so each is serialised once."""
    if not record.labels and not record.taints and not record.resources:
        return None
    data = {"labels": sorted(record.labels), "taints": sorted(record.taints)}
    if record.resources:
        data["resources"] = sorted(record.resources)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


_RECORD_FIELDS = frozenset({"labels", "taints", "resources"})


def recorded_prefixes(node: NodeState) -> tuple[str, ...]:
    """The label prefixes under which the node carries a managed record, sorted."""
    found = []
    for key, text in node.annotations.items():
        if not key.endswith(MANAGED_SUFFIX):
            continue
        prefix = key[: -len(MANAGED_SUFFIX)]
        if _is_record(prefix, text):
            found.append(prefix)
    return tuple(sorted(found))


@functools.lru_cache(maxsize=1024)
def _is_record(prefix: str, text: str) -> bool:
    if "/" not in prefix:
        return False  # a label prefix always has a domain part
    try:
        data = json.loads(text)
    except ValueError:
        return False
    if not isinstance(data, dict) or not data or not set(data) <= _RECORD_FIELDS:
        return False
    for name, entries in data.items():
        if not isinstance(entries, list):
            return False
        # Resources live under the resource prefix, labels and taints under this one.
        if not all(
            isinstance(e, str) and (name == "resources" or e.startswith(prefix)) for e in entries
        ):
            return False
    return True

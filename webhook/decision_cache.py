"""Mutation verdicts kept by pod template, so the pods of one scale-up are decided once.

A Deployment, Job or ReplicaSet creates its pods from one template: they reach the webhook
alike except for their identity (name, uid, timestamps), and the decision
(steer/core/decision.py) reads none of that. So `/mutate` keeps the verdict of each template
it saw last, keyed by what the decision reads: the pod without its identity fields
(`IDENTITY_FIELDS`), its namespace and that namespace's labels, the requesting user, and the
DRA catalogue's generation. A verdict found there is the one the decision would give again;
any change to one of those (a label, a toleration, a namespace relabelled, a claim template
created) is another key. A new policy starts an empty cache (`AdmissionHandler`).

Measured with the captured GPU pod review in-process (bench/webhook_bench.py has the served
figures): deciding takes ~47 us, the key ~4 us, a reused verdict ~1 us. A pod unlike any
before pays the key on top of the decision. Entries are few and bounded (`entries`, least
recently used out first): a few hundred templates create pods at once even in a large cluster.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import orjson

from steer.core.decision import PodRequest, Verdict

DEFAULT_ENTRIES = 256
# Per pod, never read by the decision: `tests/test_decision_cache.py` pins that a pod differing
# in these alone gets the same verdict.
IDENTITY_FIELDS = frozenset(
    {"name", "generateName", "uid", "resourceVersion", "generation", "creationTimestamp"}
    | {"managedFields", "deletionTimestamp", "deletionGracePeriodSeconds"}
)


def template_key(request: PodRequest, devices_generation: int | None) -> bytes | None:
    """What the mutation decision reads of `request`, as bytes; None when it cannot be keyed
    (an old object, a catalogue without a generation, a value JSON cannot hold).
    `devices_generation` moves whenever what `request.devices` answers does."""
    if request.old_pod is not None or devices_generation is None:
        return None
    pod = request.pod
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):
        return None
    try:
        return orjson.dumps(
            (
                request.operation,
                request.mode,
                request.namespace,
                request.namespace_labels,
                request.user_info,
                devices_generation,
                {k: v for k, v in metadata.items() if k not in IDENTITY_FIELDS},
                {k: v for k, v in pod.items() if k != "metadata"},
            )
        )
    except TypeError:
        return None


class DecisionCache:
    """Up to `entries` verdicts by `template_key`, least recently used out first; 0 keeps
    none. Thread-safe."""

    def __init__(self, entries: int = DEFAULT_ENTRIES) -> None:
        if entries < 0:
            raise ValueError(f"entries must be 0 or more, got {entries}")
        self.entries = entries
        self._verdicts: OrderedDict[bytes, Verdict] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, key: bytes) -> Verdict | None:
        with self._lock:
            verdict = self._verdicts.get(key)
            if verdict is not None:
                self._verdicts.move_to_end(key)
            return verdict

    def put(self, key: bytes, verdict: Verdict) -> None:
        if not self.entries:
            return
        with self._lock:
            self._verdicts[key] = verdict
            self._verdicts.move_to_end(key)
            while len(self._verdicts) > self.entries:
                self._verdicts.popitem(last=False)


def reusable(verdict: Verdict) -> bool:
    """Whether a verdict may answer another pod of the template: not one that depends on the
    caller's knowledge (a namespace not known yet)."""
    return verdict.result != "namespace-unknown"

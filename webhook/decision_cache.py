"""Mutation verdicts kept by pod template, so the pods of one scale-up are decided once.

A Deployment, Job or ReplicaSet creates its pods from one template: they reach the webhook
alike except for their identity (name, uid, timestamps), and the decision
(steer/core/decision.py) reads none of that. So `/mutate` keeps the verdict of each template
it saw last, keyed by a digest of what the decision reads: the pod without its identity fields
(`IDENTITY_FIELDS`), its namespace and that namespace's labels, the requesting user, and the
DRA catalogue's generation. A verdict found there is the one the decision would give again;
any change to one of those (a label, a toleration, a namespace relabelled, a claim template
created) is another key. A new policy starts an empty cache (`AdmissionHandler`).

Bounded in bytes, not only in entries, because pods are the clients' to size (whole pods as
keys let 96 distinct 2 MiB pods hold ~200 MB of one worker). The key is the SHA-256 digest of
what the decision reads, never the pod; a review over `LARGEST_KEYED_REVIEW` is decided every
time (the handler asks). Each entry weighs its key and what its verdict's patch and warnings
serialise to (`Kept.weight`), against `max_bytes` for the whole cache. A pod's own
values in a patch (its affinity terms, merged) count there; the policy's pieces a patch shares
with the plans count too, so the weight errs high.

Measured with the captured GPU pod review in-process (bench/webhook_bench.py has the served
figures): deciding takes ~47 us, the key ~6 us (the digest ~2 us of it), a reused verdict
~1 us; an entry holds ~14 KiB and weighs 16 KiB. A pod unlike any before pays the key on top
of the decision. Entries are few and bounded (`entries`, least recently used out first): a
few hundred templates create pods at once even in a large cluster.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import orjson

from steer.core.decision import PodRequest, Verdict
from webhook.review import patch_of

DEFAULT_ENTRIES = 256
# Per worker. The GPU review's entry weighs 16 KiB: 256 of them take half of it.
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
# Real pods, even with long env lists or a last-applied annotation, are tens of KiB; a larger
# review is decided every time (its parse costs more than its decision anyway).
LARGEST_KEYED_REVIEW = 256 * 1024
# Per entry beside its key and patch: the verdict's objects, the LRU's links.
ENTRY_OVERHEAD_BYTES = 2048
# The patch's bytes, and its operations as Python objects (about four times their JSON).
OBJECTS_PER_JSON_BYTE = 5
# Per pod, never read by the decision: `tests/test_decision_cache.py` pins that a pod differing
# in these alone gets the same verdict.
IDENTITY_FIELDS = frozenset(
    {"name", "generateName", "uid", "resourceVersion", "generation", "creationTimestamp"}
    | {"managedFields", "deletionTimestamp", "deletionGracePeriodSeconds"}
)


def template_key(
    request: PodRequest, devices_generation: int | None, read_labels: frozenset[str] | None = None
) -> bytes | None:
    """The SHA-256 digest of what the mutation decision reads of `request`; None when it cannot
    be keyed: not the creation of a pod (a template's pods are created; the decision answers
    anything else at once), an old object, a catalogue without a generation, a value JSON
    cannot hold. `devices_generation` moves whenever what `request.devices` answers does.
    `read_labels` (`MutationPlan.read_label_keys`) names the pod labels the decision reads:
    given, the key holds only those of a pod whose labels are all strings, so pods that differ
    in a label no rule reads (a per-pod index, a build number) share the verdict."""
    pod = request.pod
    if request.operation != "CREATE" or request.kind != "Pod" or pod is None:
        return None
    if request.old_pod is not None or devices_generation is None:
        return None
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):
        return None
    try:
        text = orjson.dumps(
            (
                request.operation,
                request.mode,
                request.namespace,
                request.namespace_labels,
                request.user_info,
                devices_generation,
                {
                    k: _read(v, read_labels) if k == "labels" else v
                    for k, v in metadata.items()
                    if k not in IDENTITY_FIELDS
                },
                {k: v for k, v in pod.items() if k != "metadata"},
            )
        )
    except TypeError:
        return None
    # Collision-resistant: a pod crafted to share another template's key would get its verdict.
    return hashlib.sha256(text).digest()


def _read(labels: object, read: frozenset[str] | None) -> object:
    """The labels the decision reads: those named in `read`, when all are strings (the decision
    reads other labels only to say they are not an object of strings)."""
    if read is None or not isinstance(labels, dict):
        return labels
    if not all(type(v) is str for v in labels.values()):
        return labels
    return {k: v for k, v in labels.items() if k in read}


@dataclass(frozen=True)
class Kept:
    """A verdict as the cache keeps it: with its JSON Patch serialised and encoded once, as the
    response carries it (a pod answered from the cache reuses the text), and what keeping it
    costs, roughly and erring high: its patch and warnings as parsed objects, and a fixed
    part."""

    verdict: Verdict
    patch: str | None
    weight: int


def keep(verdict: Verdict) -> Kept:
    patch = patch_of(verdict)
    # The patch's JSON is three quarters of its base64.
    size = sum(len(w) for w in verdict.warnings) + len(patch or "") * 3 // 4
    return Kept(verdict, patch, ENTRY_OVERHEAD_BYTES + OBJECTS_PER_JSON_BYTE * size)


def verdict_bytes(verdict: Verdict) -> int:
    """What keeping `verdict` costs (`Kept.weight`)."""
    return keep(verdict).weight


class DecisionCache:
    """Up to `entries` verdicts by `template_key`, weighing `max_bytes` at most together
    (each `Kept.weight` and its key), least recently used out first; 0 entries or 0 bytes keeps
    none. An entry heavier than an eighth of `max_bytes` is not kept. Thread-safe."""

    def __init__(self, entries: int = DEFAULT_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if entries < 0:
            raise ValueError(f"entries must be 0 or more, got {entries}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, got {max_bytes}")
        self.entries = entries if max_bytes else 0
        self.max_bytes = max_bytes
        self.bytes = 0
        self._kept: OrderedDict[bytes, tuple[Kept, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: bytes) -> Kept | None:
        with self._lock:
            found = self._kept.get(key)
            if found is None:
                return None
            self._kept.move_to_end(key)
            return found[0]

    def put(self, key: bytes, kept: Kept) -> bool:
        """Keep `kept` under `key`; False when it is too heavy to keep (or nothing is)."""
        weight = kept.weight + len(key)
        if not self.entries or weight > self.max_bytes // 8:
            return False
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._kept[key] = (kept, weight)
            self.bytes += weight
            while len(self._kept) > self.entries or self.bytes > self.max_bytes:
                _key, (_out, out_weight) = self._kept.popitem(last=False)
                self.bytes -= out_weight
        return True


def reusable(verdict: Verdict) -> bool:
    """Whether a verdict may answer another pod of the template: not one that depends on the
    caller's knowledge (a namespace not known yet)."""
    return verdict.result != "namespace-unknown"

"""The policy read from a `SteeringPolicy` object (cluster-scoped, CRD in
manifests/crd/steeringpolicies.yaml), kept current by a watch; shared by the scorer and the
webhook, beside the file source (`steer.adapters.policy_file`).

One list + watch of the one object (`fieldSelector=metadata.name=NAME`, the project's
`ListWatcher`). Each spec seen is judged by the same `parse_policy` as a file: its document
(apiVersion, kind, the object's name, spec) as canonical JSON, whose hash is the policy's
digest, so every replica of both services names the same object the same version. A bad spec,
a deleted object, an apiserver away: the last good policy keeps serving; what was judged last
(`verdict`) is what the scorer reports in the object's status (scorer/jobs/policy_status.py).
Status writes do not change the spec, so they are not judged again.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes import client

from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.adapters.listwatch import ListWatcher
from steer.adapters.policy_file import MAX_POLICY_BYTES, PolicyKeeper
from steer.core.policy import Policy, PolicyError, PolicyIssue, parse_policy
from steer.core.policy.crd import CRD_NAME, GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

COLLECTION = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
HTTP_NOT_FOUND = 404


def add_policy_source(
    parser: argparse.ArgumentParser, *, required: bool, file_note: str, object_note: str
) -> None:
    """`--policy FILE` or `--policy-resource NAME`, one of them; the notes say how the service
    follows each."""
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--policy", metavar="FILE", help=f"SteeringPolicy YAML file{file_note}")
    source.add_argument(
        "--policy-resource",
        metavar="NAME",
        help=f"the cluster-scoped SteeringPolicy object NAME instead of a file{object_note}",
    )


def object_path(name: str) -> str:
    return f"{COLLECTION}/{name}"


def policy_document(obj: Mapping[str, Any]) -> bytes:
    """The policy document of a SteeringPolicy object, as canonical JSON (sorted keys): the
    same spec gives the same bytes, and so the same digest, wherever it is read."""
    meta = obj.get("metadata") or {}
    doc = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {"name": meta.get("name")},
        "spec": obj.get("spec"),
    }
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def parse_policy_object(obj: Mapping[str, Any]) -> Policy:
    data = policy_document(obj)
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(
            [PolicyIssue("spec", f"{len(data)} bytes, larger than {MAX_POLICY_BYTES}; not parsed")]
        )
    return parse_policy(data)


@dataclass(frozen=True)
class Verdict:
    """What became of the spec of one generation: accepted (no issues) or its problems."""

    generation: int
    issues: tuple[PolicyIssue, ...] = ()
    # Set when the object is gone or unreadable rather than invalid (nothing to report on it).
    absent: str | None = None

    @property
    def accepted(self) -> bool:
        return not self.issues and self.absent is None


def _generation(obj: Mapping[str, Any]) -> int:
    value = (obj.get("metadata") or {}).get("generation")
    return int(value) if isinstance(value, int) else 0


def fetch_policy_object(kube: KubeJson, name: str) -> dict[str, Any]:
    """GET the object; `PolicyError` says what is missing (the object, or the CRD)."""
    try:
        return kube.request("GET", object_path(name))
    except KubeApiError as exc:
        if exc.status == HTTP_NOT_FOUND:
            raise PolicyError(
                [
                    PolicyIssue(
                        "",
                        f"SteeringPolicy {name!r} not found (is the CRD {CRD_NAME} installed? "
                        f"`kubectl get steeringpolicies`; `steer policy migrate` makes one "
                        f"from a ConfigMap)",
                    )
                ]
            ) from None
        raise PolicyError(
            [PolicyIssue("", f"cannot read SteeringPolicy {name!r}: {exc}")]
        ) from None


class PolicyResourceWatcher(PolicyKeeper):
    """Keeps the current policy of one SteeringPolicy object.

    The first read must give a valid policy (as the file's first load must); afterwards a bad
    edit is counted, logged and kept in `verdict`, and the last good policy keeps serving."""

    def __init__(
        self,
        api_client: client.ApiClient | Callable[[], client.ApiClient],
        name: str,
        *,
        timeout_s: int = 300,
        backoff_s: float = 0.5,
    ) -> None:
        self.name = name
        self._verdict_listeners: list[Callable[[Verdict], None]] = []
        self._watch = _PolicyObjectWatch(api_client, self, timeout_s=timeout_s, backoff_s=backoff_s)
        obj = fetch_policy_object(self._watch.kube, name)
        super().__init__(parse_policy_object(obj))
        self._seen: str | None = hashlib.sha256(policy_document(obj)).hexdigest()
        self.verdict = Verdict(_generation(obj))
        self.running_generation = self.verdict.generation
        # The status as last read from the object: the writer keeps its transition times.
        self.object_status: Mapping[str, Any] | None = obj.get("status")

    def on_verdict(self, listener: Callable[[Verdict], None]) -> None:
        """Call `listener(verdict)` whenever a new spec is judged (or the object goes)."""
        with self._lock:
            self._verdict_listeners.append(listener)

    def offer(self, obj: Mapping[str, Any]) -> bool:
        """Judge the object as listed or watched; True when a new policy was swapped in."""
        self.object_status = obj.get("status")
        data = policy_document(obj)
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._seen and self.verdict.absent is None:
            return False  # a status write, or the same spec again
        self._seen = digest
        generation = _generation(obj)
        if digest == self._current.digest:
            # Back to the policy in force (a bad edit reverted): nothing to swap.
            self._clear_error()
            self.running_generation = generation
            self._judged(Verdict(generation))
            return False
        try:
            policy = parse_policy_object(obj)
        except PolicyError as exc:
            self._reject(f"SteeringPolicy {self.name!r} generation {generation}:\n{exc}")
            self._judged(Verdict(generation, tuple(exc.issues)))
            return False
        self.running_generation = generation
        self._swap(policy)
        self._judged(Verdict(generation))
        return True

    def gone(self, why: str) -> None:
        """The object is deleted (or not listed): keep serving, say so once."""
        self._seen = None
        self._reject(f"SteeringPolicy {self.name!r} {why}; keeping {self._current.version}")
        self._judged(Verdict(self.verdict.generation, absent=why))

    def _judged(self, verdict: Verdict) -> None:
        with self._lock:
            self.verdict = verdict
            listeners = list(self._verdict_listeners)
        for listener in listeners:
            try:
                listener(verdict)
            except Exception:
                log.exception("policy verdict listener failed")

    def start(self) -> None:
        self._watch.start()

    def stop(self) -> None:
        self._watch.stop()


class _PolicyObjectWatch(ListWatcher):
    thread_name = "policy-watch"

    def __init__(
        self,
        api_client: client.ApiClient | Callable[[], client.ApiClient],
        owner: PolicyResourceWatcher,
        *,
        timeout_s: int,
        backoff_s: float,
    ) -> None:
        super().__init__(api_client, timeout_s=timeout_s, backoff_s=backoff_s)
        self.owner = owner
        self.path = COLLECTION

    # Per object, where the other watches have one query per class.
    @property
    def query(self) -> Mapping[str, str]:  # type: ignore[override]
        return {"fieldSelector": f"metadata.name={self.owner.name}"}

    def on_list(self, items: Iterable[dict[str, Any]]) -> None:
        found = [i for i in items if (i.get("metadata") or {}).get("name") == self.owner.name]
        if found:
            self.owner.offer(found[0])
        else:
            self.owner.gone("is not found")

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.owner.gone("was deleted")
        else:
            self.owner.offer(obj)

    def on_failure(self, message: str) -> None:
        log.warning("policy watch of %s: %s; listing again", self.owner.name, message)

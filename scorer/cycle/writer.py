"""Node writes: only the owned keys that changed, at a bounded rate, without losing others' changes.

- Labels and the observed-at annotation go in a JSON merge patch naming only the changed
  keys (`null` removes one). Labels are a map, so such a patch cannot undo a concurrent change
  to any other key, and needs no resourceVersion.
- `spec.taints` is an atomic list: any patch replaces all of it. So the writer takes the
  node's taints as read, keeps every foreign taint exactly as it is, puts its own in, and sends
  the list with `metadata.resourceVersion`; a concurrent writer makes that a 409, after which
  it merges again, with exponential backoff, onto the node as the scorer's node watch has seen
  it since (`reread`; no GET per conflict, the watch delivers the change that caused it), or
  as a GET reads it where no watch runs (`steer scorer cleanup`).
- Budget pools are extended resources in the node's status: a merge patch of
  `status.capacity` and `status.allocatable` (the same values: a kubelet recomputes allocatable
  from capacity) through the `/status` subresource, naming only the pools that changed, so
  every other resource (cpu, nvidia.com/gpu, ...) stays as it is. It goes before the metadata
  patch that records the pools in `<prefix>managed`: if one of the two fails, the record lags
  behind the node (fixed next cycle) rather than claiming a resource we never wrote.
- A token bucket (policy `writeQps` / `writeBurst`) paces every write request, retries
  included: the Python client has no limiter, and 5,000 PATCHes in one burst would crowd out
  everyone else in the apiserver's priority-and-fairness queue.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from scorer.cycle.plan import CyclePlan, NodePlan
from scorer.model import NodeState
from scorer.watch.nodes import newer
from steer.adapters.kubejson import (
    BOUND_PODS,
    MERGE_PATCH,
    NAMESPACES_PATH,
    PODS_PATH,
    KubeApiError,
    KubeJson,
    events_path,
    failed_scheduling_selector,
    namespace_path,
    node_path,
    node_status_path,
    pod_path,
)
from steer.core.policy import Policy
from steer.core.steering import owned_taint_keys

log = logging.getLogger(__name__)


class RateLimiter:
    """Token bucket: `burst` writes at once, then `qps` per second. Thread-safe."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(
                f"rate limiter: qps must be > 0 and burst >= 1, got qps={qps}, burst={burst}"
            )
        self._lock = threading.Lock()
        self._clock = clock
        self._sleep = sleep
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = clock()

    def configure(self, qps: float, burst: int) -> None:
        with self._lock:
            self.qps, self.burst = qps, burst
            self._tokens = min(self._tokens, float(burst))

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
        if wait > 0:
            self._sleep(wait)
        return wait


# The scorer's Node writes are its own in managedFields (`kubectl get node
# --show-managed-fields`), not the client library's default user agent.
FIELD_MANAGER = {"fieldManager": "kube-steer-scorer"}


class NodeApi:
    """The reads and writes the scorer makes, as plain JSON."""

    def __init__(self, kube: KubeJson, *, page_size: int = 500) -> None:
        self.kube = kube
        self.page_size = page_size

    def list_nodes(self) -> list[NodeState]:
        """Every Node, reduced page by page (a real Node's status carries its image list)."""
        return [
            NodeState.from_k8s(obj)
            for obj in self.kube.stream_list(node_path(), page_size=self.page_size)
        ]

    def get_node(self, name: str) -> NodeState:
        return NodeState.from_k8s(self.kube.request("GET", node_path(name)))

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> NodeState:
        return self._merge_patch(node_path(name), patch)

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> NodeState:
        return self._merge_patch(node_status_path(name), patch)

    def _merge_patch(self, path: str, patch: Mapping[str, Any]) -> NodeState:
        return NodeState.from_k8s(
            self.kube.request(
                "PATCH", path, body=patch, content_type=MERGE_PATCH, query=FIELD_MANAGER
            )
        )

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.kube.request("GET", pod_path(namespace, name))

    def bound_pods(self) -> Iterator[dict[str, Any]]:
        """Every pod bound to a node, page by page (the audit report reads them on demand)."""
        return iter(
            self.kube.stream_list(
                PODS_PATH, page_size=self.page_size, query={"fieldSelector": BOUND_PODS}
            )
        )

    def all_namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every namespace's labels, by name."""
        return {
            str(obj["metadata"]["name"]): dict(obj["metadata"].get("labels") or {})
            for obj in self.kube.stream_list(NAMESPACES_PATH, page_size=self.page_size)
        }

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        obj = self.kube.request("GET", namespace_path(namespace))
        return dict((obj.get("metadata") or {}).get("labels") or {})

    def failed_scheduling_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The pod's `FailedScheduling` events: one list call, filtered by the apiserver (a
        pod that waits long has one event, its series counting the repeats)."""
        return self.kube.list_all(
            events_path(namespace),
            page_size=self.page_size,
            query={"fieldSelector": failed_scheduling_selector(namespace, name)},
        )


@dataclass(frozen=True)
class WriteResult:
    node: str
    ok: bool
    requests: int
    conflicts: int
    label_keys: int
    taints_written: bool
    error: str | None = None
    status: int | None = None
    resources_written: int = 0  # gates and pools set or removed in the node's status
    # The Node as the apiserver answered the last write (None: nothing written, or it failed):
    # the scorer's view of the node until its next list.
    state: NodeState | None = None


@dataclass(frozen=True)
class WriteReport:
    results: tuple[WriteResult, ...]
    waited_s: float

    @property
    def nodes_written(self) -> int:
        return sum(1 for r in self.results if r.ok)

    @property
    def requests(self) -> int:
        return sum(r.requests for r in self.results)

    @property
    def conflicts(self) -> int:
        return sum(r.conflicts for r in self.results)

    @property
    def errors(self) -> tuple[WriteResult, ...]:
        return tuple(r for r in self.results if not r.ok)


class NodeWriter:
    def __init__(
        self,
        api: NodeApi,
        limiter: RateLimiter,
        *,
        status_limiter: RateLimiter | None = None,
        max_attempts: int = 6,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        concurrency: int = 8,
        sleep: Callable[[float], None] = time.sleep,
        reread: Callable[[str], NodeState | None] | None = None,
    ) -> None:
        """`reread(name)`: the node as a watch last saw it (None once it is gone), read after a
        409 instead of a GET."""
        self.api = api
        self.reread = reread
        self.concurrency = max(1, concurrency)
        self.limiter = limiter
        self.status_limiter = status_limiter or limiter
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._waited = 0.0
        self._waited_lock = threading.Lock()

    def apply(
        self,
        policy: Policy,
        cycle: CyclePlan,
        nodes: Sequence[NodeState],
        *,
        still_allowed: Callable[[], bool] = lambda: True,
        still_leading: Callable[[], bool] = lambda: True,
    ) -> WriteReport:
        """Write every node whose plan changed, `concurrency` nodes at a time (the limiter
        still caps the rate: concurrency only hides round-trip latency). `still_allowed`
        (leading and not shutting down) is asked before each node is started and before each
        of its requests, once its turn at the limiter has come; `still_leading` before each
        request that finishes a node whose status is written. So a replica that loses its
        Lease mid-cycle sends nothing more once it knows, even after waiting at the limiter."""
        self._waited = 0.0
        by_name = {n.name: n for n in nodes}
        todo = [(plan, by_name[plan.node]) for plan in cycle.changes if plan.node in by_name]
        stopped = threading.Event()

        def allowed() -> bool:
            if stopped.is_set() or not still_allowed():
                if not stopped.is_set():
                    log.warning("stopped writing: shutting down, or no longer the leader")
                stopped.set()
                return False
            return True

        def leading() -> bool:
            if still_leading():
                return True
            if not stopped.is_set():
                log.warning("stopped writing: no longer the leader")
            stopped.set()
            return False

        # Two pipelines with their own limiters: gates and pools (pods wait Pending for them:
        # a node that publishes none yet refuses every gated pod) are never held back behind
        # labels, which are preferences. A node's labels and record follow its own status.
        def status(item: tuple[NodePlan, NodeState]) -> tuple[int, NodeState] | WriteResult | None:
            return self._write_status(item[0], allowed) if allowed() else None

        def metadata(
            item: tuple[NodePlan, NodeState], done: tuple[int, NodeState] | None
        ) -> WriteResult | None:
            plan, node = item
            # A node whose status was written gets its metadata too, even when shutting down
            # (no node is left half-written), but not from a replica that is no longer the
            # leader; any other node starts only while writing is allowed.
            if done is None:
                return self._write_metadata(policy, plan, node, allowed) if allowed() else None
            requests, state = done
            # Merged onto the node as its status write answered: the listed resourceVersion
            # is stale by that write, and a taint list sent with it would be a certain 409.
            result = self._write_metadata(policy, plan, state, leading) or _stopped(plan.node)
            return dataclasses.replace(
                result,
                requests=result.requests + requests,
                resources_written=len(plan.resource_changes),
                state=result.state or state,
            )

        workers = max(1, min(self.concurrency, len(todo)))
        with (
            ThreadPoolExecutor(workers, thread_name_prefix="node-status") as statuses,
            ThreadPoolExecutor(workers, thread_name_prefix="node-write") as metadatas,
        ):
            outcomes: list[Future[WriteResult | None]] = []
            for item in todo:
                if not item[0].resource_changes:
                    outcomes.append(metadatas.submit(metadata, item, None))
                    continue
                outcome: Future[WriteResult | None] = Future()
                outcomes.append(outcome)

                def chain(
                    written: Future[tuple[int, NodeState] | WriteResult | None],
                    item: tuple[NodePlan, NodeState] = item,
                    outcome: Future[WriteResult | None] = outcome,
                ) -> None:
                    try:
                        done = written.result()
                        if done is None or isinstance(done, WriteResult):
                            # Not started (stopping), or failed: the record must not claim it.
                            outcome.set_result(done)
                            return
                        follow = metadatas.submit(metadata, item, done)
                        follow.add_done_callback(lambda f: _settle(outcome, f))
                    except BaseException as exc:
                        outcome.set_exception(exc)

                statuses.submit(status, item).add_done_callback(chain)
            results = [f.result() for f in outcomes]
        return WriteReport(tuple(r for r in results if r is not None), self._waited)

    def write_node(self, policy: Policy, plan: NodePlan, node: NodeState) -> WriteResult:
        resources = 0
        status_requests = 0
        state = None
        if plan.resource_changes:
            outcome = self._write_status(plan)
            if not isinstance(outcome, tuple):
                return outcome or _stopped(plan.node)
            status_requests, state = outcome
            resources = len(plan.resource_changes)
        result = self._write_metadata(policy, plan, state or node) or _stopped(plan.node)
        return dataclasses.replace(
            result,
            requests=result.requests + status_requests,
            resources_written=resources,
            state=result.state or state,
        )

    def _write_status(
        self, plan: NodePlan, proceed: Callable[[], bool] = lambda: True
    ) -> tuple[int, NodeState] | WriteResult | None:
        """PATCH the gates and pools into the node's status; the requests made and the node
        as answered, or the failed result. `proceed` is asked before each request: None when
        it said no before the first one."""
        changes = dict(plan.resource_changes)
        patch = {"status": {"capacity": changes, "allocatable": changes}}
        for attempt in range(1, self.max_attempts + 1):
            self._pace(self.status_limiter)
            if not proceed():
                return None if attempt == 1 else _stopped(plan.node, attempt - 1)
            try:
                return attempt, self.api.patch_node_status(plan.node, patch)
            except KubeApiError as exc:
                if exc.status == 404:
                    return WriteResult(
                        plan.node, False, attempt, 0, 0, False, "node was deleted", 404
                    )
                if not (exc.conflict or exc.retriable) or attempt == self.max_attempts:
                    log.error("status write to node %s failed: %s", plan.node, exc)
                    return WriteResult(plan.node, False, attempt, 0, 0, False, str(exc), exc.status)
                self._backoff(attempt)
        raise AssertionError("unreachable: the loop returns on its last attempt")

    def _fresher(self, name: str, held: NodeState) -> NodeState:
        """The node after a 409 on `held`: the watch's state when it is newer (else `held`
        again: the next attempt, after a longer backoff, gives the watch more time), or a GET
        where no watch runs. Raises a 404 `KubeApiError` once the watch has seen it deleted."""
        if self.reread is None:
            return self.api.get_node(name)
        seen = self.reread(name)
        if seen is None:
            raise KubeApiError(404, "NotFound", f"the node watch saw node {name} deleted")
        return seen if newer(seen.resource_version, held.resource_version) else held

    def _pace(self, limiter: RateLimiter | None = None) -> None:
        waited = (limiter or self.limiter).acquire()
        with self._waited_lock:
            self._waited += waited

    def _backoff(self, attempt: int) -> None:
        self._sleep(
            min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        )

    def _write_metadata(
        self,
        policy: Policy,
        plan: NodePlan,
        node: NodeState,
        proceed: Callable[[], bool] = lambda: True,
    ) -> WriteResult | None:
        """Labels, annotations and taints in one PATCH; `proceed` as for `_write_status`."""
        meta: dict[str, Any] = {}
        if plan.label_changes:
            meta["labels"] = dict(plan.label_changes)
        if plan.annotation_changes:
            meta["annotations"] = dict(plan.annotation_changes)
        owned = owned_taint_keys(policy) | plan.retired_taint_keys
        conflicts = 0
        current = node
        for attempt in range(1, self.max_attempts + 1):
            requests = attempt - 1
            patch: dict[str, Any] = {"metadata": dict(meta)} if meta else {}
            taints = merge_taints(current, plan, owned) if plan.taints_changed else None
            if taints is not None:
                # The list replaces the node's list, so it must be based on the version read.
                patch.setdefault("metadata", {})["resourceVersion"] = current.resource_version
                patch["spec"] = {"taints": taints or None}
            if not patch:
                return WriteResult(plan.node, True, requests, conflicts, 0, False)
            self._pace()
            if not proceed():
                return None if attempt == 1 else _stopped(plan.node, requests, conflicts)
            requests = attempt
            try:
                answered = self.api.patch_node(plan.node, patch)
                return WriteResult(
                    plan.node,
                    True,
                    requests,
                    conflicts,
                    len(plan.label_changes),
                    taints is not None,
                    state=answered,
                )
            except KubeApiError as exc:
                if exc.status == 404:
                    return WriteResult(
                        plan.node, False, requests, conflicts, 0, False, "node was deleted", 404
                    )
                if not (exc.conflict or exc.retriable) or attempt == self.max_attempts:
                    log.error("write to node %s failed: %s", plan.node, exc)
                    return WriteResult(
                        plan.node, False, requests, conflicts, 0, False, str(exc), exc.status
                    )
                conflicts += int(exc.conflict)
                self._backoff(attempt)
                if exc.conflict:
                    try:
                        current = self._fresher(plan.node, current)
                    except KubeApiError as read_exc:
                        return WriteResult(
                            plan.node,
                            False,
                            requests,
                            conflicts,
                            0,
                            False,
                            str(read_exc),
                            read_exc.status,
                        )
        raise AssertionError("unreachable: the loop returns on its last attempt")


def _stopped(node: str, requests: int = 0, conflicts: int = 0) -> WriteResult:
    """A node left before its writes were done: shutting down, or no longer the leader."""
    return WriteResult(node, False, requests, conflicts, 0, False, "stopped before it was written")


def _settle(outcome: Future[Any], done: Future[Any]) -> None:
    """Pass a finished future's result (or exception) on to `outcome`."""
    try:
        outcome.set_result(done.result())
    except BaseException as exc:
        outcome.set_exception(exc)


def merge_taints(
    node: NodeState, plan: NodePlan, owned: frozenset[str]
) -> list[dict[str, Any]] | None:
    """The node's taint list with its owned taints replaced by the plan's; None when that is
    already the list the node carries (nothing to write)."""
    foreign = [dict(t) for t in node.raw_taints if t.get("key") not in owned]
    merged = foreign + [t.to_k8s() for t in plan.taints]
    current = [dict(t) for t in node.raw_taints]
    return None if merged == current else merged

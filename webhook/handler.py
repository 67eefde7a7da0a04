"""The admission request handler: AdmissionReview bytes in, (status, body, result) out.

What a pod gets is decided in the core (steer/core/decision.py: `decide_mutation`,
`decide_validation`), the same function `/explain` asks; this module decodes the review, reads
what the decision needs from memory and asks it. The decided request (`webhook.review.Decided`)
is then answered by `webhook.review.response` and counted by `WebhookMetrics.record`, one call
each. Everything a request reads is in memory: the plans built when the policy changed, the
namespace map kept by the watch, and the DRA catalogue its watches keep (webhook/devices.py).

`AdmissionHandler` never raises, so the HTTP surface (webhook/app.py) stays thin and every
failure mode maps to an answer: 400 with a JSON error for a body that is not an AdmissionReview
(413 for one over the size limit), an allowing review with a warning for an object that is not
a pod or a pod the decision cannot read (except on validation of a tenant's pod, which is denied
naming the field), 503 (the apiserver then applies the failurePolicy) when validation cannot
know the namespace's tenant yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from steer.adapters.periodic import Periodic
from steer.core.admission import Scope
from steer.core.decision import (
    AdmissionPlans,
    PodRequest,
    Verdict,
    decide_mutation,
    decide_validation,
)
from steer.core.policy import Policy
from webhook import review as rv
from webhook.decision_cache import (
    DEFAULT_ENTRIES,
    DEFAULT_MAX_BYTES,
    LARGEST_KEYED_REVIEW,
    DecisionCache,
    Kept,
    keep,
    reusable,
    template_key,
)
from webhook.devices import UNSYNCED, DeviceSource, NoDevices
from webhook.metrics import WebhookMetrics
from webhook.namespaces import NamespaceSource
from webhook.review import Endpoint

log = logging.getLogger(__name__)


class PolicySource(Protocol):
    """The hot-reload helpers' surface (`steer.adapters.policy_file.PolicyWatcher`,
    `steer.adapters.policy_resource.PolicyResourceWatcher`)."""

    @property
    def current(self) -> Policy: ...

    def subscribe(self, listener: Callable[[Policy], None], *, call_now: bool = True) -> None: ...

    def on_reload_error(self, listener: Callable[[str], None]) -> None: ...

    def status(self) -> Any: ...


class AdmissionHandler:
    """Answers AdmissionReviews from memory; rebuilds its plans when the policy changes."""

    def __init__(
        self,
        policy: PolicySource,
        namespaces: NamespaceSource,
        metrics: WebhookMetrics,
        *,
        max_body_bytes: int = rv.DEFAULT_MAX_BODY_BYTES,
        cert_status: Callable[[], Mapping[str, Any]] | None = None,
        devices: DeviceSource | None = None,
        decision_cache_entries: int = DEFAULT_ENTRIES,
        decision_cache_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.namespaces = namespaces
        self.devices: DeviceSource = devices if devices is not None else NoDevices()
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.cert_status = cert_status
        self.policy = policy
        self.decision_cache_entries = decision_cache_entries
        self.decision_cache_bytes = decision_cache_bytes
        # The plans and the verdicts decided on them, published together (one assignment).
        self._decided: tuple[AdmissionPlans, DecisionCache] | None = None
        self._relists_published = 0
        policy.subscribe(self._on_policy)
        policy.on_reload_error(lambda _message: metrics.policy_reload_errors.inc())

    def _on_policy(self, policy: Policy) -> None:
        # Built off the request path, then published with one reference assignment.
        self._decided = (
            AdmissionPlans.from_policy(policy),
            DecisionCache(self.decision_cache_entries, self.decision_cache_bytes),
        )
        self.metrics.set_policy(policy.version)
        log.info("webhook plans built for policy %s", policy.version)

    @property
    def plans(self) -> AdmissionPlans:
        assert self._decided is not None  # subscribe(call_now=True) built them in __init__
        return self._decided[0]

    # -- entry point -----------------------------------------------------------------------

    def handle(self, endpoint: Endpoint, body: bytes | None) -> rv.Outcome:
        """Decide the review, then answer it and count it, each in one step."""
        started = time.perf_counter()
        decided = self._decide(endpoint, body)
        outcome = rv.response(decided)
        self.metrics.record(decided, time.perf_counter() - started)
        return outcome

    def _decide(self, endpoint: Endpoint, body: bytes | None) -> rv.Decided:
        """The core's verdict on the review, or why there is none; never raises."""
        review = None
        try:
            if body is None:
                raise rv.BadReview(
                    "body-too-large", f"request body is over the {self.max_body_bytes}-byte limit"
                )
            review = rv.parse_review(body, max_bytes=self.max_body_bytes)
            judged = self._judge(endpoint, review, keyed=len(body) <= LARGEST_KEYED_REVIEW)
        except rv.BadReview as exc:
            return rv.Refused(endpoint, exc)
        except Exception:
            log.exception("%s %s: unexpected failure", endpoint, review.uid if review else "")
            return rv.Failed(endpoint, review)
        if judged.unjudged is not None:
            log.warning("%s %s: %s", endpoint, review.uid, judged.unjudged)
        return judged

    def _judge(self, endpoint: Endpoint, review: rv.Review, *, keyed: bool) -> rv.Judged:
        """The core's verdict on `review`; for `/mutate`, from the decision cache when `keyed`,
        with its patch as the response carries it (the cache keeps it so)."""
        request = self._request(review)
        patch = cached = None
        if endpoint == "mutate":
            verdict, kept, cached = self._decision(request, keyed=keyed)
            patch = kept.patch if kept is not None else rv.patch_of(verdict)
        else:
            scope: Scope = "security" if endpoint == "validate-security" else "all"
            verdict = decide_validation(self.plans, request, scope)
        gap = None
        if verdict.result == "namespace-unknown":
            gap = self._namespace_gap(request.namespace or "")
        return rv.Judged(endpoint, review, verdict, patch, cached, gap)

    def _request(self, review: rv.Review) -> PodRequest:
        obj = review.object
        namespace = review.namespace
        if not namespace and obj is not None:
            metadata = obj.get("metadata")
            namespace = str(metadata.get("namespace") or "") if isinstance(metadata, dict) else ""
        return PodRequest(
            pod=obj,
            namespace=namespace,
            namespace_labels=self.namespaces.labels(namespace),
            user_info=review.user_info,
            operation=review.operation,
            old_pod=review.old_object,
            devices=self.devices.catalog(),
            kind=review.kind,
        )

    def _namespace_gap(self, namespace: str) -> rv.NamespaceGap:
        if not self.namespaces.synced:
            return rv.NamespaceGap(
                "namespace-cache-not-synced", "the namespace cache has not synced yet"
            )
        text = f'namespace "{namespace}" is not in the namespace cache yet'
        return rv.NamespaceGap("namespace-unknown", text)

    def _decision(
        self, request: PodRequest, *, keyed: bool
    ) -> tuple[Verdict, Kept | None, bool | None]:
        """`decide_mutation`, or its verdict for an earlier pod of the same template
        (webhook/decision_cache.py; not `keyed`, decided without the cache: a large review);
        as the cache keeps it (its patch encoded) when it is kept; and whether the cache
        held it (None: not asked)."""
        assert self._decided is not None
        plans, cache = self._decided
        # The request holds the catalogue as `_request` found it: none (not synced) is its own
        # key, whatever the store says by now.
        devices = UNSYNCED if request.devices is None else self.devices.generation()
        key = (
            template_key(request, devices, plans.mutation.read_label_keys)
            if cache.entries and keyed
            else None
        )
        if key is None:
            return decide_mutation(plans, request), None, None
        kept = cache.get(key)
        if kept is not None:
            return kept.verdict, kept, True
        verdict = decide_mutation(plans, request)
        if not reusable(verdict):
            return verdict, None, False
        kept = keep(verdict)
        cache.put(key, kept)
        return verdict, kept, False

    # -- health ------------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        status = self.policy.status()
        ns = self.namespaces.status()
        cert = dict(self.cert_status()) if self.cert_status is not None else {"loaded": True}
        ready = self._decided is not None and ns.synced and bool(cert.get("loaded"))
        return ready, {
            "ready": ready,
            "policy": {
                "version": status.version,
                "reloadErrors": status.reload_errors,
                "lastError": status.last_error,
            },
            "namespaces": ns.as_json(),
            # Not part of readiness: until it syncs, claim pods are steered as unknown (sound).
            "devices": self.devices.status().as_json(),
            "certificate": cert,
        }

    def publish_status(self) -> None:
        """Copy slow-moving state into gauges, and the counts kept in memory into their
        counters (called by a timer, not per request)."""
        self.metrics.flush()
        ns = self.namespaces.status()
        if ns.current_at is not None:
            self.metrics.namespace_current_at.set(ns.current_at)
        self.metrics.namespaces.set(ns.namespaces)
        self.metrics.device_catalog_synced.set(1 if self.devices.status().synced else 0)
        if ns.relists > self._relists_published:
            self.metrics.namespace_relists.inc(ns.relists - self._relists_published)
            self._relists_published = ns.relists


def start_status_pump(
    handler: AdmissionHandler, interval: float = 1.0, *, status_dir: str | None = None
) -> Periodic:
    """Publish `handler`'s status gauges and deferred counts (webhook.metrics) every `interval`
    seconds, and its readiness detail to `status_dir` for the metrics listener's /status
    (`webhook.status`); `stop()` ends it. A metrics hiccup is logged and the next round goes
    on."""
    from webhook.status import write_worker_status

    def publish() -> None:
        handler.publish_status()
        if status_dir is not None:
            ready, detail = handler.readiness()
            write_worker_status(status_dir, {**detail, "ready": ready})

    return Periodic("webhook-status", interval, publish).start()

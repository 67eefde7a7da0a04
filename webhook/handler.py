"""The admission request handler: AdmissionReview bytes in, (status, body, result) out.

What a pod gets is decided in the core (steer/core/decision.py: `decide_mutation`,
`decide_validation`), the same function `/explain` asks; this module decodes the review, reads
what the decision needs from memory and turns the verdict into bytes, metrics and logs. Everything
a request reads is in memory: the plans built when the policy changed, the namespace map kept by
the watch, and the DRA catalogue its watches keep (webhook/devices.py).

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
from dataclasses import dataclass
from typing import Any, Literal, Protocol

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

log = logging.getLogger(__name__)

Endpoint = Literal["mutate", "validate", "validate-security"]


class PolicySource(Protocol):
    """The hot-reload helpers' surface (`steer.adapters.policy_file.PolicyWatcher`,
    `steer.adapters.policy_resource.PolicyResourceWatcher`)."""

    @property
    def current(self) -> Policy: ...

    def subscribe(self, listener: Callable[[Policy], None], *, call_now: bool = True) -> None: ...

    def on_reload_error(self, listener: Callable[[str], None]) -> None: ...

    def status(self) -> Any: ...


@dataclass(frozen=True)
class Outcome:
    status: int
    body: bytes
    result: str


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

    def handle(self, endpoint: Endpoint, body: bytes | None) -> Outcome:
        started = time.perf_counter()
        dry_run = False
        uid = ""
        try:
            if body is None:
                raise rv.BadReview(
                    "body-too-large", f"request body is over the {self.max_body_bytes}-byte limit"
                )
            review = rv.parse_review(body, max_bytes=self.max_body_bytes)
            dry_run, uid = review.dry_run, review.uid
            if endpoint == "mutate":
                outcome = self._mutate(review, keyed=len(body) <= LARGEST_KEYED_REVIEW)
            else:
                outcome = self._validate(
                    review, "security" if endpoint == "validate-security" else "all"
                )
        except rv.BadReview as exc:
            self.metrics.bad_requests.labels(reason=exc.reason).inc()
            status = 413 if exc.reason == "body-too-large" else 400
            outcome = Outcome(status, exc.body(), "bad_request")
        except Exception:
            log.exception("%s %s: unexpected failure", endpoint, uid)
            self.metrics.uninterpretable_review(endpoint, "internal-error")
            if endpoint == "mutate" and uid:
                # Steering is optional: an unsteered pod beats a failed admission.
                warning = "kube-steer: internal error, pod not steered (see the webhook log)"
                outcome = Outcome(200, rv.allow(uid, warnings=[warning]), "error")
            else:
                # Validation in doubt: a JSON 500 lets the failurePolicy decide.
                body_ = rv.error_body(
                    "internal-error", "the webhook failed on this request; see its log"
                )
                outcome = Outcome(500, body_, "error")
        self.metrics.observe(endpoint, outcome.result, time.perf_counter() - started)
        if dry_run:
            self.metrics.dry_run(endpoint, outcome.result)
        return outcome

    def _uninterpretable(
        self, endpoint: Endpoint, review: rv.Review, reason: str, warning: str
    ) -> Outcome:
        self.metrics.uninterpretable_review(endpoint, reason)
        log.warning("%s %s: %s", endpoint, review.uid, warning)
        return Outcome(
            200, rv.allow(review.uid, warnings=[f"kube-steer: {warning}"]), "uninterpretable"
        )

    def _namespace(self, review: rv.Review, obj: Mapping[str, Any]) -> str:
        if review.namespace:
            return review.namespace
        metadata = obj.get("metadata")
        return str(metadata.get("namespace") or "") if isinstance(metadata, dict) else ""

    def _unknown_namespace(self, namespace: str) -> tuple[str, str]:
        if not self.namespaces.synced:
            return "namespace-cache-not-synced", "the namespace cache has not synced yet"
        return "namespace-unknown", f'namespace "{namespace}" is not in the namespace cache yet'

    # -- mutation --------------------------------------------------------------------------

    def _request(self, review: rv.Review, obj: Mapping[str, Any]) -> PodRequest:
        namespace = self._namespace(review, obj)
        return PodRequest(
            pod=obj,
            namespace=namespace,
            namespace_labels=self.namespaces.labels(namespace),
            user_info=review.user_info,
            operation=review.operation,
            old_pod=review.old_object,
            devices=self.devices.catalog(),
        )

    def _mutate(self, review: rv.Review, *, keyed: bool = True) -> Outcome:
        if review.operation != "CREATE":
            return Outcome(200, rv.allow(review.uid), "skipped")
        obj = review.object
        if review.kind != "Pod" or obj is None:
            return self._uninterpretable(
                "mutate",
                review,
                "kind",
                f"expected a Pod object, got kind {review.kind!r}; not steered",
            )
        request = self._request(review, obj)
        verdict, kept = self._decision(request, keyed=keyed)
        if verdict.result == "namespace-unknown":
            reason, text = self._unknown_namespace(request.namespace or "")
            return self._uninterpretable("mutate", review, reason, f"{text}; pod not steered")
        if verdict.unreadable is not None:
            return self._unjudged("mutate", review, verdict)
        mutation = verdict.mutation
        if verdict.result == "skipped" or mutation is None:
            return Outcome(200, rv.allow(review.uid), "skipped")
        if not review.dry_run:
            if mutation.added:
                self.metrics.mutated(*mutation.added)
            if mutation.would_add:
                self.metrics.audited("mutate", *mutation.would_add)
            if verdict.warnings:
                self.metrics.device_doubts.inc()
        patch = kept.patch if kept is not None else mutation.patch_bytes()
        body = rv.allow(review.uid, patch=patch, warnings=list(verdict.warnings))
        return Outcome(200, body, verdict.result)

    def _decide_mutation(self, request: PodRequest, *, keyed: bool = True) -> Verdict:
        """`decide_mutation`, or its verdict for an earlier pod of the same template
        (webhook/decision_cache.py); not `keyed`, decided without the cache (a large review)."""
        return self._decision(request, keyed=keyed)[0]

    def _decision(self, request: PodRequest, *, keyed: bool) -> tuple[Verdict, Kept | None]:
        """The verdict, and as the cache keeps it (its patch serialised) when it is kept."""
        assert self._decided is not None
        plans, cache = self._decided
        # The request holds the catalogue as `_request` found it: none (not synced) is its own
        # key, whatever the store says by now.
        devices = UNSYNCED if request.devices is None else self.devices.generation()
        key = template_key(request, devices) if cache.entries and keyed else None
        if key is None:
            return decide_mutation(plans, request), None
        kept = cache.get(key)
        self.metrics.decision_cache(kept is not None)
        if kept is not None:
            return kept.verdict, kept
        verdict = decide_mutation(plans, request)
        if not reusable(verdict):
            return verdict, None
        kept = keep(verdict)
        cache.put(key, kept)
        return verdict, kept

    def _unjudged(self, endpoint: Endpoint, review: rv.Review, verdict: Verdict) -> Outcome:
        """A pod allowed unjudged: a field the decision could not read, named in a warning."""
        assert verdict.unreadable is not None
        self.metrics.uninterpretable_review(endpoint, verdict.unreadable.field)
        log.warning("%s %s: %s", endpoint, review.uid, verdict.unreadable.log)
        body = rv.allow(review.uid, warnings=list(verdict.warnings))
        return Outcome(200, body, "uninterpretable")

    # -- validation ------------------------------------------------------------------------

    def _validate(self, review: rv.Review, scope: Scope) -> Outcome:
        endpoint: Endpoint = "validate-security" if scope == "security" else "validate"
        if review.operation not in ("CREATE", "UPDATE"):
            return Outcome(200, rv.allow(review.uid), "skipped")
        obj = review.object
        if review.kind != "Pod" or obj is None:
            return self._uninterpretable(
                endpoint,
                review,
                "kind",
                f"expected a Pod object, got kind {review.kind!r}; not validated",
            )
        request = self._request(review, obj)
        verdict = decide_validation(self.plans, request, scope)
        if verdict.result == "namespace-unknown":
            # Without the tenant no rule can be judged; let the failurePolicy decide (Fail for
            # the security configuration) instead of guessing.
            reason, text = self._unknown_namespace(request.namespace or "")
            self.metrics.uninterpretable_review(endpoint, reason)
            return Outcome(503, rv.error_body(reason, f"{text}; retry shortly"), "unavailable")
        if verdict.result == "uninterpretable":
            return self._unjudged(endpoint, review, verdict)
        if verdict.unreadable is not None:
            self.metrics.uninterpretable_review(endpoint, verdict.unreadable.field)
            log.warning("%s %s: %s", endpoint, review.uid, verdict.unreadable.log)
        if not review.dry_run:
            if verdict.audited:
                self.metrics.audited("deny", *(d.rule for d in verdict.audited))
            if verdict.denials:
                self.metrics.denied(*(d.rule for d in verdict.denials))
        warnings = list(verdict.warnings)
        if verdict.message is None:
            return Outcome(200, rv.allow(review.uid, warnings=warnings), verdict.result)
        return Outcome(200, rv.deny(review.uid, verdict.message, warnings=warnings), verdict.result)

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

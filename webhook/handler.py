"""The admission request handler: AdmissionReview bytes in, (status, body, result) out.

`AdmissionHandler` never raises, so the HTTP surface (webhook/app.py) stays thin and every
failure mode maps to an answer: 400 with a JSON error for a body that is not an AdmissionReview
(413 for one over the size limit), an allowing review with a warning for a pod the webhook
cannot interpret, except on validation of a tenant's pod, which is denied naming the field (no
rule is skipped for an unusual value), 503 (the apiserver then applies the failurePolicy) when
validation cannot know the namespace's tenant yet. Everything a request reads is in memory: the
plans built when the policy changed (steer/core/mutation.py, steer/core/admission.py), the
namespace map kept by the watch, and the DRA catalogue its watches keep (webhook/devices.py).
A pod whose claim the catalogue does not know yet is steered without any gate that could keep
it off the nodes it may need, with a warning saying so. In audit mode (steer/core/mode.py) it
records and warns instead of steering and denying.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from steer.adapters.periodic import Periodic
from steer.core.admission import (
    MAX_DENIALS_SHOWN,
    Denial,
    Scope,
    ValidationPlan,
    denial_message,
    introduced_denials,
    uninterpretable_denial,
    validate_pod,
)
from steer.core.infrastructure import exempt_reason
from steer.core.mode import audits
from steer.core.mutation import MutationPlan, UnknownNamespace, steer_pod
from steer.core.policy import Policy, Tenant
from steer.core.scheduling import UninterpretablePod
from webhook import review as rv
from webhook.devices import DeviceSource, NoDevices
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
class Plans:
    mutation: MutationPlan
    validation: ValidationPlan


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
    ) -> None:
        self.namespaces = namespaces
        self.devices: DeviceSource = devices if devices is not None else NoDevices()
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.cert_status = cert_status
        self.policy = policy
        self._plans: Plans | None = None
        self._relists_published = 0
        policy.subscribe(self._on_policy)
        policy.on_reload_error(lambda _message: metrics.policy_reload_errors.inc())

    def _on_policy(self, policy: Policy) -> None:
        # Built off the request path, then published with one reference assignment.
        self._plans = Plans(MutationPlan.from_policy(policy), ValidationPlan.from_policy(policy))
        self.metrics.set_policy(policy.version)
        log.info("webhook plans built for policy %s", policy.version)

    @property
    def plans(self) -> Plans:
        assert self._plans is not None  # subscribe(call_now=True) built them in __init__
        return self._plans

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
                outcome = self._mutate(review)
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

    def _mutate(self, review: rv.Review) -> Outcome:
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
        namespace = self._namespace(review, obj)
        devices = self.devices.catalog()
        try:
            mutation = steer_pod(
                self.plans.mutation,
                obj,
                namespace,
                functools.partial(self.namespaces.labels, namespace),
                review.user_info,
                devices=devices,
            )
        except UnknownNamespace:
            reason, text = self._unknown_namespace(namespace)
            return self._uninterpretable("mutate", review, reason, f"{text}; pod not steered")
        except UninterpretablePod as exc:
            return self._uninterpretable("mutate", review, exc.field, f"pod not steered: {exc}")
        if mutation.skipped is not None:
            return Outcome(200, rv.allow(review.uid), "skipped")
        patch = mutation.patch_bytes()
        warnings = self._device_warnings(mutation.notes, synced=devices is not None)
        if not review.dry_run:
            if mutation.added:
                self.metrics.mutated(*mutation.added)
            if mutation.would_add:
                self.metrics.audited("mutate", *mutation.would_add)
            if warnings:
                self.metrics.device_doubts.inc()
        result = "audited" if mutation.audit else "mutated" if patch else "unchanged"
        return Outcome(200, rv.allow(review.uid, patch=patch, warnings=warnings), result)

    def _device_warnings(self, notes: tuple[str, ...], *, synced: bool) -> list[str]:
        """What the pod was classified without (a claim not known yet), one warning each."""
        if not notes:
            return []
        why = "" if synced else " (the DRA catalogue has not synced yet)"
        return [
            f"kube-steer: {note}{why}; steered so that no gate keeps it off nodes it may need"
            for note in notes
        ]

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
        plan = self.plans.validation
        namespace = self._namespace(review, obj)
        if namespace in plan.excluded_namespaces:
            return Outcome(200, rv.allow(review.uid), "skipped")
        if exempt_reason(plan.policy, obj, review.user_info) is not None:
            return Outcome(200, rv.allow(review.uid), "skipped")
        labels = self.namespaces.labels(namespace)
        if labels is None:
            # Without the tenant no rule can be judged; let the failurePolicy decide (Fail for
            # the security configuration) instead of guessing.
            reason, text = self._unknown_namespace(namespace)
            self.metrics.uninterpretable_review(endpoint, reason)
            return Outcome(503, rv.error_body(reason, f"{text}; retry shortly"), "unavailable")
        tenant = self.plans.mutation.tenant(labels)
        old = review.old_object if review.operation == "UPDATE" else None
        if review.operation == "CREATE" and audits(plan.policy, tenant):
            # Audit mode: judge the pod enforce mode would have made, so a warning names only
            # what enforcing would deny (a routed schedulerName is no violation).
            obj = self._as_enforced(obj, namespace, labels, review.user_info)
        try:
            denials = validate_pod(plan, obj, tenant, namespace, scope=scope)
        except UninterpretablePod as exc:
            # A tenant's rules are never skipped for a field they cannot read. Outside every
            # tenant, and for a field the stored pod already had unreadable (an UPDATE of a pod
            # admitted before), the pod passes with a warning.
            if tenant is None or (
                old is not None
                and _unreadable_field(plan, old, tenant, namespace, scope) == exc.field
            ):
                return self._uninterpretable(
                    endpoint, review, exc.field, f"pod not validated: {exc}"
                )
            self.metrics.uninterpretable_review(endpoint, exc.field)
            log.warning("%s %s: pod denied, not validated: %s", endpoint, review.uid, exc)
            return self._deny(
                review,
                [uninterpretable_denial(exc, tenant, namespace)],
                "denied-uninterpretable",
                tenant,
            )
        if denials and old is not None:
            try:
                denials = introduced_denials(
                    denials, validate_pod(plan, old, tenant, namespace, scope=scope)
                )
            except UninterpretablePod as exc:
                # A stored pod validation cannot read shows nothing it already had: for a
                # tenant's pod every denial stands.
                if tenant is None:
                    return self._uninterpretable(
                        endpoint, review, exc.field, f"pod not validated: oldObject {exc}"
                    )
        if not denials:
            return Outcome(200, rv.allow(review.uid), "allowed")
        return self._deny(review, denials, "denied", tenant)

    def _as_enforced(
        self,
        pod: Mapping[str, Any],
        namespace: str,
        labels: Mapping[str, str],
        user_info: Mapping[str, Any] | None,
    ) -> Mapping[str, Any]:
        """`pod` as the mutation would leave it in enforce mode (as it is where it cannot)."""
        try:
            mutation = steer_pod(
                self.plans.mutation,
                pod,
                namespace,
                lambda: labels,
                user_info,
                mode="enforce",
                devices=self.devices.catalog(),
            )
        except UninterpretablePod:
            return pod  # validation names the field
        return mutation.apply(pod)

    def _deny(
        self, review: rv.Review, denials: list[Denial], result: str, tenant: Tenant | None
    ) -> Outcome:
        """Deny; in audit mode (steer/core/mode.py) allow, and say in a warning what would be
        denied, unless a security taint rule denies: those hold in every mode."""
        warnings: list[str] = []
        if audits(self.plans.validation.policy, tenant):
            audited = [d for d in denials if not d.security]
            if not review.dry_run and audited:
                self.metrics.audited("deny", *(d.rule for d in audited))
            warnings += audit_warnings(audited)
            denials = [d for d in denials if d.security]  # security rules hold in every mode
            if not denials:
                return Outcome(200, rv.allow(review.uid, warnings=warnings), "audited")
        if not review.dry_run and denials:
            self.metrics.denied(*(d.rule for d in denials))
        return Outcome(200, rv.deny(review.uid, denial_message(denials), warnings=warnings), result)

    # -- health ------------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        status = self.policy.status()
        ns = self.namespaces.status()
        cert = dict(self.cert_status()) if self.cert_status is not None else {"loaded": True}
        ready = self._plans is not None and ns.synced and bool(cert.get("loaded"))
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


def _unreadable_field(
    plan: ValidationPlan, pod: Mapping[str, Any], tenant: Tenant, namespace: str, scope: Scope
) -> str | None:
    """The field validation cannot read in `pod` (an UPDATE's stored pod), or None."""
    try:
        validate_pod(plan, pod, tenant, namespace, scope=scope)
    except UninterpretablePod as exc:
        return exc.field
    return None


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


def audit_warnings(denials: list[Denial]) -> list[str]:
    """What audit mode would deny, a warning a rule (kubectl prints each; the apiserver keeps
    256 characters of each): at most MAX_DENIALS_SHOWN, then how many more."""
    shown = [f"kube-steer audit: would deny: {d.message}" for d in denials[:MAX_DENIALS_SHOWN]]
    more = len(denials) - MAX_DENIALS_SHOWN
    return shown + ([f"kube-steer audit: would deny {more} more"] if more > 0 else [])

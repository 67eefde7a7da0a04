"""The controller's own Prometheus metrics, in a registry per controller (tests run several).

Only what its two jobs did (the admission policies it applies, the webhook certificate it
renews): no pod, node or tenant data, so nothing here is worth more than the product's health.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from steer.adapters.build_info import BuildInfoCollector


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        r.register(BuildInfoCollector("steer_controller"))
        self.leader = Gauge(
            "steer_controller_leader",
            "1 on the replica that holds the controller's Lease (the one that writes), else 0.",
            registry=r,
        )
        # With --webhook-certs=renew (controller/certs_renewal.py), labelled with the serving
        # Secret (NAMESPACE/NAME): set by the leader only, gone on the other replicas, so a
        # max() over replicas is the leader's.
        self.webhook_cert_not_after = Gauge(
            "steer_controller_webhook_cert_not_after_timestamp_seconds",
            "notAfter of the webhook's serving certificate in its Secret (certificate=serving) "
            "and of the CA that signs it (certificate=ca), as the leader's last check read them.",
            ["secret", "certificate"],
            registry=r,
        )
        self.webhook_cert_checks = Counter(
            "steer_controller_webhook_cert_checks_total",
            "Checks of the webhook's certificate by the leader, by result (ok, error); an error "
            "is logged with what failed, and the next check starts again from the cluster.",
            ["result"],
            registry=r,
        )
        self.webhook_cert_writes = Counter(
            "steer_controller_webhook_cert_writes_total",
            "Writes of the in-cluster certificate renewal, by object: serving (the certificate "
            "issued into its Secret), ca (a new CA), bundle (the webhooks' caBundle).",
            ["object"],
            registry=r,
        )
        self.webhook_ca_bundle_cas = Gauge(
            "steer_controller_webhook_ca_bundle_cas",
            "CAs every webhook's caBundle holds after the leader's last check: 1, or 2 while a "
            "new CA overlaps the old one (docs/webhook.md, Certificates).",
            ["secret"],
            registry=r,
        )
        self.webhook_cert_last_check = Gauge(
            "steer_controller_webhook_cert_last_check_timestamp_seconds",
            "Unix time of the leader's last check of the webhook's certificate that completed.",
            ["secret"],
            registry=r,
        )
        # With --admission-policies (controller/admission_sync.py): set by the leader only, gone
        # on the other replicas, so a max() over replicas is the leader's.
        self.admission_version = Gauge(
            "steer_controller_admission_policies_version_info",
            "The policy version the admission policies on the apiserver were compiled from, as "
            "the leader last read or applied them (version empty: missing or mixed; value 1).",
            ["version"],
            registry=r,
        )
        self.admission_current = Gauge(
            "steer_controller_admission_policies_current",
            "1 when every admission policy on the apiserver is the one compiled from the running "
            "policy, 0 while one is missing, outdated or refused (scope: validating or all).",
            ["scope"],
            registry=r,
        )
        self.admission_refused = Gauge(
            "steer_controller_admission_policies_refused",
            "1 while the apiserver refuses the admission policies of the running policy version "
            "(the previous version's keep serving; the log says why).",
            ["scope"],
            registry=r,
        )
        self.admission_applied = Gauge(
            "steer_controller_admission_policies_applied_timestamp_seconds",
            "Unix time the leader last found or made every admission policy current.",
            ["scope"],
            registry=r,
        )
        self.admission_apply_failures = Counter(
            "steer_controller_admission_policies_apply_failures_total",
            "Failed applies (dry run included) and deletes of an admission object, by object "
            "(KIND/NAME): refused by the apiserver, forbidden or unreachable.",
            ["object"],
            registry=r,
        )

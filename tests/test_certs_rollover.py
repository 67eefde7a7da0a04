"""What the in-cluster renewal does next (certs/rollover.py), decided from what the cluster holds:
the same CA renews without a caBundle write; a new CA enters every caBundle before the serving
certificate moves to it, waits `settle`, and the old CA leaves only once every endpoint serves
the new one's certificate; a broken certificate is issued at once; an expired CA goes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509

from certs.pki import CertificateAuthority, WebhookIdentity, issue_serving_cert, new_ca
from certs.renewal import ServingPems, verified_by
from certs.rollover import (
    CA_RENEW_BEFORE,
    TrustFacts,
    TrustPlan,
    ca_renewal_reason,
    parse_bundle,
    plan_trust,
)

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SERVICE = WebhookIdentity("steer-webhook", "kube-steer")
RENEW_BEFORE = timedelta(days=30)
SETTLE = timedelta(minutes=1)
OLD, NEW = new_ca(now=NOW - timedelta(days=100)), new_ca(now=NOW)


def held(ca: CertificateAuthority, days: int = 90, issued: datetime = NOW) -> ServingPems:
    certs = issue_serving_cert(ca, SERVICE, days=days, now=issued)
    return ServingPems(certs.cert_pem, certs.key_pem, certs.ca_cert_pem)


def plan(
    signer: CertificateAuthority,
    bundles: list[list[CertificateAuthority]],
    serving: ServingPems | None,
    since: datetime | None = None,
    served: bool | None = None,
    now: datetime = NOW,
) -> TrustPlan:
    facts = TrustFacts(
        signer,
        tuple(tuple(ca.certificate for ca in bundle) for bundle in bundles),
        serving,
        since,
        served,
    )
    return plan_trust(facts, SERVICE, now=now, renew_before=RENEW_BEFORE, settle=SETTLE)


def names(plan: TrustPlan) -> list[str]:
    by = {OLD.certificate: "old", NEW.certificate: "new"}
    return [by.get(ca, "other") for ca in plan.bundle]


def test_a_kept_certificate_under_a_trusted_ca_changes_nothing() -> None:
    step = plan(NEW, [[NEW], [NEW]], held(NEW), since=NOW - SETTLE)
    assert (names(step), step.issue, step.waiting, step.record_trusted_since) == (
        ["new"],
        (),
        None,
        False,
    )


def test_the_same_ca_renews_without_touching_the_bundle() -> None:
    step = plan(NEW, [[NEW]], held(NEW, days=10), since=NOW - timedelta(days=200))
    assert names(step) == ["new"] and step.waiting is None
    (reason,) = step.issue
    assert reason.startswith("tls.crt expires on 2026-06-11")


def test_a_new_ca_enters_every_bundle_before_the_certificate_moves() -> None:
    serving = held(OLD, issued=NOW - timedelta(days=70))  # due, and the old CA still works
    first = plan(NEW, [[OLD], [OLD]], serving)
    assert names(first) == ["old", "new"] and first.retiring == (OLD.certificate,)
    assert first.issue == () and first.record_trusted_since
    assert first.waiting is not None and "the new CA goes into caBundle first" in first.waiting

    # In every bundle, but for less than `settle`: still waiting.
    early = plan(NEW, [[OLD, NEW], [OLD, NEW]], serving, since=NOW - SETTLE / 2)
    assert early.issue == () and names(early) == ["old", "new"]
    assert early.waiting is not None and "moves to the new CA at 00:00:30 UTC" in early.waiting

    # Settled: issued under the new CA, the old one stays (the pods still serve its).
    moved = plan(NEW, [[OLD, NEW], [OLD, NEW]], serving, since=NOW - SETTLE)
    assert moved.issue and names(moved) == ["old", "new"] and not moved.ask_served
    assert any("not signed by the CA" in reason for reason in moved.issue)


def test_the_old_ca_leaves_only_once_every_endpoint_serves_the_new() -> None:
    serving = held(NEW)
    unknown = plan(NEW, [[OLD, NEW]], serving, since=NOW - SETTLE)
    assert unknown.ask_served and names(unknown) == ["old", "new"] and unknown.issue == ()
    not_yet = plan(NEW, [[OLD, NEW]], serving, since=NOW - SETTLE, served=False)
    assert not not_yet.ask_served and names(not_yet) == ["old", "new"]
    done = plan(NEW, [[OLD, NEW]], serving, since=NOW - SETTLE, served=True)
    assert names(done) == ["new"] and done.retiring == ()


def test_a_certificate_that_works_nowhere_is_issued_at_once_with_the_bundle() -> None:
    for serving in (None, held(NEW, days=1, issued=NOW - timedelta(days=3))):
        step = plan(NEW, [[], []], serving)
        assert names(step) == ["new"] and step.issue and step.waiting is None
    # Signed by a CA no bundle holds: nothing works now, so nothing is worth waiting for.
    step = plan(NEW, [[OLD]], held(new_ca(now=NOW)))
    assert names(step) == ["old", "new"] and step.issue


def test_an_expired_ca_leaves_the_bundle_at_once() -> None:
    expired = new_ca(days=1, now=NOW - timedelta(days=5))
    step = plan(NEW, [[expired, NEW]], held(NEW), since=NOW - SETTLE)
    assert names(step) == ["new"] and not step.ask_served


def test_a_trusted_since_is_recorded_once_and_reset_when_the_bundle_lost_the_ca() -> None:
    assert plan(NEW, [[NEW]], held(NEW)).record_trusted_since
    assert not plan(NEW, [[NEW]], held(NEW), since=NOW).record_trusted_since
    # `steer certs rotate` (or an edit) put another CA alone in one bundle: back to step 1.
    again = plan(NEW, [[NEW], [OLD]], held(NEW), since=NOW - timedelta(days=9))
    assert again.record_trusted_since and names(again) == ["old", "new"] and again.issue == ()


def test_every_plan_keeps_the_served_certificate_trusted() -> None:
    """Whatever the step, the certificate the pods serve before it (the Secret's) verifies
    under the bundle it writes, unless that certificate worked nowhere before."""
    serving = held(OLD, issued=NOW - timedelta(days=70))
    states = [
        ([[OLD]], None),
        ([[OLD, NEW]], NOW - SETTLE / 2),
        ([[OLD, NEW]], NOW - SETTLE),
        ([[NEW, OLD], [OLD]], NOW),
    ]
    for bundles, since in states:
        step = plan(NEW, bundles, serving, since=since)
        assert verified_by(serving, step.bundle, SERVICE, now=NOW), (bundles, since)


def test_the_ca_is_replaced_a_year_before_it_ends() -> None:
    ten_years = new_ca(now=NOW).certificate
    assert ca_renewal_reason(ten_years, NOW) is None
    ending = ten_years.not_valid_after_utc - CA_RENEW_BEFORE
    assert ca_renewal_reason(ten_years, ending - timedelta(seconds=1)) is None
    reason = ca_renewal_reason(ten_years, ending)
    assert reason is not None and "within 365 days" in reason


def test_bundles_parse_several_cas_and_nothing_from_junk() -> None:
    pem = OLD.cert_pem + NEW.cert_pem
    assert parse_bundle(pem) == (OLD.certificate, NEW.certificate)
    assert parse_bundle(b"") == () and parse_bundle(b"junk") == ()
    step = plan(NEW, [[OLD, NEW]], held(NEW), since=NOW - SETTLE, served=False)
    assert [x509.load_pem_x509_certificate(p) for p in _split(step.bundle_pem)] == [
        OLD.certificate,
        NEW.certificate,
    ]


def _split(pem: bytes) -> list[bytes]:
    end = b"-----END CERTIFICATE-----\n"
    return [part + end for part in pem.split(end) if part.strip()]

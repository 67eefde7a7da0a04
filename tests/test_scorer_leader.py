"""Lease leader election against the API stand-in: one holder, takeover after expiry, races."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from kits.apistub import ApiStub
from scorer.kubeapi import KubeJson
from scorer.leader import DEFAULT_LEASE_NAME, LeaseElector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(kube: KubeJson, identity: str, clock: Clock | None = None) -> LeaseElector:
    return LeaseElector(
        kube,
        namespace="default",
        identity=identity,
        lease_duration_s=15,
        renew_deadline_s=10,
        retry_period_s=2,
        clock=clock or Clock(),
    )


def test_only_one_candidate_holds_the_lease(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    kube = KubeJson(kube_client)
    a, b = elector(kube, "a"), elector(kube, "b")
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert a.try_acquire_or_renew() is True  # renew
    assert b.try_acquire_or_renew() is False
    assert (a.is_leader, b.is_leader) == (True, False)
    lease = apistub.get("leases", DEFAULT_LEASE_NAME, "default")
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert lease["spec"]["renewTime"].endswith("Z") and len(lease["spec"]["renewTime"]) == 27
    assert b.holder == "a"


def test_a_silent_leader_is_replaced_after_the_lease_duration(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    kube = KubeJson(kube_client)
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(kube, "a", clock_a), elector(kube, "b", clock_b)
    changes: list[bool] = []
    a.on_change(changes.append)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b notes the record at its own time 1000
    clock_a.now += 10  # a stops renewing: past its renew deadline it no longer calls itself leader
    assert not a.is_leader
    clock_b.now += 14
    assert not b.try_acquire_or_renew()  # 14 s < 15 s lease on b's clock
    clock_b.now += 2
    assert b.try_acquire_or_renew()
    lease = apistub.get("leases", DEFAULT_LEASE_NAME, "default")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # a comes back: b holds a fresh lease
    assert changes == [True, False]


def test_released_lease_is_taken_at_once(apistub: ApiStub, kube_client: client.ApiClient) -> None:
    kube = KubeJson(kube_client)
    a, b = elector(kube, "a"), elector(kube, "b")
    assert a.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    assert b.try_acquire_or_renew()


class Interleaving(KubeJson):
    """Runs `after_get` right after this client's next GET: a competitor acts in between."""

    after_get: Callable[[], Any] | None = None

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        result = super().request(method, path, **kwargs)
        if method == "GET" and self.after_get is not None:
            hook, self.after_get = self.after_get, None
            hook()
        return result


def test_of_two_racing_takeovers_the_stale_one_gets_a_409(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    kube = KubeJson(kube_client)
    racer = Interleaving(kube_client)
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(kube, "a", clock_a), elector(racer, "b", clock_b)
    old = elector(kube, "old")
    assert old.try_acquire_or_renew()
    # both candidates saw the record long ago: it has expired for both
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock_a.now += 20
    clock_b.now += 20
    racer.after_get = a.try_acquire_or_renew  # a takes over between b's read and b's write
    assert b.try_acquire_or_renew() is False
    assert a.is_leader and not b.is_leader
    assert apistub.get("leases", DEFAULT_LEASE_NAME, "default")["spec"]["holderIdentity"] == "a"
    assert [r.status for r in apistub.requests if r.method == "PUT"][-2:] == [200, 409]

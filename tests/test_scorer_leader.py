"""Lease leader election against the API stand-in: one holder, takeover after expiry, races."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from kits.apistub import ApiStub
from steer.adapters.kubejson import KubeJson
from steer.adapters.lease import DEFAULT_LEASE_NAME, LeaseElector


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


class FrozenInFlight(KubeJson):
    """The Lease's PUT answered only after the process was frozen for `frozen_s` (its clock
    moves on meanwhile, as CLOCK_MONOTONIC does under SIGSTOP)."""

    def __init__(self, api: client.ApiClient, clock: Clock, frozen_s: float) -> None:
        super().__init__(api)
        self.clock, self.frozen_s = clock, frozen_s

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = super().request(method, path, **kwargs)
        if method == "PUT" and "/leases/" in path:
            self.clock.now += self.frozen_s
        return answer


def test_a_term_counts_from_when_its_round_began_not_from_a_late_answer(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    """A replica frozen with a renewal in flight hears it succeeded only once thawed: its term
    ran from before the freeze, so it is over (tests/faults/test_leader_failover.py)."""
    clock = Clock()
    a = elector(KubeJson(kube_client), "a", clock)
    assert a.try_acquire_or_renew() and a.is_leader
    a.kube = FrozenInFlight(kube_client, clock, frozen_s=21)
    assert a.try_acquire_or_renew()  # the Lease took the renewal before the freeze
    assert not a.is_leader  # 21 s since the round began: past the 10 s renew deadline
    a.kube = FrozenInFlight(kube_client, clock, frozen_s=3)
    assert a.try_acquire_or_renew() and a.is_leader  # 3 s: within it

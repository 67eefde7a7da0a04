"""`steer controller run --admission-policies` (controller/admission_plan.py,
controller/admission_sync.py): what to apply given the live objects (policies only: bindings
and guards are the install's), and the job over HTTP against a small stand-in of the
apiserver's server-side apply: only the leader writes, an unchanged version writes nothing, a
refused version writes nothing and is not retried, failures are retried. And the scorer's old
flags of these jobs, refused naming the controller."""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client import CollectorRegistry

from controller.admission_plan import (
    FIELD_MANAGER,
    AdmissionRef,
    digest_key,
    live_version,
    plan_sync,
    wanted_objects,
)
from controller.admission_sync import (
    AdmissionPolicySync,
    AdmissionStatus,
    AdmissionSyncSettings,
    settings_from,
)
from controller.metrics import ControllerMetrics
from controller.policy_status import admission_status
from launcher.commands import build_parser
from scorer.cli import moved_flags_error
from steer.adapters.kubejson import KubeJson
from steer.adapters.policy_file import load_policy_file
from steer.core.policy import Policy
from tests.certs_support import object_server

ROOT = Path(__file__).resolve().parents[1]
STARTER = load_policy_file(str(ROOT / "manifests" / "policy" / "starter-policy.yaml"))
EXAMPLE = load_policy_file(str(ROOT / "steer" / "presets" / "policy.yaml"))
VALIDATING = {
    AdmissionRef("ValidatingAdmissionPolicy", name) for name in ("steer-security", "steer-budget")
}
MUTATING = AdmissionRef("MutatingAdmissionPolicy", "steer-mutation")


def applied(obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any]:
    """`obj` as the apiserver holds it after `manager` applied it."""
    live = copy.deepcopy(obj)
    live["metadata"]["managedFields"] = [{"manager": manager, "operation": "Apply"}]
    return live


# -- the decisions ------------------------------------------------------------------------------


def test_the_scopes_want_the_validating_policies_and_all_adds_the_mutation() -> None:
    """Policies only: their bindings (the scope) and the node-writes guard are the install's,
    on which the controller has no verb."""
    validating = wanted_objects(STARTER, "validating")
    assert {o.ref for o in validating} == VALIDATING
    every = wanted_objects(STARTER, "all")
    assert {o.ref for o in every} == VALIDATING | {MUTATING}
    for obj in every:
        annotations = obj.body["metadata"]["annotations"]
        assert annotations[digest_key(STARTER)] == obj.digest
        assert annotations[STARTER.label_key("policy-version")] == STARTER.version
        assert not obj.ref.kind.endswith("Binding")
        assert obj.ref.name != "steer-scorer-node-writes"


def test_missing_or_other_digests_are_applied_and_matching_ones_are_not() -> None:
    wanted = wanted_objects(STARTER, "validating")
    live: dict[AdmissionRef, dict[str, Any] | None] = {o.ref: applied(o.body) for o in wanted}
    plan = plan_sync(STARTER, wanted, live)
    assert not plan.writes and set(plan.unchanged) == VALIDATING
    assert live_version(STARTER, wanted, live) == STARTER.version

    missing = wanted[0].ref
    stale = wanted[1].ref
    older = wanted_objects(EXAMPLE, "validating")
    live[missing] = None
    live[stale] = applied(next(o.body for o in older if o.ref == stale))
    plan = plan_sync(STARTER, wanted, live)
    assert {o.ref for o in plan.apply} == {missing, stale}
    assert live_version(STARTER, wanted, live) is None  # one missing

    live[missing] = applied(wanted[0].body)
    # Mixed versions name none (the annotation keys agree: both policies' prefix is the default).
    assert live_version(STARTER, wanted, live) is None


def run_args(*flags: str) -> Any:
    return build_parser().parse_args(["controller", "run", "--policy", "p.yaml", *flags])


def test_off_by_default_and_the_flags() -> None:
    assert settings_from(run_args()) is None
    assert settings_from(run_args("--admission-policies=validating")) == AdmissionSyncSettings(
        "validating", 60.0
    )
    assert settings_from(
        run_args("--admission-policies=all", "--admission-policies-interval=5")
    ) == AdmissionSyncSettings("all", 5.0)
    with pytest.raises(ValueError, match="--admission-policies-interval: must be more than 0"):
        settings_from(run_args("--admission-policies=all", "--admission-policies-interval=0"))


# -- the job, over HTTP -------------------------------------------------------------------------


class ApplyServer:
    """Admission objects by path, with server-side apply as far as the job relies on it: a
    PATCH stores the body and records its manager; `refuse` names answer 422 Invalid;
    `dryRun=All` stores nothing."""

    def __init__(self) -> None:
        self.by_path: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str, bool]] = []  # (method, path, dry run)
        self.refuse: set[str] = set()
        self.down = False
        self.lock = threading.Lock()

    def handle(self, method: str, raw: str, body: Any) -> tuple[int, Any]:
        parts = urlsplit(raw)
        path, query = parts.path, parse_qs(parts.query)
        with self.lock:
            if self.down:
                return 503, {"reason": "ServiceUnavailable", "message": "down"}
            if method == "GET":
                if path in self.by_path:
                    return 200, copy.deepcopy(self.by_path[path])
                return 404, {"reason": "NotFound", "message": "not found"}
            dry = query.get("dryRun") == ["All"]
            self.writes.append((method, path, dry))
            if method == "DELETE":
                return (200, self.by_path.pop(path)) if path in self.by_path else (404, {})
            assert method == "PATCH" and query["fieldManager"] == [FIELD_MANAGER]
            if path.rsplit("/", 1)[1] in self.refuse:
                return 422, {"reason": "Invalid", "message": "compilation failed"}
            obj = copy.deepcopy(body)
            obj["metadata"]["managedFields"] = [{"manager": FIELD_MANAGER, "operation": "Apply"}]
            if not dry:
                self.by_path[path] = obj
            return 200, obj

    def real_writes(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path, dry in self.writes if not dry]


@contextlib.contextmanager
def serving(objects: ApplyServer) -> Iterator[KubeJson]:
    with object_server(objects) as api:
        yield KubeJson(api)


def value(metrics: ControllerMetrics, name: str, **labels: str) -> float | None:
    registry: CollectorRegistry = metrics.registry
    return registry.get_sample_value(name, labels)


@pytest.fixture
def apiserver() -> Iterator[tuple[ApplyServer, KubeJson]]:
    objects = ApplyServer()
    with serving(objects) as kube:
        yield objects, kube


def make_job(
    kube: KubeJson,
    policy: list[Policy],
    scope: str = "validating",
    leading: list[bool] | None = None,
) -> AdmissionPolicySync:
    lead = leading if leading is not None else [True]
    return AdmissionPolicySync(
        kube,
        lambda: policy[0],
        ControllerMetrics(),
        AdmissionSyncSettings(scope),  # type: ignore[arg-type]
        is_leader=lambda: lead[0],
        wall=lambda: 1234.0,
    )


def test_the_leader_applies_once_and_an_unchanged_version_writes_nothing(
    apiserver: tuple[ApplyServer, KubeJson],
) -> None:
    objects, kube = apiserver
    policy = [STARTER]
    job = make_job(kube, policy)
    assert job.run_once()
    paths = {ref.path for ref in VALIDATING}
    assert set(objects.by_path) == paths
    # Every object validated by a dry run before the first is written.
    dry = [i for i, w in enumerate(objects.writes) if w[2]]
    assert len(dry) == 2 and max(dry) < min(i for i, w in enumerate(objects.writes) if not w[2])
    status = job.status()
    assert (status.version, status.current, status.refused) == (STARTER.version, True, None)
    m = job.metrics
    assert value(m, "steer_controller_admission_policies_current", scope="validating") == 1
    assert (
        value(m, "steer_controller_admission_policies_version_info", version=STARTER.version) == 1
    )
    assert (
        value(
            m, "steer_controller_admission_policies_applied_timestamp_seconds", scope="validating"
        )
        == 1234.0
    )

    before = len(objects.writes)
    assert job.run_once()
    assert len(objects.writes) == before  # GETs only

    policy[0] = EXAMPLE
    assert job.run_once()
    assert len(objects.real_writes()) == 2 + 2  # the example changes every object
    assert job.status().version == EXAMPLE.version


def test_a_replica_that_does_not_lead_reads_and_never_writes(
    apiserver: tuple[ApplyServer, KubeJson],
) -> None:
    objects, kube = apiserver
    leading = [False]
    job = make_job(kube, [STARTER], leading=leading)
    assert job.run_once()
    assert objects.writes == []
    assert job.status().current is False and job.status().version is None
    assert (
        value(job.metrics, "steer_controller_admission_policies_current", scope="validating")
        is None
    )
    leading[0] = True
    assert job.run_once() and job.status().current
    leading[0] = False
    assert job.run_once()
    assert job.status().current  # it still says what the apiserver holds
    assert (
        value(job.metrics, "steer_controller_admission_policies_current", scope="validating")
        is None
    )


def test_a_refused_version_writes_nothing_keeps_the_previous_and_is_not_retried(
    apiserver: tuple[ApplyServer, KubeJson],
) -> None:
    objects, kube = apiserver
    policy = [STARTER]
    job = make_job(kube, policy)
    assert job.run_once()
    kept = copy.deepcopy(objects.by_path)
    written = len(objects.real_writes())
    objects.refuse = {"steer-budget"}
    policy[0] = EXAMPLE
    assert job.run_once()  # nothing to retry soon
    assert objects.by_path == kept and len(objects.real_writes()) == written
    status = job.status()
    assert (status.version, status.current, status.refused) == (
        STARTER.version,
        False,
        EXAMPLE.version,
    )
    assert status.last_error is not None and "steer-budget: compilation failed" in status.last_error
    m = job.metrics
    assert value(m, "steer_controller_admission_policies_refused", scope="validating") == 1
    assert value(m, "steer_controller_admission_policies_current", scope="validating") == 0
    failures = "steer_controller_admission_policies_apply_failures_total"
    assert value(m, failures, object="ValidatingAdmissionPolicy/steer-budget") == 1
    tries = len(objects.writes)
    assert job.run_once()
    assert len(objects.writes) == tries  # the same refused set is not sent again
    # A fixed version goes through.
    objects.refuse = set()
    policy[0] = STARTER
    assert job.run_once()
    assert job.status().refused is None and job.status().current


def test_an_unreachable_apiserver_is_a_failure_to_retry(
    apiserver: tuple[ApplyServer, KubeJson],
) -> None:
    objects, kube = apiserver
    job = make_job(kube, [STARTER])
    objects.down = True
    assert not job.run_once()
    error = job.status().last_error
    assert error is not None and "503" in error
    objects.down = False
    assert job.run_once() and job.status().current and job.status().last_error is None


def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@contextlib.contextmanager
def running(job: AdmissionPolicySync) -> Iterator[AdmissionPolicySync]:
    job.start()
    try:
        yield job
    finally:
        job.stop(timeout_s=5)


def test_the_thread_runs_at_start_on_a_wake_and_retries_a_failure_before_the_interval(
    apiserver: tuple[ApplyServer, KubeJson],
) -> None:
    """The interval is 60 s: every run below comes from the start, a wake or the backoff."""
    objects, kube = apiserver
    policy = [STARTER]
    with running(make_job(kube, policy)) as job:
        assert until(lambda: job.status().version == STARTER.version)
        policy[0] = EXAMPLE
        job.wake()  # a new policy version
        assert until(lambda: job.status().version == EXAMPLE.version)
        objects.down = True
        policy[0] = STARTER
        job.wake()
        assert until(lambda: job.status().last_error is not None)
        objects.down = False  # the next try, a backoff of 1 s later, goes through
        assert until(lambda: job.status().version == STARTER.version, timeout_s=5)
        assert job.status().last_error is None
    written = len(objects.writes)
    policy[0] = EXAMPLE
    job.wake()  # stopped: nothing runs
    time.sleep(0.2)
    assert len(objects.writes) == written


def test_validating_neither_reads_nor_writes_a_mutating_policy(
    apiserver: tuple[ApplyServer, KubeJson],
) -> None:
    """A webhook-only install grants nothing about MutatingAdmissionPolicies: `validating`
    leaves one an earlier `all` applied alone (inert once its binding is gone)."""
    objects, kube = apiserver
    every = make_job(kube, [STARTER], scope="all")
    assert every.run_once()
    assert MUTATING.path in objects.by_path
    validating = make_job(kube, [STARTER], scope="validating")
    objects.writes.clear()
    assert validating.run_once()
    assert MUTATING.path in objects.by_path
    assert not [w for w in objects.writes if "mutating" in w[1]]


def test_the_steering_policy_condition_says_applied_refused_or_not_applied() -> None:
    applied = AdmissionStatus("validating", "starter@1", True)
    assert applied.condition() == (
        "True",
        "Applied",
        "the admission policies (validating) on the apiserver are compiled from starter@1",
    )
    refused = AdmissionStatus("all", "starter@1", False, refused="starter@2", last_error="bad CEL")
    status, reason, message = refused.condition()
    assert (status, reason) == ("False", "Refused")
    assert "starter@2" in message and "starter@1 keep serving: bad CEL" in message
    failing = AdmissionStatus("validating", None, False, last_error="HTTP 403")
    assert failing.condition()[1:] == (
        "NotApplied",
        "the admission policies (validating) are not current: HTTP 403",
    )


def test_the_status_field_keeps_its_transition_time_until_the_status_flips() -> None:
    told = ("True", "Applied", "compiled from starter@1")
    first = admission_status(told, 3, {}, "2026-01-01T00:00:00Z")
    assert first == {
        "type": "AdmissionPolicies",
        "status": "True",
        "reason": "Applied",
        "message": "compiled from starter@1",
        "observedGeneration": 3,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    again = admission_status(told, 4, first, "2026-02-01T00:00:00Z")
    assert again["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = admission_status(("False", "Refused", "x"), 4, first, "2026-02-01T00:00:00Z")
    assert flipped["lastTransitionTime"] == "2026-02-01T00:00:00Z"


def test_the_scorer_refuses_the_flags_of_the_jobs_the_controller_runs_naming_it() -> None:
    def scorer(*flags: str) -> Any:
        return build_parser().parse_args(["scorer", "run", "--policy", "p.yaml", *flags])

    assert moved_flags_error(scorer()) is None
    # What they always meant there: accepted, so an old Deployment with them off still starts.
    assert moved_flags_error(scorer("--webhook-certs=off", "--admission-policies=off")) is None
    for flags in (
        ("--webhook-certs=renew",),
        ("--admission-policies=validating",),
        ("--webhook-config", "other"),
    ):
        error = moved_flags_error(scorer(*flags))
        assert error is not None and "`steer controller run`" in error, flags
        assert flags[0].split("=")[0] in error

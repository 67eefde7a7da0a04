"""`steer scorer run --admission-policies` (scorer/admission_plan.py, scorer/admission_sync.py):
what to apply and delete given the live objects, and the job over HTTP against a small stand-in
of the apiserver's server-side apply: only the leader writes, an unchanged version writes
nothing, a refused version writes nothing and is not retried, failures are retried."""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client import CollectorRegistry

from launcher.commands import build_parser
from scorer.admission_plan import (
    FIELD_MANAGER,
    MUTATING_REFS,
    AdmissionRef,
    digest_key,
    live_version,
    made_by_scorer,
    plan_sync,
    recorded_label_prefixes,
    removable_refs,
    wanted_objects,
)
from scorer.admission_sync import (
    AdmissionPolicySync,
    AdmissionStatus,
    AdmissionSyncSettings,
    settings_from,
)
from scorer.metrics import ScorerMetrics
from scorer.model import NodeState
from steer.adapters.kubejson import KubeJson
from steer.adapters.policy_file import load_policy_file
from steer.core.policy import Policy
from tests.certs_support import object_server

ROOT = Path(__file__).resolve().parents[1]
STARTER = load_policy_file(str(ROOT / "manifests" / "policy" / "starter-policy.yaml"))
EXAMPLE = load_policy_file(str(ROOT / "steer" / "presets" / "policy.yaml"))
VALIDATING = {
    AdmissionRef(kind, name)
    for name in ("steer-security", "steer-budget", "steer-scorer-node-writes")
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
}


def applied(obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any]:
    """`obj` as the apiserver holds it after `manager` applied it."""
    live = copy.deepcopy(obj)
    live["metadata"]["managedFields"] = [{"manager": manager, "operation": "Apply"}]
    return live


# -- the decisions ------------------------------------------------------------------------------


def test_the_scopes_want_the_validating_objects_and_all_adds_the_mutation() -> None:
    validating = wanted_objects(STARTER, "validating")
    assert {o.ref for o in validating} == VALIDATING
    every = wanted_objects(STARTER, "all")
    assert {o.ref for o in every} == VALIDATING | set(MUTATING_REFS)
    for obj in every:
        annotations = obj.body["metadata"]["annotations"]
        assert annotations[digest_key(STARTER)] == obj.digest
        assert annotations[STARTER.label_key("policy-version")] == STARTER.version
    kinds = [o.ref.kind for o in every]  # each policy before its binding
    assert kinds.index("MutatingAdmissionPolicy") < kinds.index("MutatingAdmissionPolicyBinding")
    assert removable_refs("validating") == MUTATING_REFS and removable_refs("all") == ()


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


def test_the_same_version_compiled_otherwise_is_applied_again() -> None:
    """A scorer release that compiles the policy into other CEL (here: another scorer user)
    writes though the policy version did not change."""
    wanted = wanted_objects(STARTER, "validating")
    live = {o.ref: applied(o.body) for o in wanted}
    other = wanted_objects(STARTER, "validating", scorer_user="system:serviceaccount:x:y")
    plan = plan_sync(STARTER, other, live)
    assert [o.ref for o in plan.apply] == [
        AdmissionRef("ValidatingAdmissionPolicy", "steer-scorer-node-writes")
    ]


def test_the_mutation_is_deleted_only_when_the_scorer_applied_it() -> None:
    every = {o.ref: o.body for o in wanted_objects(STARTER, "all")}
    wanted = wanted_objects(STARTER, "validating")
    live: dict[AdmissionRef, dict[str, Any] | None] = {o.ref: applied(o.body) for o in wanted}
    by_scorer = {ref: applied(every[ref]) for ref in MUTATING_REFS}
    plan = plan_sync(STARTER, wanted, {**live, **by_scorer}, MUTATING_REFS)
    assert plan.delete == MUTATING_REFS  # the binding first
    by_kubectl = {ref: applied(every[ref], "kubectl-client-side-apply") for ref in MUTATING_REFS}
    assert plan_sync(STARTER, wanted, {**live, **by_kubectl}, MUTATING_REFS).delete == ()
    unlabelled = copy.deepcopy(by_scorer)
    for obj in unlabelled.values():
        obj["metadata"]["labels"] = {}
    assert not any(made_by_scorer(o) for o in unlabelled.values())
    assert plan_sync(STARTER, wanted, {**live, **unlabelled}, MUTATING_REFS).delete == ()
    assert plan_sync(STARTER, wanted, live, MUTATING_REFS).delete == ()  # absent


def test_the_node_writes_policy_allows_the_prefixes_still_recorded_on_nodes() -> None:
    """After a labelPrefix change the scorer retires the old prefix's keys; the node-writes
    policy it applies lets it, for as long as a node carries a record under that prefix."""
    old = "old.example.com/"
    record = json.dumps({"labels": [f"{old}score-util"], "taints": [], "resources": []})
    nodes = [
        NodeState("a", annotations={f"{old}managed": record}),
        NodeState("b", annotations={"other.example.com/managed": "not a record"}),
    ]
    assert recorded_label_prefixes(nodes) == (old,)
    ref = AdmissionRef("ValidatingAdmissionPolicy", "steer-scorer-node-writes")
    plain = {o.ref: o for o in wanted_objects(STARTER, "validating")}
    wider = {o.ref: o for o in wanted_objects(STARTER, "validating", also_prefixes=(old,))}
    assert old not in json.dumps(plain[ref].body) and old in json.dumps(wider[ref].body)
    live = {r: applied(o.body) for r, o in plain.items()}
    assert [o.ref for o in plan_sync(STARTER, tuple(wider.values()), live).apply] == [ref]


def run_args(*flags: str) -> Any:
    return build_parser().parse_args(["scorer", "run", "--policy", "p.yaml", *flags])


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


def value(metrics: ScorerMetrics, name: str, **labels: str) -> float | None:
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
        ScorerMetrics(),
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
    assert len(dry) == 6 and max(dry) < min(i for i, w in enumerate(objects.writes) if not w[2])
    status = job.status()
    assert (status.version, status.current, status.refused) == (STARTER.version, True, None)
    m = job.metrics
    assert value(m, "steer_scorer_admission_policies_current", scope="validating") == 1
    assert value(m, "steer_scorer_admission_policies_version_info", version=STARTER.version) == 1
    assert (
        value(m, "steer_scorer_admission_policies_applied_timestamp_seconds", scope="validating")
        == 1234.0
    )

    before = len(objects.writes)
    assert job.run_once()
    assert len(objects.writes) == before  # GETs only

    policy[0] = EXAMPLE
    assert job.run_once()
    assert len(objects.real_writes()) == 6 + 6  # the example changes every object
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
    assert value(job.metrics, "steer_scorer_admission_policies_current", scope="validating") is None
    leading[0] = True
    assert job.run_once() and job.status().current
    leading[0] = False
    assert job.run_once()
    assert job.status().current  # it still says what the apiserver holds
    assert value(job.metrics, "steer_scorer_admission_policies_current", scope="validating") is None


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
    assert value(m, "steer_scorer_admission_policies_refused", scope="validating") == 1
    assert value(m, "steer_scorer_admission_policies_current", scope="validating") == 0
    failures = "steer_scorer_admission_policies_apply_failures_total"
    assert value(m, failures, object="ValidatingAdmissionPolicy/steer-budget") == 1
    tries = len(objects.writes)
    assert job.run_once()
    assert len(objects.writes) == tries  # the same refused set is not sent again
    # A fixed version goes through.
    objects.refuse = set()
    policy[0] = STARTER
    assert job.run_once()
    assert job.status().refused is None and job.status().current


def test_nothing_is_applied_before_the_nodes_are_listed(
    apiserver: tuple[ApplyServer, KubeJson],
) -> None:
    objects, kube = apiserver
    prefixes: list[tuple[str, ...] | None] = [None]
    job = AdmissionPolicySync(
        kube,
        lambda: STARTER,
        ScorerMetrics(),
        AdmissionSyncSettings("validating"),
        is_leader=lambda: True,
        also_prefixes=lambda: prefixes[0],
    )
    assert not job.run_once()  # tried again after the backoff
    assert objects.writes == [] and "not listed yet" in (job.status().last_error or "")
    prefixes[0] = ()
    assert job.run_once() and job.status().current


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


def test_validating_deletes_the_mutation_the_scorer_applied_and_all_keeps_it(
    apiserver: tuple[ApplyServer, KubeJson],
) -> None:
    objects, kube = apiserver
    every = make_job(kube, [STARTER], scope="all")
    assert every.run_once()
    assert {r.path for r in MUTATING_REFS} <= set(objects.by_path)
    assert every.run_once()
    assert {r.path for r in MUTATING_REFS} <= set(objects.by_path)
    validating = make_job(kube, [STARTER], scope="validating")
    assert validating.run_once()
    assert set(objects.by_path) == {r.path for r in VALIDATING}
    deletes = [path for method, path in objects.real_writes() if method == "DELETE"]
    assert deletes == [r.path for r in MUTATING_REFS]


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

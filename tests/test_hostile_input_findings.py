"""Issue 21 ("Hostile input and faults"): the findings no other test pins down end to end.

- A limit the apiserver stores (a huge exponent, a ratio past a float, 5,000 digits) once made
  validation allow a dept-b pod with four violations (or answer 500, which `failurePolicy:
  Ignore` also admits) and left it unmutated. Through `AdmissionHandler.handle`, it is denied
  with every violation and mutated as any pod.
- A tenant's pod with a field validation cannot read was allowed with a warning: every rule
  skipped. It is denied, the message naming the field; a pod in no tenant still passes with the
  warning, and infrastructure (DaemonSet and mirror pods) is never refused, readable or not.
- Type-confused fields once made /mutate fail internally (answered, but unsteered and counted
  as an internal error): every field of every captured review, given a value of the wrong type,
  is an answer the handler meant, never its last-resort "internal error".
- A policy nested thousands deep once killed the reload thread (RecursionError): nothing was
  counted and the next valid edit was never served. Whatever loading raises, the thread goes on.
- The network-policy component, rendered as `kubectl apply -k` renders it, opens the webhook's
  ports to no pod but Prometheus's (the setting reaches every except entry).
"""

from __future__ import annotations

import base64
import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from kits.waiting import wait_until
from steer.adapters import policy_file
from steer.adapters.policy_file import PolicyWatcher
from steer.core.policy import Policy
from tests.conftest import EXAMPLE_POLICY, FIXTURES
from tests.webhook_harness import counted, in_process_handler, review_for
from webhook.handler import AdmissionHandler
from webhook.review import Endpoint

ROOT = Path(__file__).resolve().parent.parent
ENDPOINTS: tuple[Endpoint, ...] = ("mutate", "validate", "validate-security")


@pytest.fixture(scope="module")
def handler() -> AdmissionHandler:
    return in_process_handler()


def internal_errors(handler: AdmissionHandler) -> float:
    return sum(
        sample.value
        for family in handler.metrics.uninterpretable.collect()
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("reason") == "internal-error"
    )


# --- quantities the apiserver stores ------------------------------------------------------------


def four_violations(cpu_limit: str) -> bytes:
    """A dept-b pod breaking four rules: a scheduler it may not use, a reserved (security)
    toleration, a cpu limit over its request (budget 0 %), and no memory limit."""
    body = review_for("pod-create-by-replicaset.json", "team-b")
    spec = body["request"]["object"]["spec"]
    spec["schedulerName"] = "default-scheduler"
    spec["tolerations"].append({"key": "kube-steer.github.io/unhealthy", "operator": "Exists"})
    spec["containers"][0]["resources"] = {
        "requests": {"cpu": "250m", "memory": "64Mi"},
        "limits": {"cpu": cpu_limit},
    }
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "cpu_limit",
    [
        "500m",  # the plain pod, for comparison
        "1e1000000000",  # was "exponent out of range": uninterpretable, so allowed
        "1e400",  # was a ratio past a float: OverflowError, HTTP 500
        "9" * 5000,  # was more digits than int() converts: ValueError, HTTP 500
    ],
    ids=["plain", "huge-exponent", "float-overflow", "5000-digits"],
)
def test_a_limit_the_apiserver_stores_skips_no_rule(
    handler: AdmissionHandler, cpu_limit: str
) -> None:
    body = four_violations(cpu_limit)
    validate = handler.handle("validate", body)
    assert (validate.status, validate.result) == (200, "denied"), validate.body
    response = orjson.loads(validate.body)["response"]
    message = response["status"]["message"]
    assert response["allowed"] is False and message.startswith("4 policy violations: "), message
    assert 'container "web" (spec.containers[0]) cpu limit ' in message
    assert "rule scheduler-name:" in message and "rule reserved-toleration:" in message
    assert "no limit for memory" in message

    security = handler.handle("validate-security", body)
    assert (security.status, security.result) == (200, "denied"), security.body

    mutate = handler.handle("mutate", body)
    assert (mutate.status, mutate.result) == (200, "mutated"), mutate.body
    patch = json.loads(base64.b64decode(orjson.loads(mutate.body)["response"]["patch"]))
    assert any("pool-cpu" in json.dumps(op) for op in patch), patch
    assert internal_errors(handler) == 0


# --- a tenant pod the webhook cannot read -----------------------------------------------------

DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"


def unreadable_limit(namespace: str, **changes: Any) -> dict[str, Any]:
    """A pod whose cpu limit is no quantity, in `namespace`."""
    body = review_for("pod-create-by-replicaset.json", namespace, **changes)
    body["request"]["object"]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "lots"}
    return body


def test_a_tenant_pod_validation_cannot_read_is_denied_naming_the_field(
    handler: AdmissionHandler,
) -> None:
    before = counted(handler, "denials", rule="uninterpretable")
    unread = counted(handler, "uninterpretable", endpoint="validate", reason="spec.containers")
    raw = orjson.dumps(unreadable_limit("team-b"))
    outcome = handler.handle("validate", raw)
    assert (outcome.status, outcome.result) == (200, "denied-uninterpretable"), outcome.body
    response = orjson.loads(outcome.body)["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "warnings" not in response
    assert response["status"]["message"].startswith(
        "spec.containers[0].resources.limits.cpu cannot be read, so no rule of tenant "
        '"dept-b" (namespace "team-b") can be judged and the pod is not admitted; fix '
        "spec.containers[0].resources.limits.cpu: 'lots' is not a quantity"
    )
    # Counted as a denial (by rule) and as uninterpretable (by part of the pod, a fixed set).
    assert counted(handler, "denials", rule="uninterpretable") == before + 1
    assert (
        counted(handler, "uninterpretable", endpoint="validate", reason="spec.containers")
        == unread + 1
    )
    # Mutation still answers, unsteered and saying why.
    mutate = handler.handle("mutate", raw)
    assert (mutate.status, mutate.result) == (200, "uninterpretable"), mutate.body
    response = orjson.loads(mutate.body)["response"]
    assert response["allowed"] is True and "patch" not in response
    assert "pod not steered: spec.containers[0].resources: 'lots'" in response["warnings"][0]
    assert internal_errors(handler) == 0


def test_a_dry_run_denial_of_an_unreadable_pod_is_counted_as_a_dry_run(
    handler: AdmissionHandler,
) -> None:
    before = counted(handler, "denials", rule="uninterpretable")
    outcome = handler.handle("validate", orjson.dumps(unreadable_limit("team-a", dryRun=True)))
    assert outcome.result == "denied-uninterpretable", outcome.body
    assert counted(handler, "denials", rule="uninterpretable") == before
    assert counted(handler, "dry_runs", endpoint="validate", result="denied-uninterpretable") >= 1


def test_security_validation_denies_a_tenant_pod_whose_tolerations_it_cannot_read(
    handler: AdmissionHandler,
) -> None:
    body = review_for("pod-create-by-replicaset.json", "team-c")  # a tenant, not opted in
    body["request"]["object"]["spec"]["tolerations"] = "everything"
    for endpoint in ("validate", "validate-security"):
        outcome = handler.handle(endpoint, orjson.dumps(body))  # type: ignore[arg-type]
        assert outcome.result == "denied-uninterpretable", (endpoint, outcome.body)
        message = orjson.loads(outcome.body)["response"]["status"]["message"]
        assert message == (
            'spec.tolerations cannot be read, so no rule of tenant "dept-a" (namespace "team-c")'
            " can be judged and the pod is not admitted; fix spec.tolerations: expected a list"
            " of objects"
        )


def test_a_pod_in_no_tenant_is_allowed_with_a_warning(handler: AdmissionHandler) -> None:
    """Its tolerations are still read (it may tolerate no reserved taint); its limits are not
    (no budget applies)."""
    body = review_for("pod-create-by-replicaset.json", "plain")
    body["request"]["object"]["spec"]["tolerations"] = "everything"
    for endpoint in ("validate", "validate-security"):
        outcome = handler.handle(endpoint, orjson.dumps(body))  # type: ignore[arg-type]
        assert (outcome.status, outcome.result) == (200, "uninterpretable"), outcome.body
        response = orjson.loads(outcome.body)["response"]
        assert response["allowed"] is True
        assert response["warnings"] == [
            "kube-steer: pod not validated: spec.tolerations: expected a list of objects"
        ]
    outcome = handler.handle("validate", orjson.dumps(unreadable_limit("plain")))
    assert outcome.result == "allowed", outcome.body


def infrastructure(kind: str, namespace: str, user: str) -> dict[str, Any]:
    body = unreadable_limit(namespace)
    request = body["request"]
    metadata = request["object"]["metadata"]
    if kind == "daemonset":
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": "node-agent",
                "uid": "0b5a6c1e-2f1d-4b8e-9c3a-5d7e8f901234",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        request["userInfo"] = {"username": user, "groups": ["system:serviceaccounts"]}
    else:
        metadata.pop("ownerReferences", None)
        metadata.setdefault("annotations", {})["kubernetes.io/config.mirror"] = "abc123"
        request["userInfo"] = {"username": user, "groups": ["system:nodes"]}
    return body


@pytest.mark.parametrize(
    ("kind", "user"), [("daemonset", DAEMONSET_CONTROLLER), ("mirror-pod", "system:node:n1")]
)
@pytest.mark.parametrize("namespace", ["team-a", "team-b"])
def test_infrastructure_with_an_unreadable_field_in_a_tenant_namespace_is_allowed(
    handler: AdmissionHandler, kind: str, user: str, namespace: str
) -> None:
    raw = orjson.dumps(infrastructure(kind, namespace, user))
    for endpoint in ENDPOINTS:
        outcome = handler.handle(endpoint, raw)
        assert (outcome.status, outcome.result) == (200, "skipped"), (endpoint, outcome.body)
        response = orjson.loads(outcome.body)["response"]
        assert response == {"uid": response["uid"], "allowed": True}


def test_a_daemonset_owner_written_by_anyone_else_is_no_exemption(
    handler: AdmissionHandler,
) -> None:
    raw = orjson.dumps(infrastructure("daemonset", "team-b", "alice"))
    outcome = handler.handle("validate", raw)
    assert outcome.result == "denied-uninterpretable", outcome.body


def test_an_update_is_denied_only_for_an_unreadable_field_it_introduces(
    handler: AdmissionHandler,
) -> None:
    readable = review_for("pod-create-by-replicaset.json", "team-b")["request"]["object"]
    unreadable = unreadable_limit("team-b")["request"]["object"]
    relabelled = copy.deepcopy(unreadable)
    relabelled["metadata"].setdefault("labels", {})["extra"] = "1"

    def update(new: Any, old: Any) -> Any:
        body = review_for("pod-create-by-replicaset.json", "team-b", operation="UPDATE")
        body["request"]["object"], body["request"]["oldObject"] = new, old
        return handler.handle("validate", orjson.dumps(body))

    # A pod stored unreadable (admitted before) can still be relabelled, with the warning.
    kept = update(relabelled, unreadable)
    assert kept.result == "uninterpretable", kept.body
    assert orjson.loads(kept.body)["response"]["allowed"] is True
    # An update that makes a readable pod unreadable is denied.
    introduced = update(unreadable, readable)
    assert introduced.result == "denied-uninterpretable", introduced.body
    # A stored pod that cannot be read shows nothing: the new pod's violations all stand.
    violating = copy.deepcopy(readable)
    violating["spec"]["schedulerName"] = "default-scheduler"
    against_unreadable = update(violating, unreadable)
    assert against_unreadable.result == "denied", against_unreadable.body
    message = orjson.loads(against_unreadable.body)["response"]["status"]["message"]
    assert message.startswith("rule scheduler-name: ")


# --- type-confused fields -------------------------------------------------------------------------

REVIEWS = {
    p.name: json.loads(p.read_text())["body"]
    for p in sorted((FIXTURES / "admission").glob("pod-*.json"))
}
# Values of the wrong type for almost any field of a pod: unhashable, nested, numeric, empty.
WRONG_TYPES: tuple[Any, ...] = ([[1]], {"a": [1]}, [], {}, 1.5, True, -1, "")


def field_paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        items: Any = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for key, value in items:
        yield (*prefix, key)
        yield from field_paths(value, (*prefix, key))


def confused_reviews() -> Iterator[tuple[str, dict[str, Any]]]:
    """Each captured review, as a tenant's pod (steered, validated) and as it was, with one
    field of its object replaced by a value of the wrong type."""
    for name, captured in REVIEWS.items():
        for namespace in (None, "team-a", "team-b"):
            base = copy.deepcopy(captured)
            if namespace is not None:
                base = review_for(name, namespace, operation="CREATE")
            obj = base["request"].get("object")
            for path in field_paths(obj):
                for value in WRONG_TYPES:
                    review = copy.deepcopy(base)
                    parent: Any = review["request"]["object"]
                    for step in path[:-1]:
                        parent = parent[step]
                    parent[path[-1]] = value
                    yield ".".join(map(str, path)), review


def test_no_type_confused_field_is_an_internal_error(handler: AdmissionHandler) -> None:
    """A toleration key or a topologyKey that is a list once raised TypeError in /mutate
    (unhashable type): the pod was answered unsteered, as an internal error."""
    failures: dict[tuple[str, str], str] = {}
    answered = 0
    for where, review in confused_reviews():
        raw = orjson.dumps(review)
        for endpoint in ENDPOINTS:
            outcome = handler.handle(endpoint, raw)
            answered += 1
            if outcome.result == "error":
                failures.setdefault((endpoint, where), outcome.body.decode()[:200])
    assert answered > 10_000
    assert not failures, f"{len(failures)} internal errors, e.g. {list(failures.items())[:5]}"
    assert internal_errors(handler) == 0


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("tolerations", [{"key": ["x"], "operator": "Exists"}], "spec.tolerations[0].key"),
        ("tolerations", [{"key": "k", "value": {"a": 1}}], "spec.tolerations[0].value"),
        ("tolerations", [{"operator": "Exists", "effect": []}], "spec.tolerations[0].effect"),
        (
            "tolerations",
            [{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": [300]}],
            "spec.tolerations[0].tolerationSeconds",
        ),
        (
            "topologySpreadConstraints",
            [{"maxSkew": 1, "topologyKey": ["zone"], "whenUnsatisfiable": "DoNotSchedule"}],
            "spec.topologySpreadConstraints[0].topologyKey",
        ),
    ],
)
def test_a_type_confused_field_is_uninterpretable_and_named(
    handler: AdmissionHandler, field: str, value: Any, named: str
) -> None:
    body = review_for("pod-create-by-replicaset.json", "team-a")
    body["request"]["object"]["spec"][field] = value
    outcome = handler.handle("mutate", json.dumps(body).encode())
    assert (outcome.status, outcome.result) == (200, "uninterpretable"), outcome.body
    response = orjson.loads(outcome.body)["response"]
    assert response["allowed"] is True and "patch" not in response
    (warning,) = response["warnings"]
    assert named in warning, warning
    assert internal_errors(handler) == 0


# --- the reload thread ---------------------------------------------------------------------------


def test_the_reload_thread_survives_what_loading_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parser as it was: a deep file raised RecursionError out of `check`."""
    real_parse = policy_file.parse_policy

    def parse(data: str | bytes) -> Policy:
        if b"[[[[" in (data if isinstance(data, bytes) else data.encode()):
            raise RecursionError("maximum recursion depth exceeded")
        return real_parse(data)

    monkeypatch.setattr(policy_file, "parse_policy", parse)
    path = tmp_path / "policy.yaml"
    text = EXAMPLE_POLICY.read_text()
    path.write_text(text)
    watcher = PolicyWatcher(str(path), interval_seconds=0.02)
    first = watcher.current.version

    def replace(content: str) -> None:
        """As a ConfigMap volume changes: whole, never a truncated file in between (the
        watcher polls every 20 ms and would count an empty read as a fault of its own)."""
        staged = tmp_path / "staged.yaml"
        staged.write_text(content)
        os.replace(staged, path)

    watcher.start()
    try:
        replace("spec: " + "[" * 5000 + "]" * 5000 + "\n")
        wait_until(
            "the deep file counted as a reload error",
            lambda: watcher.status().reload_errors == 1,
            timeout=5,
            interval=0.02,
        )
        assert "RecursionError" in (watcher.status().last_error or "")
        replace(text.replace("step: 10 ", "step: 20 "))
        wait_until(
            "the good edit loaded",
            lambda: watcher.status().version != first,
            timeout=5,
            interval=0.02,
        )
        status = watcher.status()
        assert status.last_error is None and status.reload_errors == 1
    finally:
        watcher.stop()


def test_a_policy_deleted_and_restored_is_judged_again(tmp_path: Path) -> None:
    """After a delete and restore the status once kept the stale "cannot read policy file":
    the good policy back clears it, a bad one back is shown with its own reason."""
    path = tmp_path / "policy.yaml"
    text = EXAMPLE_POLICY.read_text()
    path.write_text(text)
    watcher = PolicyWatcher(str(path))
    bad = text.replace("overcommitPercent: 0", "overcommitPercent: 150")
    path.write_text(bad)
    watcher.check()
    assert "overcommitPercent" in (watcher.last_error or "") and watcher.reload_errors == 1
    path.unlink()
    watcher.check()
    assert "cannot read policy file" in (watcher.last_error or "") and watcher.reload_errors == 2
    path.write_text(bad)
    watcher.check()
    assert "overcommitPercent" in (watcher.last_error or "") and watcher.reload_errors == 3
    path.unlink()
    watcher.check()
    path.write_text(text)
    assert watcher.check() is False
    assert watcher.last_error is None and watcher.status().last_error is None

"""The webhook over real HTTPS: gunicorn + TLS, golden AdmissionReviews, bad input, metrics,
policy hot reload, namespace changes, and certificate rotation while serving."""

from __future__ import annotations

import base64
import copy
import json
import platform
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import requests

from certs import issue_webhook_certs, write_webhook_certs
from kits.waiting import wait_until
from steer import __version__
from tests.webhook_harness import (
    IDENTITY,
    ROOT,
    Webhook,
    admission_fixture,
    assert_json_lines,
    metric_families,
    metric_value,
    peer_fingerprint,
    review_for,
    running_webhook,
)

MUTATING = (
    "pod-create-user-mutating.json",
    "pod-create-with-affinity-gpu.json",
    "pod-create-by-replicaset.json",
    "pod-create-dryrun.json",
)


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    with running_webhook(tmp_path_factory.mktemp("webhook")) as running:
        yield running


@pytest.fixture(scope="module")
def session(hook: Webhook) -> Iterator[requests.Session]:
    with hook.session() as s:
        yield s


def post(
    session: requests.Session, hook: Webhook, path: str, body: Any, **headers: str
) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return session.post(
        f"{hook.url}{path}",
        data=data,
        headers={"Content-Type": "application/json", **headers},
        timeout=10,
    )


def response_of(reply: requests.Response) -> dict[str, Any]:
    assert reply.status_code == 200, reply.text
    assert reply.headers["Content-Type"] == "application/json"
    review = reply.json()
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    response: dict[str, Any] = review["response"]
    return response


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


# --- golden reviews -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", MUTATING)
def test_golden_review_is_patched_cleanly_and_reinvocation_is_empty(
    hook: Webhook, session: requests.Session, name: str
) -> None:
    captured = admission_fixture(name)
    headers = {
        k: v
        for k, v in captured["headers"].items()
        if k in ("Content-Type", "Accept", "User-Agent")
    }
    response = response_of(post(session, hook, captured["path"], captured["body"], **headers))
    request = captured["body"]["request"]
    assert response["uid"] == request["uid"] and response["allowed"] is True
    ops = patch_of(response)
    assert ops
    # The apiserver rejects a patch whose `add` parent is missing; jsonpatch does the same.
    patched = jsonpatch.JsonPatch(ops).apply(copy.deepcopy(request["object"]))
    assert "kube-steer.github.io/trace" in patched["metadata"]["annotations"]
    # reinvocationPolicy: IfNeeded sends the patched pod again: nothing more to add.
    again = copy.deepcopy(captured["body"])
    again["request"]["object"] = patched
    assert patch_of(response_of(post(session, hook, "/mutate", again))) == []


def test_dry_run_is_answered_the_same_but_counted_apart(
    hook: Webhook, session: requests.Session
) -> None:
    before = hook.settled_metrics()  # the earlier tests' rule counts are in
    real = review_for("pod-create-dryrun.json", dryRun=False)
    dry = review_for("pod-create-dryrun.json")
    assert dry["request"]["dryRun"] is True
    assert patch_of(response_of(post(session, hook, "/mutate", dry))) == patch_of(
        response_of(post(session, hook, "/mutate", real))
    )

    def counted() -> bool:
        after = hook.metrics()
        rule = "scheduler:steer-spread"
        return (
            metric_value(
                after, "steer_webhook_dry_run_reviews_total", endpoint="mutate", result="mutated"
            )
            == metric_value(
                before, "steer_webhook_dry_run_reviews_total", endpoint="mutate", result="mutated"
            )
            + 1
            and metric_value(after, "steer_webhook_mutations_total", rule=rule)
            == metric_value(before, "steer_webhook_mutations_total", rule=rule) + 1
        )

    wait_until("the dry run and the real review counted alike", counted, timeout=15)


@pytest.mark.parametrize(
    ("namespace", "why"),
    [
        ("team-c", "not opted in"),
        ("plain", "no labels"),
        ("kube-steer", "project namespace"),
        ("kube-system", "system"),
    ],
)
def test_pods_outside_opted_in_namespaces_pass_untouched(
    hook: Webhook, session: requests.Session, namespace: str, why: str
) -> None:
    response = response_of(
        post(session, hook, "/mutate", review_for("pod-create-user-mutating.json", namespace))
    )
    assert response == {"uid": "018f94f0-a5de-4442-adcb-9c0aab8ab305", "allowed": True}, why


def test_update_passes_untouched(hook: Webhook, session: requests.Session) -> None:
    response = response_of(post(session, hook, "/mutate", review_for("pod-update-labels.json")))
    assert response == {"uid": "faf104b8-c280-435b-815c-ecf8395b3bc5", "allowed": True}


def test_unknown_namespace_and_foreign_kind_are_allowed_with_warning(
    hook: Webhook, session: requests.Session
) -> None:
    response = response_of(
        post(session, hook, "/mutate", review_for("pod-create-user-mutating.json", "ghost"))
    )
    assert response["allowed"] is True and "patch" not in response
    assert response["warnings"] == [
        'kube-steer: namespace "ghost" is not in the namespace cache yet; pod not steered'
    ]
    body = review_for("pod-create-user-mutating.json")
    body["request"]["kind"]["kind"] = "Deployment"
    response = response_of(post(session, hook, "/mutate", body))
    assert response["allowed"] is True and "expected a Pod object" in response["warnings"][0]
    body = review_for("pod-create-user-mutating.json")
    body["request"]["object"]["spec"]["tolerations"] = "everything"
    response = response_of(post(session, hook, "/mutate", body))
    assert response["allowed"] is True and "spec.tolerations" in response["warnings"][0]
    wait_until(
        "the uninterpretable tolerations counted",
        lambda: (
            metric_value(
                hook.metrics(),
                "steer_webhook_uninterpretable_total",
                endpoint="mutate",
                reason="spec.tolerations",
            )
            >= 1
        ),
        timeout=15,
    )


def test_namespace_label_change_is_seen_without_restart(
    hook: Webhook, session: requests.Session
) -> None:
    hook.stub.add_namespace("late", {"tenant": "dept-b"})
    body = review_for("pod-create-user-mutating.json", "late")
    wait_until(
        "the late namespace's labels seen (no warning)",
        lambda: "warnings" not in response_of(post(session, hook, "/mutate", body)),
        timeout=15,
    )
    assert patch_of(response_of(post(session, hook, "/mutate", body))) == []  # not opted in
    hook.stub.modify(
        "namespaces",
        "late",
        lambda ns: {
            **ns,
            "metadata": {
                **ns["metadata"],
                "labels": {**ns["metadata"]["labels"], "kube-steer.github.io/enabled": "true"},
            },
        },
    )
    wait_until(
        "the opted-in namespace's pods patched",
        lambda: bool(patch_of(response_of(post(session, hook, "/mutate", body)))),
        timeout=15,
    )
    ops = patch_of(response_of(post(session, hook, "/mutate", body)))
    assert "budget-0pct" in json.dumps(ops)  # dept-b: the gate of budget 0 %


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json at all", "not-json"),
        (b'{"kind": "Pod", "apiVersion": "v1"}', "not-admission-review"),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}',
            "missing-uid",
        ),
        (b"", "empty-body"),
    ],
)
@pytest.mark.parametrize("path", ["/mutate", "/validate", "/validate/security"])
def test_bad_input_is_a_400_with_a_json_reason(
    hook: Webhook, session: requests.Session, body: bytes, reason: str, path: str
) -> None:
    reply = post(session, hook, path, body)
    assert reply.status_code == 400
    assert reply.json()["error"]["reason"] == reason
    assert reply.json()["error"]["message"]


def test_oversized_body_is_a_413_and_the_server_keeps_serving(
    hook: Webhook, session: requests.Session
) -> None:
    reply = post(session, hook, "/mutate", b"{" + b" " * (5 * 1024 * 1024) + b"}")
    assert reply.status_code == 413
    assert reply.json()["error"]["reason"] == "body-too-large"
    assert reply.headers["Connection"] == "close"  # the dropped body cannot be followed
    ok = post(hook.session(), hook, "/mutate", review_for("pod-create-user-mutating.json"))
    assert response_of(ok)["allowed"] is True
    wait_until(
        "the oversized body counted",
        lambda: (
            metric_value(
                hook.metrics(), "steer_webhook_bad_requests_total", reason="body-too-large"
            )
            >= 1
        ),
        timeout=15,
    )


def test_unknown_routes_and_methods_answer_json(hook: Webhook, session: requests.Session) -> None:
    missing = session.get(f"{hook.url}/nope", timeout=5)
    assert missing.status_code == 404 and missing.json()["error"]["reason"] == "not-found"
    wrong = session.get(f"{hook.url}/mutate", timeout=5)
    assert wrong.status_code == 405 and wrong.json()["error"]["reason"] == "method-not-allowed"


# --- validation -----------------------------------------------------------------------------------


def test_validation_denies_with_rule_and_values(hook: Webhook, session: requests.Session) -> None:
    body = review_for("pod-create-user-validating.json", "team-b")
    response = response_of(post(session, hook, "/validate?timeout=5s", body))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403 and response["status"]["reason"] == "Forbidden"
    message = response["status"]["message"]
    assert message.startswith("3 policy violations: ")
    assert (
        'rule scheduler-name: spec.schedulerName "default-scheduler" is not allowed for tenant "dept-b"'
        in message
    )
    assert (
        'rule overcommit: container "app" (spec.containers[0]) cpu limit 500m / request 250m = 2.00'
        in message
    )
    assert "memory limit 256Mi / request 128Mi = 2.00" in message


def test_validation_allows_compliant_and_untenanted_pods(
    hook: Webhook, session: requests.Session
) -> None:
    assert response_of(
        post(session, hook, "/validate", review_for("pod-create-user-validating.json", "plain"))
    )["allowed"]
    body = review_for("pod-create-user-validating.json", "team-b")
    spec = body["request"]["object"]["spec"]
    spec["schedulerName"] = "steer-spread"
    spec["containers"][0]["resources"]["limits"] = dict(
        spec["containers"][0]["resources"]["requests"]
    )
    assert response_of(post(session, hook, "/validate", body))["allowed"] is True


def test_security_endpoint_checks_only_security_taints(
    hook: Webhook, session: requests.Session
) -> None:
    body = review_for("pod-create-user-validating.json", "team-b")
    tolerations = body["request"]["object"]["spec"]["tolerations"]
    tolerations.append({"key": "kube-steer.github.io/gpu-hot", "operator": "Exists"})
    assert response_of(post(session, hook, "/validate/security", body))["allowed"] is True
    tolerations.append(
        {"key": "kube-steer.github.io/unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    )
    response = response_of(post(session, hook, "/validate/security", body))
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("rule reserved-toleration: spec.tolerations[3]")


def test_validation_of_update_denies_only_new_violations(
    hook: Webhook, session: requests.Session
) -> None:
    body = review_for("pod-update-labels.json", "team-b")
    assert response_of(post(session, hook, "/validate", body))["allowed"] is True
    body["request"]["object"]["spec"]["tolerations"].append(
        {"key": "kube-steer.github.io/unhealthy", "operator": "Exists"}
    )
    response = response_of(post(session, hook, "/validate", body))
    assert (
        response["allowed"] is False
        and "kube-steer.github.io/unhealthy" in response["status"]["message"]
    )


def test_validation_of_unknown_namespace_defers_to_failure_policy(
    hook: Webhook, session: requests.Session
) -> None:
    reply = post(
        session, hook, "/validate/security", review_for("pod-create-user-validating.json", "ghost")
    )
    assert reply.status_code == 503
    assert reply.json()["error"]["reason"] == "namespace-unknown"


# --- health and metrics ----------------------------------------------------------------------------


def test_health_and_readiness_say_ready_and_nothing_more(
    hook: Webhook, session: requests.Session
) -> None:
    assert session.get(f"{hook.url}/healthz", timeout=5).json() == {"status": "ok"}
    ready = session.get(f"{hook.url}/readyz", timeout=5)
    assert ready.status_code == 200
    # No policy version, error text or certificate for whoever can reach the port.
    assert ready.json() == {"ready": True}


def test_the_detail_is_on_the_metrics_listener_per_worker(hook: Webhook) -> None:
    wait_until("both workers in /status", lambda: len(hook.status()["workers"]) == 2, timeout=15)
    status = hook.status()
    assert status["ready"] is True
    for detail in status["workers"]:
        assert detail["ready"] is True and detail["pid"] > 0
        assert detail["policy"]["version"].startswith("gpu-cluster@")
        assert detail["namespaces"]["synced"] is True and detail["namespaces"]["namespaces"] >= 9
        certificate = detail["certificate"]
        assert certificate["loaded"] is True and "localhost" in certificate["dnsNames"]
    # Each worker keeps its own DRA catalogue (webhook/devices.py), synced from the stand-in.
    wait_until(
        "the DRA catalogues synced",
        lambda: all(d["devices"]["synced"] for d in hook.status()["workers"]),
        timeout=15,
    )
    for detail in hook.status()["workers"]:
        devices = detail["devices"]
        assert devices["watched"] is True
        assert {k["kind"] for k in devices["kinds"]} == {
            "deviceclasses",
            "resourceclaims",
            "resourceclaimtemplates",
        }


@pytest.mark.parametrize("path", ["/", "/readyz", "/metrics/x", "/debug/pprof"])
def test_the_metrics_listener_answers_only_its_two_paths(hook: Webhook, path: str) -> None:
    base = hook.metrics_url.rsplit("/", 1)[0]
    reply = requests.get(f"{base}{path}", timeout=5)
    assert reply.status_code == 404
    assert reply.json()["error"]["reason"] == "not-found"
    assert "steer_webhook" not in reply.text


def test_metrics_on_the_plain_http_port(hook: Webhook, session: requests.Session) -> None:
    post(session, hook, "/mutate", review_for("pod-create-user-mutating.json"))
    post(session, hook, "/validate", review_for("pod-create-user-validating.json", "team-b"))

    def complete() -> bool:
        text = hook.metrics()
        return all(
            (
                metric_value(
                    text,
                    "steer_webhook_admission_duration_seconds_count",
                    endpoint="mutate",
                    result="mutated",
                )
                >= 1,
                metric_value(
                    text,
                    "steer_webhook_admission_duration_seconds_count",
                    endpoint="validate",
                    result="denied",
                )
                >= 1,
                metric_value(
                    text, "steer_webhook_mutations_total", rule="prefer:kube-steer.github.io/score"
                )
                >= 1,
                metric_value(text, "steer_webhook_denials_total", rule="scheduler-name") >= 1,
                metric_value(text, "steer_webhook_policy_info") == 1,
                metric_value(text, "steer_webhook_namespace_cache_namespaces") >= 9,
                "steer_webhook_namespace_cache_age_seconds " in text,
            )
        )

    wait_until("every series on the metrics listener", complete, timeout=15)
    text = hook.metrics()
    assert 'steer_webhook_policy_info{version="gpu-cluster@' in text
    assert 0 <= metric_value(text, "steer_webhook_namespace_cache_age_seconds") < 300


# --- live changes (own servers: they change the policy and the certificates) -------------------------


def policy_versions(hook: Webhook) -> set[str]:
    wait_until("a worker in /status", lambda: bool(hook.status()["workers"]), timeout=15)
    return {w["policy"]["version"] for w in hook.status()["workers"]}


def test_policy_hot_reload_changes_patches_and_metrics(tmp_path: Path) -> None:
    with running_webhook(tmp_path, workers=1) as live, live.session() as s:
        body = review_for("pod-create-user-mutating.json")
        # dept-a (5 %) has the highest budget: its pods take from the pool, and need no gate.
        first = json.dumps(patch_of(response_of(post(s, live, "/mutate", body))))
        assert "pool-cpu" in first and "budget-5pct" not in first
        (old_version,) = policy_versions(live)
        text = live.policy_file.read_text()
        # dept-b now has the highest budget, so dept-a pods carry the gate of 5 %.
        live.policy_file.write_text(text.replace("overcommitPercent: 0", "overcommitPercent: 9"))
        wait_until(
            "the edited policy's gate in the patch",
            lambda: (
                "budget-5pct" in json.dumps(patch_of(response_of(post(s, live, "/mutate", body))))
            ),
            timeout=15,
        )
        wait_until(
            "every worker on the edited policy",
            lambda: policy_versions(live) != {old_version},
            timeout=15,
        )
        (new_version,) = policy_versions(live)
        live.policy_file.write_text(
            "spec: {dimensions: []}\n"
        )  # a bad edit keeps the last good policy
        wait_until(
            "the bad edit in the worker's /status",
            lambda: [w["policy"]["reloadErrors"] for w in live.status()["workers"]] == [1],
            timeout=15,
        )
        assert "budget-5pct" in json.dumps(patch_of(response_of(post(s, live, "/mutate", body))))
        wait_until(
            "the bad edit in the reload-error metric",
            lambda: metric_value(live.metrics(), "steer_webhook_policy_reload_errors_total") == 1,
            timeout=15,
        )
        text = live.metrics()
        assert metric_value(text, "steer_webhook_policy_info", version=new_version) == 1
        assert metric_value(text, "steer_webhook_policy_info", version=old_version) == 0


def test_metrics_on_the_listen_host_counters_build_info_and_json_logs(tmp_path: Path) -> None:
    with running_webhook(
        tmp_path, workers=2, metrics_on_listen_host=True, extra_args=("--log-format", "json")
    ) as live:
        port = int(live.metrics_url.split(":")[2].split("/")[0])
        # --listen 127.0.0.1 and a bare metrics port: bound on loopback only, not 0.0.0.0.
        assert requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.2:{port}/metrics", timeout=5)

        live.policy_file.write_text("spec: {dimensions: []}\n")  # rejected by both workers
        wait_until(
            "the bad edit in the reload-error metric",
            lambda: metric_value(live.metrics(), "steer_webhook_policy_reload_errors_total") == 1,
            timeout=15,
        )
        time.sleep(2.5)  # one more status round: still counted once, not once per worker
        families = metric_families(live.metrics())
        reloads = families["steer_webhook_policy_reload_errors"]
        assert reloads.type == "counter"
        assert [s.value for s in reloads.samples if s.name.endswith("_total")] == [1]
        relists = families["steer_webhook_namespace_cache_relists"]
        assert relists.type == "counter"
        assert [s.value for s in relists.samples if s.name.endswith("_total")] == [2]  # a list each
        build = families["steer_webhook_build_info"]
        assert [(s.labels["version"], s.value) for s in build.samples] == [(__version__, 1)]
        assert build.samples[0].labels["python"] == platform.python_version()

    entries = assert_json_lines(live.log())
    loggers = {e["logger"] for e in entries}
    assert "gunicorn.error" in loggers  # gunicorn's own lines are JSON too
    assert any(e["level"] == "ERROR" and "policy not reloaded" in e["message"] for e in entries)


def test_certificate_rotation_while_serving(tmp_path: Path) -> None:
    with running_webhook(tmp_path) as live:
        old_ca = live.ca_file.read_bytes()
        both = tmp_path / "both-cas.pem"
        new = issue_webhook_certs(IDENTITY)
        both.write_bytes(old_ca + new.ca_cert_pem)
        host, port = "127.0.0.1", int(live.url.rsplit(":", 1)[1])
        before = peer_fingerprint(host, port, both)
        body = json.dumps(review_for("pod-create-user-mutating.json")).encode()
        failures: list[str] = []
        done = 0
        stop = threading.Event()

        def client() -> None:
            nonlocal done
            while not stop.is_set():
                try:  # a new connection each time: every request does a TLS handshake
                    reply = requests.post(
                        f"{live.url}/mutate",
                        data=body,
                        verify=str(both),
                        timeout=10,
                        headers={"Connection": "close"},
                    )
                    if reply.status_code != 200:
                        failures.append(f"HTTP {reply.status_code}")
                    done += 1
                except requests.RequestException as exc:
                    failures.append(repr(exc))

        keep_alive = live.session()
        keep_alive.verify = str(both)
        assert keep_alive.get(f"{live.url}/healthz", timeout=5).status_code == 200
        threads = [threading.Thread(target=client) for _ in range(3)]
        for thread in threads:
            thread.start()
        wait_until("20 requests answered", lambda: done >= 20, timeout=15)
        write_webhook_certs(live.cert_dir, new)  # key first, then certificate, each atomically
        first_after = peer_fingerprint(host, port, both)
        counted = done
        wait_until(
            "20 more requests answered after the rotation", lambda: done >= counted + 20, timeout=15
        )
        stop.set()
        for thread in threads:
            thread.join()
        assert failures == []
        assert first_after != before
        # The new certificate verifies against the new CA alone; the old connection still works.
        new_ca = tmp_path / "new-ca.pem"
        new_ca.write_bytes(new.ca_cert_pem)
        assert peer_fingerprint(host, port, new_ca) == first_after
        assert keep_alive.get(f"{live.url}/healthz", timeout=5).status_code == 200
        wait_until(
            "a worker loaded the certificate again",
            lambda: max(w["certificate"]["loads"] for w in live.status()["workers"]) >= 2,
            timeout=15,
        )


def test_idle_tls_connection_does_not_hold_the_only_thread(tmp_path: Path) -> None:
    """A client may finish the handshake and send nothing (spare pooled connections); with
    one worker and one thread, requests on other connections must still be answered."""
    with running_webhook(tmp_path, workers=1, extra_args=("--threads", "1")) as live:
        host, port = "127.0.0.1", int(live.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(live.ca_file))
        idle = []
        for _ in range(3):
            raw = socket.create_connection((host, port), timeout=5)
            idle.append(context.wrap_socket(raw, server_hostname="localhost"))  # handshake done
        try:
            body = review_for("pod-create-user-mutating.json")
            with live.session() as s:
                for _ in range(5):
                    reply = s.post(f"{live.url}/mutate", data=json.dumps(body), timeout=3)
                    assert response_of(reply)["allowed"] is True
        finally:
            for sock in idle:
                sock.close()


# --- the command line -----------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "webhook", "serve", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_refuses_bad_policy_and_missing_certificate(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: kube-steer.github.io/v1alpha1\nkind: SteeringPolicy\nspec: {dimensions: []}\n"
    )
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    certs = issue_webhook_certs(IDENTITY)
    cert.write_bytes(certs.cert_pem)
    key.write_bytes(certs.key_pem)
    result = run_cli("--policy", str(bad), "--cert", str(cert), "--key", str(key))
    assert result.returncode == 2
    assert "spec.dimensions: must list at least one entry" in result.stderr
    result = run_cli(
        "--policy",
        "examples/policy.yaml",
        "--cert",
        str(tmp_path / "missing.crt"),
        "--key",
        str(key),
    )
    assert result.returncode == 2
    assert "--cert: no such file" in result.stderr and "steer certs generate" in result.stderr
    result = run_cli(
        "--policy",
        "examples/policy.yaml",
        "--cert",
        str(cert),
        "--key",
        str(key),
        "--listen",
        "8443",
    )
    assert result.returncode == 2 and "--listen: expected HOST:PORT" in result.stderr

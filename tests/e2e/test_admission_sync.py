"""The controller's leader keeps the admission policies current (`steer controller run
--admission-policies`, controller/admission_sync.py) on the real apiserver, as a user bound to
the rules the manifests give the controller (its ClusterRole, its Lease Role, and in modes
`policy` and `both` its rule on steer-mutation) and nothing else.

- At start the leader creates the ValidatingAdmissionPolicies by server-side apply (`create`
  allowed by name only: the apiserver authorises it with the object's name); their bindings
  are the install's.
- An edit of the policy file reaches every object within seconds; with the version unchanged
  no object is written again.
- A version the apiserver refuses writes nothing (tests/test_controller_admission_sync.py:
  the policy's own validation now refuses what used to get that far, an excluded namespace
  that is not a namespace name).
- `--admission-policies=all` adds the MutatingAdmissionPolicy.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.admission_plan import FIELD_MANAGER, AdmissionRef
from kits.control_plane import ROOT, ControlPlane
from kits.service_processes import RunningController, running_controller
from kits.waiting import wait_until
from launcher.policy import migrated_object
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.adapters.policy_file import load_policy_file
from steer.adapters.policy_resource import COLLECTION, object_path
from tests.e2e.conftest import may, user_bound_to
from tests.e2e.waiting import install_policy_crd

POLICY = ROOT / "manifests" / "policy" / "starter-policy.yaml"
CONTROLLER = ROOT / "manifests" / "controller" / "controller.yaml"
MUTATING_RBAC = ROOT / "manifests" / "mutating-policy" / "mutating-policy.yaml"
RBAC_GROUP = "rbac.authorization.k8s.io"
ADMISSION_GROUP = "admissionregistration.k8s.io"
RBAC = f"/apis/{RBAC_GROUP}/v1"
VERSION = "kube-steer.github.io/policy-version"
VALIDATING = [
    AdmissionRef("ValidatingAdmissionPolicy", name) for name in ("steer-security", "steer-budget")
]
MUTATING = [AdmissionRef("MutatingAdmissionPolicy", "steer-mutation")]
# What a controller before this release may have left: deleted before and after each test.
LEFT = [
    AdmissionRef(kind, name)
    for name in ("steer-security", "steer-budget", "steer-scorer-node-writes")
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
] + [
    AdmissionRef(k, "steer-mutation")
    for k in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
]
INTERVAL = "--admission-policies-interval=1"


@contextlib.contextmanager
def controller_identity(
    control_plane: ControlPlane, admin: KubeJson, namespace: str
) -> Iterator[Path]:
    """A user bound to the controller manifest's ClusterRole with the rule the admission
    components add on steer-mutation, and its Lease Role in `namespace`."""
    docs = {d["kind"]: d for d in yaml.safe_load_all(CONTROLLER.read_text()) if d}
    (mutating,) = [
        d for d in yaml.safe_load_all(MUTATING_RBAC.read_text()) if d["kind"] == "ClusterRole"
    ]
    role = {**docs["ClusterRole"], "rules": docs["ClusterRole"]["rules"] + mutating["rules"]}
    user = f"admission-sync-{uuid.uuid4().hex[:6]}"
    name = docs["Role"]["metadata"]["name"]
    admin.request(
        "POST",
        f"{RBAC}/namespaces/{namespace}/roles",
        body={**docs["Role"], "metadata": {"name": name, "namespace": namespace}},
    )
    admin.request(
        "POST",
        f"{RBAC}/namespaces/{namespace}/rolebindings",
        body={
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}],
        },
    )
    ready = may("patch", "validatingadmissionpolicies", ADMISSION_GROUP, "steer-security")
    with user_bound_to(control_plane, admin, role, user, ready) as kubeconfig:
        yield kubeconfig


def delete_all(admin: KubeJson) -> None:
    for ref in LEFT:
        with contextlib.suppress(KubeApiError):
            admin.request("DELETE", ref.path)


@pytest.fixture
def clean(admin: KubeJson) -> Iterator[None]:
    """None of the objects before (another test may have applied them) nor after: the budget
    and security policies would judge every later test's pods."""
    delete_all(admin)
    wait_until("no admission object is left", lambda: not live(admin, VALIDATING), timeout=10)
    yield
    delete_all(admin)


def live(admin: KubeJson, refs: list[AdmissionRef]) -> dict[AdmissionRef, dict[str, Any]]:
    found = {}
    for ref in refs:
        with contextlib.suppress(KubeApiError):
            found[ref] = admin.request("GET", ref.path)
    return found


def versions(admin: KubeJson, refs: list[AdmissionRef] = VALIDATING) -> set[str | None]:
    objects = live(admin, refs)
    if len(objects) != len(refs):
        return {None}
    return {o["metadata"].get("annotations", {}).get(VERSION) for o in objects.values()}


def writes_served(control_plane: ControlPlane) -> float:
    """Write requests (apply, patch, create, update, delete) the apiserver has served on the
    admission policy kinds, from its own `apiserver_request_total`."""
    text = control_plane.kubectl("get", "--raw", "/metrics")
    total = 0.0
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = line[line.index("{") : line.rindex("}")]
        verb = labels.split('verb="', 1)[1].split('"', 1)[0]
        resource = (
            labels.split('resource="', 1)[1].split('"', 1)[0] if "resource=" in labels else ""
        )
        if 'subresource="status"' in labels:  # the apiserver's own type checking
            continue
        if "admissionpolic" in resource and verb not in ("GET", "LIST", "WATCH"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def current(controller: RunningController) -> bool:
    return controller.metric("steer_controller_admission_policies_current{") == 1


def version_of(path: Path) -> str:
    return load_policy_file(str(path)).version


def edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.usefixtures("clean")
def test_the_leader_applies_each_version_and_writes_nothing_unchanged(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    tmp_path: Path,
) -> None:
    namespace = make_namespace(prefix="admission-sync")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.read_text())
    with (
        controller_identity(control_plane, admin, namespace) as kubeconfig,
        running_controller(
            control_plane,
            policy,
            tmp_path,
            kubeconfig=kubeconfig,
            extra_args=[
                "--lease-namespace",
                namespace,
                "--admission-policies=validating",
                INTERVAL,
            ],
        ) as controller,
    ):
        # 1. At start: every policy created, as the controller's field manager; no binding.
        wait_until(
            "the leader applied the validating policies",
            lambda: current(controller),
            timeout=20,
            interval=0.2,
        )
        first = version_of(policy)
        assert versions(admin) == {first}
        objects = live(admin, VALIDATING)
        for obj in objects.values():
            # The apiserver's type checker writes the status (its own manager, subresource
            # status) whenever it gets to it: only the object's own fields are the controller's.
            managers = {
                e["manager"]
                for e in obj["metadata"]["managedFields"]
                if e.get("subresource") != "status"
            }
            assert managers == {FIELD_MANAGER}
            assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kube-steer"
        assert not live(admin, MUTATING)
        assert not live(admin, [AdmissionRef(f"{r.kind}Binding", r.name) for r in VALIDATING])

        # 2. Unchanged: three reads later, no write request reached the apiserver (its own
        # count; the objects' resourceVersion moves anyway: the apiserver writes their
        # status.typeChecking).
        before = writes_served(control_plane)
        assert before >= 2 * len(VALIDATING)  # a dry run and an apply each
        time.sleep(3.5)
        assert writes_served(control_plane) == before

        # 3. An edit reaches the apiserver within seconds (the file is polled every 2 s).
        edit(policy, lambda d: d["spec"].setdefault("optIn", {}).update(
            excludedNamespaces=["team-batch"]))  # fmt: skip
        second = version_of(policy)
        edited = time.monotonic()
        wait_until(
            "the edit reached the apiserver",
            lambda: versions(admin) == {second} and current(controller),
            timeout=15,
            interval=0.1,
        )
        took = time.monotonic() - edited
        assert writes_served(control_plane) >= before + 2 * len(VALIDATING)
        assert took < 8, f"{took:.1f} s"
        security = admin.request("GET", VALIDATING[0].path)
        selector = security["spec"]["matchConstraints"]["namespaceSelector"]
        assert "team-batch" in selector["matchExpressions"][0]["values"]


@pytest.mark.usefixtures("clean")
def test_all_adds_the_mutating_policy(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    tmp_path: Path,
) -> None:
    namespace = make_namespace(prefix="admission-sync")
    with (
        controller_identity(control_plane, admin, namespace) as kubeconfig,
        running_controller(
            control_plane,
            POLICY,
            tmp_path,
            kubeconfig=kubeconfig,
            extra_args=["--lease-namespace", namespace, "--admission-policies=all", INTERVAL],
        ) as controller,
    ):
        wait_until(
            "--admission-policies=all is applied",
            lambda: current(controller) and bool(live(admin, MUTATING)),
            timeout=30,
            interval=0.2,
        )
        version = version_of(POLICY)
        assert versions(admin) == versions(admin, MUTATING) == {version}


@pytest.mark.usefixtures("clean")
def test_a_steering_policy_says_in_its_status_whether_its_admission_policies_are_applied(
    control_plane: ControlPlane,
    admin: KubeJson,
    make_namespace: Callable[..., str],
    tmp_path: Path,
) -> None:
    """With `--policy-resource`, the leader writes `status.admissionPolicies` (a field of its
    own, beside the scorer's conditions): True once applied."""
    install_policy_crd(control_plane, admin)
    name = f"e2e-sync-{uuid.uuid4().hex[:6]}"
    admin.request("POST", COLLECTION, body=migrated_object(POLICY.read_text(), name))
    namespace = make_namespace(prefix="admission-sync")

    def told() -> dict[str, Any]:
        status = admin.request("GET", object_path(name)).get("status") or {}
        return dict(status.get("admissionPolicies") or {})

    try:
        with (
            controller_identity(control_plane, admin, namespace) as kubeconfig,
            running_controller(
                control_plane,
                None,
                tmp_path,
                policy_resource=name,
                kubeconfig=kubeconfig,
                extra_args=["--lease-namespace", namespace, "--admission-policies=validating"],
            ),
        ):
            applied = wait_until(
                "status.admissionPolicies is True",
                told,
                until=lambda c: c.get("status") == "True",
                timeout=30,
                interval=0.2,
            )
            assert applied["reason"] == "Applied"
            (version,) = versions(admin)
            assert version is not None and version in applied["message"]
    finally:
        with contextlib.suppress(KubeApiError):
            admin.request("DELETE", object_path(name))

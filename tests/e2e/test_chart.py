"""The Helm chart on a real control plane: `helm lint`, `helm template` accepted by the
apiserver, and the Helm section of docs/install.md run verbatim: `helm install` (then steered
pods bound), `helm upgrade` with a changed policy (hot-reloaded by the running services: the
same processes serve the new policy version, the Deployments are not rolled), `helm rollback`,
then the uninstall steps, after which no kube-steer key is left on any node.

Like tests/e2e/test_install.py, the module has a control plane of its own whose ClusterIPs are
loopback addresses, and the services run from this checkout on their Services' ClusterIPs
(tests/e2e/install_support.py). The chart renders what manifests/ renders (tests/test_chart.py),
so what test_install.py checks of those objects (RBAC, fail-open, admission policies) holds for
the chart too; this module checks what is Helm's own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kits.control_plane import ControlPlane
from kits.prometheus_server import PrometheusServer
from kits.waiting import wait_until
from steer.core.policy import parse_policy
from tests.chart_support import CHART, every_component_values, helm_template, run, tool
from tests.e2e.install_support import (
    HELM_SECTION,
    MANIFESTS,
    NODES,
    NS,
    PAUSE,
    ROOT,
    Installation,
    controller_stopped,
    doc_commands,
    exists_node,
    kubectl,
    loopback_plane,
    missing_commands,
    no_pods_here,
    scorer_stopped,
    scraped_nodes,
    shell,
    shell_env,
    split_section,
    start_controller,
    start_scorer,
    start_webhook,
    steered_and_bound,
    try_shell,
)
from tests.e2e.privilege_support import check_no_identity_widens_its_reach

INSTALL_DOC = ROOT / "docs" / "install.md"
OPERATOR_CRDS = Path(__file__).parent / "fixtures" / "operator-crds.yaml"
TEAM = "team-b"
# Where the scorer writes: labels, annotations and taints under labelPrefix, extended
# resources under the resource prefix (steer/core/policy.py defaults).
PREFIXES = ("kube-steer.github.io/",)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with loopback_plane(tmp_path_factory.mktemp("chart-plane")) as started:
        yield started


def test_helm_lint_passes_with_the_defaults_and_every_component() -> None:
    run("helm", "lint", "--strict", str(CHART))
    every = [f"{key}={value}" for key, value in every_component_values().items()]
    every += ["ocm.enabled=true", "ocm.clusterName=cluster-a", "ocm.hubUser=hub-a"]
    run("helm", "lint", "--strict", str(CHART), "--set", ",".join(every))


def test_helm_template_with_every_component_passes_a_server_side_dry_run(
    plane: ControlPlane,
) -> None:
    docs = helm_template(values=every_component_values())
    kubectl(plane, "apply", "-f", str(OPERATOR_CRDS))
    kubectl(plane, "wait", "--for=condition=Established", "-f", str(OPERATOR_CRDS))
    plane.ensure_namespace(NS)  # a dry run does not create it, and namespaced objects need it
    try:
        out = kubectl(
            plane, "apply", "--server-side", "--dry-run=server", "--field-manager=e2e", "-f", "-",
            input=yaml.safe_dump_all(docs),
        )  # fmt: skip
        assert out.count("(server dry run)") == len(docs), out
    finally:
        # Gone before the install below, which must create it (Helm owns it then).
        kubectl(plane, "delete", "namespace", NS, "--wait=true", "--timeout=60s")


# --- the Helm section of docs/install.md, verbatim -------------------------------------------------


def helm_commands() -> list[str]:
    section, _rest = split_section(INSTALL_DOC.read_text(), HELM_SECTION)
    commands = doc_commands(section)
    missing = missing_commands(commands)
    assert not missing, f"docs/install.md runs {', '.join(missing)}, which `steer` lacks"
    return commands


def policy_version(text: str) -> str:
    return parse_policy(text).version


def kubelet_refresh(run: Installation) -> str:
    """The kubelet's refresh of the mounted policy file; the version of the policy in it."""
    return policy_version(run.installed_policy().read_text())


def edit_policy(run: Installation) -> None:
    """The reader edits the copied policy: here, a new name (so a new version)."""
    path = run.workdir / "my-policy.yaml"
    path.write_text(path.read_text().replace("\n  name: starter\n", "\n  name: my-policy\n"))
    run.facts["generations"] = generations(run)
    run.facts["pids"] = pids(run)


def generations(run: Installation) -> dict[str, int]:
    apps = client.AppsV1Api(run.plane.api_client())
    return {
        name: apps.read_namespaced_deployment(name, NS).metadata.generation
        for name in ("steer-scorer", "steer-webhook")
    }


def pids(run: Installation) -> dict[str, int]:
    assert run.webhook is not None and run.scorer is not None
    assert run.webhook.running and run.scorer.running
    return {"webhook": run.webhook.process.pid, "scorer": run.scorer.process.pid}


def served_versions(run: Installation) -> tuple[str, str]:
    """The policy version the scorer reports and the one the webhook steers a pod with."""
    assert run.scorer is not None
    scorer = run.scorer.get("/readyz")["policy"]["version"]
    probe = {
        "metadata": {"name": "version-probe"},
        "spec": {"containers": [{"name": "c", "image": PAUSE}]},
    }
    made = client.CoreV1Api(run.plane.api_client()).create_namespaced_pod(
        TEAM, probe, dry_run="All"
    )
    trace = json.loads((made.metadata.annotations or {}).get("kube-steer.github.io/trace", "{}"))
    return scorer, str(trace.get("policy"))


def hot_reloaded(run: Installation) -> None:
    """After `helm upgrade` / `helm rollback`: the ConfigMap changed, the Deployments did not
    (no rollout, so no pod restarts), and once the kubelet refreshes the file the same
    processes serve the new version."""
    assert generations(run) == run.facts["generations"], "the Deployments were rolled"
    version = kubelet_refresh(run)
    assert version != run.facts["version"], "the policy did not change"
    wait_until(
        f"both services serve {version}",
        lambda: served_versions(run) == (version, version) or None,
        timeout=30,
        interval=0.5,
    )
    assert pids(run) == run.facts["pids"], "a service was restarted"
    run.facts["version"] = version


def upgraded(run: Installation) -> None:
    assert policy_version(run.config_map_policy()).startswith("my-policy@")
    hot_reloaded(run)


def rolled_back(run: Installation) -> None:
    assert policy_version(run.config_map_policy()).startswith("starter@")
    hot_reloaded(run)


def installed(run: Installation) -> None:
    no_pods_here(run.plane)
    # The release is Helm's: its objects carry the release's annotations.
    ns = client.CoreV1Api(run.plane.api_client()).read_namespace(NS)
    assert (ns.metadata.annotations or {}).get("meta.helm.sh/release-name") == "kube-steer"
    run.facts["version"] = policy_version(run.config_map_policy())
    # The notes name the next steps, and every `steer` command in them exists.
    notes = run.outputs["helm install kube-steer charts/kube-steer"].split("NOTES:", 1)[1]
    lines = [line.split("#", 1)[0].strip() for line in notes.splitlines()]
    steps = [line for line in lines if line.startswith("steer ")]
    assert {s.split()[1] for s in steps} == {"scorer"}, notes
    assert not missing_commands(steps), missing_commands(steps)
    # `kubectl steer` is the same command tree (launcher/kubectl.py): explain, and the page.
    plugin = [line.removeprefix("kubectl ") for line in lines if line.startswith("kubectl steer ")]
    assert {s.split()[1] for s in plugin} == {"explain", "page"}, notes
    assert not missing_commands(plugin), missing_commands(plugin)
    assert "kube-steer.github.io/enabled=true" in notes and "http://127.0.0.1:8001/" in notes


def scorer_started(run: Installation) -> None:
    """start_scorer, and the scorer wrote its keys on every node (so the cleanup at the end
    has something to remove)."""
    start_scorer(run)
    nodes = client.CoreV1Api(run.plane.api_client()).list_node().items
    assert all(kube_steer_keys(n) for n in nodes if n.metadata.name in NODES)


def workload_steered(run: Installation) -> None:
    core = client.CoreV1Api(run.plane.api_client())
    pods = wait_until(
        "web pods steered and bound",
        lambda: steered_and_bound(core, TEAM, "app=web"),
        timeout=60,
        interval=0.2,
    )
    assert {p.spec.node_name for p in pods} <= set(NODES)


INSTEAD: dict[str, Callable[[Installation], None]] = {
    "kubectl -n kube-steer rollout status deployment/steer-controller --timeout=5m": (
        start_controller
    ),
    "kubectl -n kube-steer rollout status deployment/steer-webhook --timeout=5m": start_webhook,
    "kubectl -n kube-steer rollout status deployment/steer-scorer --timeout=5m": (
        lambda run: (scorer_started(run), check_no_identity_widens_its_reach(run.plane))
    ),
}
AFTER: dict[str, Callable[[Installation], None]] = {
    "helm install kube-steer charts/kube-steer": installed,
    f"kubectl -n {TEAM} create deployment web --image={PAUSE} --replicas=2": workload_steered,
    "cp manifests/policy/starter-policy.yaml my-policy.yaml": edit_policy,
    "helm upgrade kube-steer charts/kube-steer --reuse-values --set-file policy.inline=my-policy.yaml": upgraded,
    "helm rollback kube-steer 1": rolled_back,
    "kubectl -n kube-steer scale deployment steer-scorer --replicas=0": scorer_stopped,
    "kubectl -n kube-steer scale deployment steer-controller --replicas=0": controller_stopped,
}


# Run before the command. No kubelet runs here, so a pod of the release that was bound before
# the zero-pod quota landed (`installed` applies it just after `helm install`) would stay
# Terminating forever and `helm uninstall --wait` with it: what the kubelet would confirm,
# the test does (deleted with grace period 0).
def pods_gone(run: Installation) -> None:
    run.plane.delete_pods(NS)


BEFORE: dict[str, Callable[[Installation], None]] = {"helm uninstall kube-steer --wait": pods_gone}
EVENTUALLY = (f"kubectl -n {TEAM} run steer-probe",)


def kube_steer_keys(node: Any) -> list[str]:
    keys = [
        *(node.metadata.labels or {}),
        *(node.metadata.annotations or {}),
        *(t.key for t in node.spec.taints or []),
        *(node.status.capacity or {}),
        *(node.status.allocatable or {}),
    ]
    return sorted({k for k in keys if k.startswith(PREFIXES)})


def test_the_helm_section_of_install_md_runs_verbatim(plane: ControlPlane, tmp_path: Path) -> None:
    commands = helm_commands()
    assert set(INSTEAD) | set(AFTER) | set(BEFORE) <= set(commands), (
        "docs/install.md changed: update the test"
    )
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    for name in ("manifests", "charts"):  # the commands run from the repository's top
        (workdir / name).symlink_to(ROOT / name)
    assert (workdir / "manifests").resolve() == MANIFESTS
    core = client.CoreV1Api(plane.api_client())
    prometheus: PrometheusServer
    with contextlib.ExitStack() as stack:
        prometheus = stack.enter_context(scraped_nodes())
        run = Installation(
            plane,
            workdir,
            prometheus,
            shell_env(plane, tmp_path / "bin", tmp_path / "config", {"helm": tool("helm")}),
            stack,
        )
        stack.callback(lambda: [core.delete_node(n) for n in NODES if exists_node(core, n)])
        stack.callback(lambda: plane.delete_pods(TEAM))
        for command in commands:
            if command in INSTEAD:
                INSTEAD[command](run)
                continue
            if command in BEFORE:
                BEFORE[command](run)
            if command.startswith(EVENTUALLY):
                run.outputs[command] = wait_until(
                    command,
                    lambda command=command: try_shell(run, command),
                    timeout=30,
                    interval=0.2,
                )
                assert json.loads(run.outputs[command])["policy"].startswith("starter@")
            else:
                run.outputs[command] = shell(run, command)
            if command in AFTER:
                AFTER[command](run)

        # Uninstalled: nothing of kube-steer is left, and no node carries any of its keys.
        wait_until(
            "the kube-steer namespace is gone",
            lambda: not any(n.metadata.name == NS for n in core.list_namespace().items),
            timeout=60,
            interval=0.5,
        )
        rbac = client.RbacAuthorizationV1Api(plane.api_client())
        assert not [
            r for r in rbac.list_cluster_role().items if r.metadata.name.startswith("steer-")
        ]
        admission = client.AdmissionregistrationV1Api(plane.api_client())
        assert not admission.list_mutating_webhook_configuration().items
        assert not admission.list_validating_webhook_configuration().items
        assert not admission.list_validating_admission_policy().items
        for node in core.list_node().items:
            if node.metadata.name in NODES:
                assert kube_steer_keys(node) == [], node.metadata.name
        # Helm keeps no record of it either (no --keep-history).
        assert shell(run, "helm list --all-namespaces --short").split() == []

"""The stock kube-scheduler v1.36 with kube-steer's profiles (manifests/scheduler/profiles.yaml).

What is claimed about the scheduler is measured on the real binary: that it accepts the shipped
profiles and rejects broken copies; that pods naming steer-spread and steer-binpack are bound
and a pod naming an unknown scheduler is not; that the webhook's binary-weighted preference
terms put every pod of the steer-spread profile on a node of the top score bucket (where the
default profile does not); and that steer-binpack packs GPU pods onto one node.

Every test that schedules pods confines them to its own nodes with a required term on a label
only those nodes carry, so a node another test leaves behind cannot receive them. Ranking
claims use the preference terms built by the project's own code from examples/policy.yaml.
"""

from __future__ import annotations

import copy
import random
import re
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kits.control_plane import ControlPlane, ControlPlaneError
from kits.waiting import wait_until
from steer.core.policy import parse_policy
from steer.core.steering import GPU_RESOURCE, class_preferences, classify_pod, composite_key
from tests.test_scheduler_profiles import DEFAULT_FILTER_ORDER

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "manifests" / "scheduler" / "profiles.yaml"
POLICY = parse_policy((ROOT / "examples" / "policy.yaml").read_text())
STEP = POLICY.spec.scoring.step
BUCKETS = list(range(0, 101, STEP))
SET_KEY = "e2e.kube-steer.github.io/node-set"
ZONES = ("zone-a", "zone-b", "zone-c", "zone-d")

GPU_POD_SPEC = {"containers": [{"name": "c", "resources": {"limits": {GPU_RESOURCE: "1"}}}]}
GPU_CLASS = classify_pod(POLICY, GPU_POD_SPEC)
assert GPU_CLASS is not None and GPU_CLASS.scheduler_profile == "steer-binpack"
SCORE_KEY = composite_key(POLICY, None)  # kube-steer.github.io/score
GPU_SCORE_KEY = composite_key(POLICY, GPU_CLASS)  # kube-steer.github.io/score-class-gpu


def preferred_terms(pod_class: Any = None) -> list[dict[str, Any]]:
    """What the webhook injects as preferred terms (the same function builds its patch)."""
    return [t.to_k8s() for t in class_preferences(POLICY, pod_class)]


# --- helpers ---------------------------------------------------------------------------------


def pod_template(
    node_set: str,
    scheduler: str,
    *,
    labels: Mapping[str, str],
    preferred: Sequence[Mapping[str, Any]] = (),
    requests: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod (or template) confined to the nodes of `node_set`, with the given preferences."""
    resources = dict(requests or {"cpu": "100m", "memory": "64Mi"})
    node_affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": SET_KEY, "operator": "In", "values": [node_set]}]}
            ]
        }
    }
    if preferred:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            dict(t) for t in preferred
        ]
    return {
        "metadata": {"labels": dict(labels)},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "affinity": {"nodeAffinity": node_affinity},
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        },
    }


def bare_pod(name: str, template: Mapping[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(dict(template))
    pod["metadata"]["name"] = name
    return pod


def wait_bound(
    plane: ControlPlane, namespace: str, names: Sequence[str], timeout: float = 30.0
) -> dict[str, str]:
    bound = plane.wait_for_bindings(namespace, names, timeout)
    missing = sorted(n for n, node in bound.items() if not node)
    assert not missing, f"pods not bound after {timeout}s: {missing}"
    return {n: str(node) for n, node in bound.items()}


def wait_pods_gone(
    core: client.CoreV1Api, namespace: str, selector: str, timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not core.list_namespaced_pod(namespace, label_selector=selector).items:
            return
        time.sleep(0.1)
    raise AssertionError(f"pods {selector} in {namespace} still exist after {timeout}s")


def metric_samples(text: str, name: str) -> dict[str, float]:
    """Samples of one metric from Prometheus text: labels text → value."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)$", line)
        if match:
            out[match.group(1) or ""] = float(match.group(2))
    return out


@pytest.fixture
def node_set(make_node: Callable[..., dict[str, Any]]) -> Callable[..., list[str]]:
    """node_set(set_id, count, labels=None, **add_node kwargs) -> node names `<set_id>-NN`,
    labelled SET_KEY=set_id and spread over ZONES; `pod_template(set_id, ...)` confines pods
    to them. The nodes go at teardown (make_node)."""

    def make(
        set_id: str, count: int, labels: Mapping[str, str] | None = None, **kwargs: Any
    ) -> list[str]:
        names = []
        for i in range(count):
            name = f"{set_id}-{i:02d}"
            make_node(
                name,
                zone=ZONES[i % len(ZONES)],
                labels={SET_KEY: set_id, **(labels or {})},
                **kwargs,
            )
            names.append(name)
        return names

    return make


@pytest.fixture
def restore_scheduler(control_plane: ControlPlane) -> Iterator[None]:
    """Whatever a test does to the scheduler, the session's scheduler runs profiles.yaml after."""
    try:
        yield
    finally:
        control_plane.restart_scheduler(PROFILES)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# --- 6. the shipped profiles on the real scheduler ---------------------------------------------


def test_profiles_file_is_accepted_and_serves_three_profiles(
    control_plane: ControlPlane, restore_scheduler: None
) -> None:
    log_file = control_plane.components["kube-scheduler"].log
    offset = log_file.stat().st_size
    component = control_plane.restart_scheduler(PROFILES)
    assert component.running
    samples = metric_samples(control_plane.scheduler_metrics(), "scheduler_plugin_evaluation_total")
    profiles = {m.group(1) for key in samples if (m := re.search(r'profile="([^"]+)"', key))}
    assert profiles == {"default-scheduler", "steer-spread", "steer-binpack"}
    # Since the restart (the old process's shutdown lines included): the scheduler overrides
    # its multiPoint entry once per plugin an extension point of a steer profile lists (the
    # NodeAffinity weight, the Filter order), and nothing else.
    with log_file.open("rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    overrides = Counter(
        re.findall(
            r'"MultiPoint plugin is explicitly re-configured; overriding" plugin="(\w+)"', text
        )
    )
    listed = Counter(
        plugin["name"]
        for profile in yaml.safe_load(PROFILES.read_text())["profiles"]
        for point in (profile.get("plugins") or {}).values()
        for plugin in point.get("enabled", ())
    )
    assert listed["NodeAffinity"] == 4 and listed["PodTopologySpread"] == 2, listed
    assert overrides == listed, text[-2000:]


def _broken(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    config = yaml.safe_load(PROFILES.read_text())
    edit(config)
    return config


def _profile(config: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in config["profiles"] if p["schedulerName"] == name)


def _node_affinity_entry(config: dict[str, Any], name: str) -> dict[str, Any]:
    entries = _profile(config, name)["plugins"]["score"]["enabled"]
    return next(e for e in entries if e["name"] == "NodeAffinity")


BROKEN_COPIES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "unknown-plugin": (
        lambda c: _node_affinity_entry(c, "steer-spread").update(name="NodeAfinity"),
        'ScorePlugin "NodeAfinity" does not exist',
    ),
    "negative-weight": (
        lambda c: _node_affinity_entry(c, "steer-binpack").update(weight=-50),
        "steer-binpack: score plugins: total score of Score plugins could overflow",
    ),
    "duplicate-profile-name": (
        lambda c: _profile(c, "steer-binpack").update(schedulerName="steer-spread"),
        "profiles[2].schedulerName: Duplicate value",
    ),
    "unknown-scoring-strategy": (
        lambda c: _profile(c, "steer-binpack")["pluginConfig"][0]["args"]["scoringStrategy"].update(
            type="MostAlocated"
        ),
        'scoringStrategy.type: Unsupported value: "MostAlocated"',
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_COPIES))
def test_broken_profiles_are_rejected_by_the_scheduler(
    control_plane: ControlPlane, restore_scheduler: None, case: str
) -> None:
    edit, expected = BROKEN_COPIES[case]
    with pytest.raises(ControlPlaneError) as raised:
        control_plane.restart_scheduler(_broken(edit))
    # The scheduler's own reason, from its log (klog escapes the quotes).
    assert expected in str(raised.value).replace('\\"', '"')


def test_weight_zero_is_not_an_error_for_the_scheduler(
    control_plane: ControlPlane, restore_scheduler: None
) -> None:
    """Pinned oddity: the scheduler accepts `weight: 0` and silently uses 1 (framework
    getScoreWeights), which is *weaker* than the default profile's 2. Only the project's static
    check (tests/test_scheduler_profiles.py) can catch that edit, not the scheduler."""
    config = _broken(lambda c: _node_affinity_entry(c, "steer-spread").update(weight=0))
    assert control_plane.restart_scheduler(config).running


# --- 7. pods reach the steer profiles; an unknown schedulerName is never bound -----------------


def test_pods_of_each_profile_are_bound_and_an_unknown_scheduler_pends(
    control_plane: ControlPlane,
    core: client.CoreV1Api,
    make_namespace: Callable[..., str],
    node_set: Callable[..., list[str]],
) -> None:
    set_id = new_id("sched-prof")
    nodes = node_set(set_id, 2, cpu="16", memory="64Gi", gpus=8)
    ns = make_namespace(prefix="sched")
    before = metric_samples(control_plane.scheduler_metrics(), "scheduler_schedule_attempts_total")

    def template(scheduler: str) -> dict[str, Any]:
        return pod_template(set_id, scheduler, labels={"app": "prof"})

    # The unknown one first: by the time the others are bound it has had its chance.
    core.create_namespaced_pod(ns, bare_pod("nobody", template("no-such-scheduler")))
    wanted = {"spread": "steer-spread", "binpack": "steer-binpack", "default": "default-scheduler"}
    for name, scheduler in wanted.items():
        core.create_namespaced_pod(ns, bare_pod(name, template(scheduler)))
    bound = wait_bound(control_plane, ns, list(wanted))
    assert set(bound.values()) <= set(nodes)

    # Give the unknown-scheduler pod two more seconds than the others needed.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        pending = core.read_namespaced_pod("nobody", ns)
        assert pending.spec.node_name is None
        time.sleep(0.25)
    assert pending.status.phase == "Pending"
    # No profile picked it up: the scheduler never even wrote a PodScheduled condition.
    assert not [c for c in pending.status.conditions or () if c.type == "PodScheduled"]

    after = metric_samples(control_plane.scheduler_metrics(), "scheduler_schedule_attempts_total")
    for scheduler in wanted.values():
        key = f'{{profile="{scheduler}",result="scheduled"}}'
        assert after.get(key, 0) >= before.get(key, 0) + 1, (scheduler, after)
    assert not [k for k in after if "no-such-scheduler" in k]


# --- 8. the ranking claim, measured --------------------------------------------------------------

RANK_NODES = 16
RANK_TRIALS = 8
RANK_REPLICAS = 6


def _run_replicaset(
    control_plane: ControlPlane,
    apps: client.AppsV1Api,
    core: client.CoreV1Api,
    ns: str,
    name: str,
    template: dict[str, Any],
    replicas: int,
) -> list[str]:
    """Create a ReplicaSet, wait for all its pods to be bound, return their nodes, clean up."""
    selector = {"app": name}
    template["metadata"]["labels"] = selector
    apps.create_namespaced_replica_set(
        ns,
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "template": template,
            },
        },
    )
    label_selector = f"app={name}"
    deadline = time.monotonic() + 30
    nodes: list[str] = []
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(ns, label_selector=label_selector).items
        nodes = [p.spec.node_name for p in pods if p.spec.node_name]
        if len(pods) == replicas and len(nodes) == replicas:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"ReplicaSet {name}: only {len(nodes)}/{replicas} pods bound")
    apps.delete_namespaced_replica_set(name, ns, propagation_policy="Orphan")
    control_plane.delete_pods(ns, label_selector)
    wait_pods_gone(core, ns, label_selector)
    return nodes


def test_steer_spread_puts_every_steered_pod_on_the_top_bucket(
    control_plane: ControlPlane,
    api: client.ApiClient,
    core: client.CoreV1Api,
    make_namespace: Callable[..., str],
    node_set: Callable[..., list[str]],
    record_property: Callable[[str, object], None],
) -> None:
    """Random score labels (seeded), ReplicaSets whose template carries the webhook's terms: with
    steer-spread every replica lands on a node of the top bucket, although the default
    topology spreading (weight 2, ReplicaSet pods) pulls the other way. The default profile
    (NodeAffinity weight 2) is measured for contrast, not asserted."""
    apps = client.AppsV1Api(api)
    set_id = new_id("rank")
    nodes = node_set(set_id, RANK_NODES, cpu="64", memory="256Gi")
    ns = make_namespace(prefix="rank")
    terms = preferred_terms()
    # Score terms 10/20/40/80, then "not reserved for GPU pods" 100 + 10 (equal on these nodes).
    assert [t["weight"] for t in terms] == [10, 20, 40, 80, 100, 10]
    on_top: dict[str, list[bool]] = {"steer-spread": [], "default-scheduler": []}
    for trial in range(RANK_TRIALS):
        rng = random.Random(1000 + trial)
        scores = {node: rng.choice(BUCKETS) for node in nodes}
        for node, score in scores.items():
            core.patch_node(node, {"metadata": {"labels": {SCORE_KEY: str(score)}}})
        top = max(scores.values())
        top_nodes = {n for n, s in scores.items() if s == top}
        for scheduler, results in on_top.items():
            template = pod_template(set_id, scheduler, labels={}, preferred=terms)
            placed = _run_replicaset(
                control_plane, apps, core, ns, f"t{trial}-{scheduler[:7]}", template, RANK_REPLICAS
            )
            results.extend(node in top_nodes for node in placed)
            print(
                f"trial {trial}: top bucket {top} on {len(top_nodes)} node(s); {scheduler}: "
                f"{Counter(scores[n] for n in placed)}"
            )
    rates = {s: sum(r) / len(r) for s, r in on_top.items()}
    for scheduler, rate in rates.items():
        record_property(f"top_bucket_rate[{scheduler}]", round(rate, 3))
    print(f"top-bucket rate over {RANK_TRIALS * RANK_REPLICAS} pods each: {rates}")
    assert rates["steer-spread"] == 1.0, on_top["steer-spread"]


def test_bare_steered_pods_follow_a_changed_score_at_once(
    control_plane: ControlPlane,
    core: client.CoreV1Api,
    make_namespace: Callable[..., str],
    node_set: Callable[..., list[str]],
) -> None:
    """One pod at a time, the best node moves: a relabel is all it takes for the next pod."""
    set_id = new_id("follow")
    nodes = node_set(set_id, 6, cpu="64", memory="256Gi")
    ns = make_namespace(prefix="follow")
    template = pod_template(
        set_id, "steer-spread", labels={"app": "follow"}, preferred=preferred_terms()
    )
    rng = random.Random(7)
    for i in range(6):
        best = nodes[i]
        for node in nodes:
            score = 100 if node == best else rng.choice(BUCKETS[:-1])
            core.patch_node(node, {"metadata": {"labels": {SCORE_KEY: str(score)}}})
        name = f"follow-{i}"
        core.create_namespaced_pod(ns, bare_pod(name, template))
        assert wait_bound(control_plane, ns, [name])[name] == best


# --- 9. steer-binpack packs GPU pods ---------------------------------------------------------------

GPU_NODES = 4
GPU_PODS = 6
GPU_REQUESTS = {"cpu": "500m", "memory": "1Gi", GPU_RESOURCE: "1"}


def _place_gpu_pods(
    control_plane: ControlPlane,
    core: client.CoreV1Api,
    ns: str,
    set_id: str,
    scheduler: str,
) -> list[str]:
    """GPU pods one after the other (each bound before the next), their nodes in order."""
    template = pod_template(
        set_id,
        scheduler,
        labels={"app": f"gpu-{scheduler}"},
        preferred=preferred_terms(GPU_CLASS),
        requests=GPU_REQUESTS,
    )
    placed = []
    for i in range(GPU_PODS):
        name = f"gpu-{scheduler}-{i}"
        core.create_namespaced_pod(ns, bare_pod(name, template))
        placed.append(wait_bound(control_plane, ns, [name])[name])
    control_plane.delete_pods(ns, f"app=gpu-{scheduler}")
    wait_pods_gone(core, ns, f"app=gpu-{scheduler}")
    return placed


def test_steer_binpack_packs_gpu_pods_where_other_profiles_spread(
    control_plane: ControlPlane,
    core: client.CoreV1Api,
    make_namespace: Callable[..., str],
    node_set: Callable[..., list[str]],
    record_property: Callable[[str, object], None],
) -> None:
    set_id = new_id("gpu")
    # Equal, empty 8-GPU nodes with the same GPU score: only resource scoring can tell them apart.
    node_set(set_id, GPU_NODES, cpu="32", memory="128Gi", gpus=8, labels={GPU_SCORE_KEY: "50"})
    ns = make_namespace(prefix="gpu")
    spread: dict[str, int] = {}
    for scheduler in ("steer-binpack", "steer-spread", "default-scheduler"):
        placed = _place_gpu_pods(control_plane, core, ns, set_id, scheduler)
        spread[scheduler] = len(set(placed))
        record_property(f"gpu_nodes_used[{scheduler}]", spread[scheduler])
        print(f"{scheduler}: {GPU_PODS} one-GPU pods on {spread[scheduler]} node(s): {placed}")
    # Measured over 7 runs: steer-binpack always 1 node; steer-spread and default-scheduler 3
    # or 4 nodes (LeastAllocated on cpu+memory ignores the GPU and prefers emptier nodes).
    assert spread["steer-binpack"] == 1
    assert spread["steer-spread"] >= 2
    assert spread["default-scheduler"] >= 2


# --- 10. the steer profiles' Filter order ---------------------------------------------------------


def test_the_scheduler_defaults_the_filter_plugins_the_profile_test_models(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """tests/test_scheduler_profiles.py models the order of the default Filter plugins; the
    binary's defaulted configuration (`--write-config-to`) lists its multiPoint plugins in that
    order, and the steer profiles' `filter.enabled` as written."""
    written = tmp_path / "defaulted.yaml"
    done = subprocess.run(
        [
            str(control_plane.bin_dir / "kube-scheduler"),
            f"--config={control_plane.scheduler_config}",
            f"--write-config-to={written}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    defaulted = {p["schedulerName"]: p for p in yaml.safe_load(written.read_text())["profiles"]}
    for name, profile in defaulted.items():
        multi_point = [p["name"] for p in profile["plugins"]["multiPoint"]["enabled"]]
        filters = [n for n in multi_point if n in DEFAULT_FILTER_ORDER]
        assert filters == list(DEFAULT_FILTER_ORDER), (name, multi_point)
    shipped = {p["schedulerName"]: p for p in yaml.safe_load(PROFILES.read_text())["profiles"]}
    for name in ("steer-spread", "steer-binpack"):
        enabled = defaulted[name]["plugins"]["filter"]["enabled"]
        assert [p["name"] for p in enabled] == [
            p["name"] for p in shipped[name]["plugins"]["filter"]["enabled"]
        ]


def _unschedulable_message(core: client.CoreV1Api, ns: str, name: str) -> str:
    """The scheduler's reasons for a pod it cannot place (its PodScheduled condition), without
    the preemption part."""

    def message() -> str | None:
        for condition in core.read_namespaced_pod(name, ns).status.conditions or ():
            if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                return str(condition.message).split(" preemption:")[0]
        return None

    return wait_until(f"{ns}/{name} Unschedulable", message, timeout=30)


def _chain_replica(set_id: str, scheduler: str, app: str, name: str, cpu: str) -> dict[str, Any]:
    """A replica of the chain `app=<app>`, spread over zones by a hard rule."""
    template = pod_template(
        set_id, scheduler, labels={"app": app}, requests={"cpu": cpu, "memory": "64Mi"}
    )
    template["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
        }
    ]
    return bare_pod(name, template)


def test_steer_profiles_reject_a_node_on_its_spread_rule_before_its_resources(
    control_plane: ControlPlane,
    core: client.CoreV1Api,
    make_namespace: Callable[..., str],
    node_set: Callable[..., list[str]],
) -> None:
    """The scheduler names a node's first failing Filter plugin. Two nodes in two zones, one
    replica of a hard zone-spread chain bound; the next replica asks for more CPU than either
    node has. Under steer-spread the node of the bound replica fails on the spread rule, which
    that profile runs first, and only the other node reaches NodeResourcesFit; default-scheduler
    reports both nodes on CPU. The same nodes are infeasible either way."""
    set_id = new_id("order")
    node_set(set_id, 2, cpu="4", memory="16Gi")
    ns = make_namespace(prefix="order")
    messages: dict[str, str] = {}
    for scheduler in ("steer-spread", "default-scheduler"):
        app = f"chain-{scheduler[:7]}"
        core.create_namespaced_pod(ns, _chain_replica(set_id, scheduler, app, f"{app}-0", "100m"))
        wait_bound(control_plane, ns, [f"{app}-0"])
        core.create_namespaced_pod(ns, _chain_replica(set_id, scheduler, app, f"{app}-1", "8"))
        messages[scheduler] = _unschedulable_message(core, ns, f"{app}-1")
        control_plane.delete_pods(ns, f"app={app}")
        wait_pods_gone(core, ns, f"app={app}")
    print(messages)
    assert "1 Insufficient cpu" in messages["steer-spread"], messages
    assert "1 node(s) didn't match pod topology spread constraints" in messages["steer-spread"]
    assert "2 Insufficient cpu" in messages["default-scheduler"], messages
    assert "topology spread" not in messages["default-scheduler"], messages

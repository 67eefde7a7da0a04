"""The scheduler profiles kube-steer ships: schema, upstream rules, and the facts the design needs.

No kube-scheduler binary runs here, so the files are checked against a compact copy of the
kubescheduler.config.k8s.io/v1 schema (field names and types as in k8s.io/kube-scheduler
config/v1 types.go and types_pluginargs.go; extra fields forbidden, no type coercion), then
against the rules upstream validation.go and validation_pluginargs.go enforce, then against
the score weights the scheduler will actually use after merging with its default plugins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from steer.core.device_counter import device_counters
from steer.core.policy import SchedulerProfiles, parse_policy

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "manifests" / "scheduler" / "profiles.yaml"
SECOND_SCHEDULER = ROOT / "manifests" / "scheduler" / "second-scheduler.yaml"
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"

API_VERSION = "kubescheduler.config.k8s.io/v1"
INT32_MAX = 2**31 - 1
STEER_PROFILES = ("steer-spread", "steer-binpack")

# The weight window of docs/scheduler-profiles.md ("Why profiles are needed"): weight 25 already
# put every steered pod on the top bucket; above ~120 NodeAffinity would outweigh
# PreferNoSchedule taints and users' own preferences.
NODE_AFFINITY_WEIGHT = 50
MIN_EFFECTIVE_WEIGHT, MAX_SAFE_WEIGHT = 25, 120

# pkg/scheduler/apis/config/v1/default_plugins.go: the score plugins of the default multiPoint
# set and their weights.
DEFAULT_SCORE_WEIGHTS = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodeResourcesFit": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}

# The plugins of the same multiPoint set that have a Filter extension, in its order as the
# v1.36.2 binary defaults it (`kube-scheduler --write-config-to`; tests/e2e/test_scheduler.py
# checks this list against it).
DEFAULT_FILTER_ORDER = (
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
    "NodeDeclaredFeatures",
)


# --- compact kubescheduler.config.k8s.io/v1 schema -------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Plugin(_Strict):
    name: str = Field(min_length=1)
    # *int32; only score plugins use it. 0 or unset means 1 (framework getScoreWeights).
    weight: int | None = Field(default=None, ge=0, le=INT32_MAX)


class PluginSet(_Strict):
    enabled: list[Plugin] | None = None
    disabled: list[Plugin] | None = None


class Plugins(_Strict):
    preEnqueue: PluginSet | None = None
    queueSort: PluginSet | None = None
    preFilter: PluginSet | None = None
    filter: PluginSet | None = None
    postFilter: PluginSet | None = None
    preScore: PluginSet | None = None
    score: PluginSet | None = None
    reserve: PluginSet | None = None
    permit: PluginSet | None = None
    preBind: PluginSet | None = None
    bind: PluginSet | None = None
    postBind: PluginSet | None = None
    multiPoint: PluginSet | None = None


class ResourceSpec(_Strict):
    name: str = Field(min_length=1)
    # int64; validateResources: "resource weight of <name> not in valid range (0, 100]".
    weight: int = Field(ge=1, le=100)


class UtilizationShapePoint(_Strict):
    utilization: int = Field(ge=0, le=100)
    score: int = Field(ge=0, le=10)


class RequestedToCapacityRatioParam(_Strict):
    shape: list[UtilizationShapePoint] | None = None


class ScoringStrategy(_Strict):
    type: Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]
    resources: list[ResourceSpec] | None = None
    requestedToCapacityRatio: RequestedToCapacityRatioParam | None = None

    @model_validator(mode="after")
    def _ratio_only_with_its_type(self) -> ScoringStrategy:
        if (self.type == "RequestedToCapacityRatio") != (self.requestedToCapacityRatio is not None):
            raise ValueError(
                "requestedToCapacityRatio: set exactly when type is RequestedToCapacityRatio"
            )
        return self


class NodeResourcesFitArgs(_Strict):
    apiVersion: Literal["kubescheduler.config.k8s.io/v1"]
    kind: Literal["NodeResourcesFitArgs"]
    ignoredResources: list[str] | None = None
    ignoredResourceGroups: list[str] | None = None
    scoringStrategy: ScoringStrategy


# The scheduler decodes pluginConfig[].args as kind `<name>Args`; only the ones used are modelled.
PLUGIN_ARGS: dict[str, type[_Strict]] = {"NodeResourcesFit": NodeResourcesFitArgs}


class PluginConfig(_Strict):
    name: str = Field(min_length=1)
    args: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _args_match_plugin(self) -> PluginConfig:
        model = PLUGIN_ARGS.get(self.name)
        if model is None:
            raise ValueError(f"no schema here for {self.name}Args; add one before using it")
        model.model_validate(self.args or {})
        return self

    def typed_args(self) -> Any:
        return PLUGIN_ARGS[self.name].model_validate(self.args or {})


class KubeSchedulerProfile(_Strict):
    schedulerName: str = Field(min_length=1)
    percentageOfNodesToScore: int | None = Field(default=None, ge=0, le=100)
    plugins: Plugins | None = None
    pluginConfig: list[PluginConfig] | None = None

    @model_validator(mode="after")
    def _plugin_config_unique(self) -> KubeSchedulerProfile:
        names = [c.name for c in self.pluginConfig or ()]
        if len(names) != len(set(names)):
            raise ValueError(f"pluginConfig: duplicate plugin names in {names}")
        return self


class LeaderElectionConfiguration(_Strict):
    leaderElect: bool | None = None
    leaseDuration: str | None = None
    renewDeadline: str | None = None
    retryPeriod: str | None = None
    resourceLock: str | None = None
    resourceName: str | None = None
    resourceNamespace: str | None = None


class ClientConnectionConfiguration(_Strict):
    kubeconfig: str | None = None
    acceptContentTypes: str | None = None
    contentType: str | None = None
    qps: float | None = None
    burst: int | None = None


class KubeSchedulerConfiguration(_Strict):
    apiVersion: Literal["kubescheduler.config.k8s.io/v1"]
    kind: Literal["KubeSchedulerConfiguration"]
    parallelism: int | None = Field(default=None, ge=1, le=INT32_MAX)
    leaderElection: LeaderElectionConfiguration | None = None
    clientConnection: ClientConnectionConfiguration | None = None
    enableProfiling: bool | None = None
    enableContentionProfiling: bool | None = None
    percentageOfNodesToScore: int | None = Field(default=None, ge=0, le=100)
    podInitialBackoffSeconds: int | None = Field(default=None, ge=1)
    podMaxBackoffSeconds: int | None = Field(default=None, ge=1)
    profiles: list[KubeSchedulerProfile] = Field(min_length=1)
    delayCacheUntilActive: bool | None = None

    @model_validator(mode="after")
    def _upstream_rules(self) -> KubeSchedulerConfiguration:
        names = [p.schedulerName for p in self.profiles]
        if len(names) != len(set(names)):
            raise ValueError(f"profiles: duplicate schedulerName in {names}")
        # One scheduling queue: every profile must sort it the same way.
        sorts = {repr(p.plugins.queueSort if p.plugins else None) for p in self.profiles}
        if len(sorts) > 1:
            raise ValueError("profiles[].plugins.queueSort: must be the same for all profiles")
        election = self.leaderElection
        if election and election.leaderElect and election.resourceLock not in (None, "leases"):
            raise ValueError('leaderElection.resourceLock: value must be "leases"')
        return self

    def profile(self, name: str) -> KubeSchedulerProfile:
        for p in self.profiles:
            if p.schedulerName == name:
                return p
        raise AssertionError(
            f"profile {name!r} missing; have {[p.schedulerName for p in self.profiles]}"
        )


def effective_score_weights(profile: KubeSchedulerProfile) -> dict[str, int]:
    """The weight each score plugin runs with once the scheduler merges in its defaults.

    Mirrors mergePluginSet + getScoreWeights: default multiPoint plugins minus the disabled
    ones, then `score.enabled` entries win over multiPoint (a default plugin listed there takes
    the new weight); a missing or zero weight counts as 1.
    """
    plugins = profile.plugins or Plugins()
    multi = plugins.multiPoint or PluginSet()
    score = plugins.score or PluginSet()
    disabled = {p.name for p in (*(multi.disabled or ()), *(score.disabled or ()))}
    weights = {} if "*" in disabled else dict(DEFAULT_SCORE_WEIGHTS)
    for name in disabled:
        weights.pop(name, None)
    for p in (*(multi.enabled or ()), *(score.enabled or ())):
        weights[p.name] = p.weight or 1
    return weights


def effective_filter_order(profile: KubeSchedulerProfile) -> list[str]:
    """The order the scheduler runs the profile's Filter plugins in.

    Mirrors expandMultiPointPlugins (pkg/scheduler/framework/runtime/framework.go): a multiPoint
    plugin also listed under `filter.enabled` is an override and runs first, in the listed
    order; the other multiPoint plugins follow in their own order; disabled ones are dropped
    ("*" drops every multiPoint one).
    """
    plugins = profile.plugins or Plugins()
    listed = [p.name for p in (plugins.filter.enabled or ())] if plugins.filter else []
    disabled = {p.name for p in (plugins.filter.disabled or ())} if plugins.filter else set()
    default = [] if "*" in disabled else [n for n in DEFAULT_FILTER_ORDER if n not in disabled]
    overrides = [n for n in listed if n in default]
    return [
        *overrides,
        *(n for n in default if n not in overrides),
        *(n for n in listed if n not in default),
    ]


# --- loading ----------------------------------------------------------------------------------


def _profiles_raw() -> dict[str, Any]:
    doc = yaml.safe_load(PROFILES.read_text())
    assert isinstance(doc, dict)
    return doc


def _second_scheduler_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(SECOND_SCHEDULER.read_text()) if d]


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, (
        f"expected one {kind} {name or ''} in {SECOND_SCHEDULER.name}, got {len(found)}"
    )
    return found[0]


def _second_scheduler_config_raw() -> dict[str, Any]:
    config_map = _one(_second_scheduler_docs(), "ConfigMap")
    (text,) = config_map["data"].values()
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def profiles() -> KubeSchedulerConfiguration:
    return KubeSchedulerConfiguration.model_validate(_profiles_raw())


@pytest.fixture(scope="module")
def second() -> KubeSchedulerConfiguration:
    return KubeSchedulerConfiguration.model_validate(_second_scheduler_config_raw())


# --- the schema itself catches the mistakes it is there for -----------------------------------


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        (("profiles", 1, "plugins", "score", "enabled", 0, "weight"), "50", "int_type"),
        (("profiles", 1, "plugins", "score", "enabled", 0, "wieght"), 50, "extra_forbidden"),
        (("profiles", 1, "plugins", "scores"), {}, "extra_forbidden"),
        (
            ("profiles", 2, "pluginConfig", 0, "args", "scoringStrategy", "type"),
            "MostRequested",
            "literal_error",
        ),
        (
            ("profiles", 2, "pluginConfig", 0, "args", "kind"),
            "NodeResourcesFitArguments",
            "literal_error",
        ),
        (
            ("profiles", 2, "pluginConfig", 0, "args", "scoringStrategy", "resources", 2, "weight"),
            101,
            "less_than_equal",
        ),
        (("profiles", 0, "percentageOfNodesToScore"), 150, "less_than_equal"),
    ],
)
def test_schema_rejects_misspelt_or_mistyped_fields(
    path: tuple[str | int, ...], value: object, error: str
) -> None:
    doc = _profiles_raw()
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    with pytest.raises(ValidationError) as info:
        KubeSchedulerConfiguration.model_validate(doc)
    assert error in {e["type"] for e in info.value.errors()} or error in str(info.value)


def test_schema_rejects_duplicate_profiles_and_unknown_plugin_args() -> None:
    doc = _profiles_raw()
    doc["profiles"].append({"schedulerName": "steer-spread"})
    with pytest.raises(ValidationError, match="duplicate schedulerName"):
        KubeSchedulerConfiguration.model_validate(doc)
    doc = _profiles_raw()
    doc["profiles"][1]["pluginConfig"] = [{"name": "NodeAffinity", "args": {}}]
    with pytest.raises(ValidationError, match="no schema here for NodeAffinityArgs"):
        KubeSchedulerConfiguration.model_validate(doc)


def test_effective_weights_follow_upstream_merge_rules() -> None:
    listed = KubeSchedulerProfile.model_validate(
        {
            "schedulerName": "x",
            "plugins": {"score": {"enabled": [{"name": "NodeAffinity", "weight": 7}]}},
        }
    )
    assert effective_score_weights(listed) == {**DEFAULT_SCORE_WEIGHTS, "NodeAffinity": 7}
    disabled = KubeSchedulerProfile.model_validate(
        {"schedulerName": "x", "plugins": {"score": {"disabled": [{"name": "ImageLocality"}]}}}
    )
    assert "ImageLocality" not in effective_score_weights(disabled)


# --- profiles.yaml ------------------------------------------------------------------------------


def test_profiles_parse_and_declare_the_three_profiles(
    profiles: KubeSchedulerConfiguration,
) -> None:
    assert [p.schedulerName for p in profiles.profiles] == ["default-scheduler", *STEER_PROFILES]
    assert profiles.apiVersion == API_VERSION
    # With --config the --kubeconfig flag is ignored, so the file must say where kubeadm's is.
    assert (
        profiles.clientConnection
        and profiles.clientConnection.kubeconfig == "/etc/kubernetes/scheduler.conf"
    )


def test_default_scheduler_profile_is_untouched(profiles: KubeSchedulerConfiguration) -> None:
    (raw,) = [p for p in _profiles_raw()["profiles"] if p["schedulerName"] == "default-scheduler"]
    assert raw == {"schedulerName": "default-scheduler"}
    assert effective_score_weights(profiles.profile("default-scheduler")) == DEFAULT_SCORE_WEIGHTS


@pytest.mark.parametrize("name", STEER_PROFILES)
def test_steer_profiles_raise_node_affinity_only(
    profiles: KubeSchedulerConfiguration, name: str
) -> None:
    weights = effective_score_weights(profiles.profile(name))
    assert weights["NodeAffinity"] == NODE_AFFINITY_WEIGHT
    assert MIN_EFFECTIVE_WEIGHT <= weights["NodeAffinity"] <= MAX_SAFE_WEIGHT
    # Taints and spreading keep their default say: steering must not override them.
    assert {k: v for k, v in weights.items() if k != "NodeAffinity"} == {
        k: v for k, v in DEFAULT_SCORE_WEIGHTS.items() if k != "NodeAffinity"
    }


@pytest.mark.parametrize("name", STEER_PROFILES)
def test_steer_profiles_score_the_upstream_floor_of_nodes(
    profiles: KubeSchedulerConfiguration, name: str
) -> None:
    """5 %: upstream's adaptive percentage never goes below it (numFeasibleNodesToFind), and
    the steered pods' extra cost per node is paid on fewer nodes (bench/scale.py scheduler,
    docs/scheduler-profiles.md). The global setting and default-scheduler stay as they were."""
    assert profiles.profile(name).percentageOfNodesToScore == 5
    assert profiles.percentageOfNodesToScore is None
    assert profiles.profile("default-scheduler").percentageOfNodesToScore is None


def test_effective_filter_order_follows_upstream_expansion() -> None:
    def order(filter_set: dict[str, Any]) -> list[str]:
        profile = KubeSchedulerProfile.model_validate(
            {"schedulerName": "x", "plugins": {"filter": filter_set}}
        )
        return effective_filter_order(profile)

    assert order({}) == list(DEFAULT_FILTER_ORDER)
    moved = order({"enabled": [{"name": "PodTopologySpread"}]})
    assert moved == ["PodTopologySpread", *(n for n in DEFAULT_FILTER_ORDER if n != moved[0])]
    assert "VolumeZone" not in order({"disabled": [{"name": "VolumeZone"}]})
    assert order({"disabled": [{"name": "*"}], "enabled": [{"name": "NodeName"}]}) == ["NodeName"]


@pytest.mark.parametrize("name", STEER_PROFILES)
def test_steer_profiles_filter_on_the_spread_rule_before_resources(
    profiles: KubeSchedulerConfiguration, name: str
) -> None:
    """A node a hard spread rule rejects skips NodeResourcesFit, whose check of a steered pod's
    extended resources is the dearest Filter per node (docs/scheduler-profiles.md). Only the
    order changes: every default Filter plugin still runs, none is added, and the checks of the
    node's own state (cordon, nodeName, taints, required affinity, host ports) still come
    first. The real scheduler's order is pinned in tests/e2e/test_scheduler.py."""
    plugins = profiles.profile(name).plugins
    assert plugins is not None and plugins.filter is not None
    assert plugins.filter.disabled is None
    listed = [p.name for p in plugins.filter.enabled or ()]
    assert len(listed) == len(set(listed)) and set(listed) <= set(DEFAULT_FILTER_ORDER)
    order = effective_filter_order(profiles.profile(name))
    assert sorted(order) == sorted(DEFAULT_FILTER_ORDER)
    assert order.index("PodTopologySpread") < order.index("NodeResourcesFit")
    assert order[:5] == list(DEFAULT_FILTER_ORDER[:5])
    assert effective_filter_order(profiles.profile("default-scheduler")) == list(
        DEFAULT_FILTER_ORDER
    )


def test_every_configured_score_weight_is_within_bounds(
    profiles: KubeSchedulerConfiguration,
) -> None:
    # Upstream only needs an int32 and no int64 overflow of sum(weight * 100); 1..100 is our bound.
    for profile in profiles.profiles:
        for extension_point in ("score", "multiPoint"):
            plugin_set = (
                getattr(profile.plugins, extension_point, None) if profile.plugins else None
            )
            for plugin in (plugin_set.enabled or ()) if plugin_set else ():
                assert plugin.weight is not None and 1 <= plugin.weight <= 100, (
                    profile.schedulerName,
                    plugin,
                )


def test_binpack_packs_gpus_and_spread_keeps_least_allocated(
    profiles: KubeSchedulerConfiguration,
) -> None:
    (fit,) = profiles.profile("steer-binpack").pluginConfig or []
    args = fit.typed_args()
    assert fit.name == "NodeResourcesFit" and isinstance(args, NodeResourcesFitArgs)
    strategy = args.scoringStrategy
    assert strategy.type == "MostAllocated"
    weights = {r.name: r.weight for r in strategy.resources or ()}
    # Listing resources replaces the default cpu+memory set, so both must be listed again.
    counters = {c.resource for c in device_counters(parse_policy(EXAMPLE_POLICY.read_text()))}
    assert counters == {"kube-steer.github.io/devices-gpu"}
    assert weights.keys() == {"cpu", "memory", "nvidia.com/gpu", *counters}
    # GPUs weigh more than cpu and memory, a DRA device as much as a device plugin's.
    for name in ("nvidia.com/gpu", *counters):
        assert weights[name] > max(weights["cpu"], weights["memory"])
        assert weights[name] == weights["nvidia.com/gpu"]
    assert profiles.profile("steer-spread").pluginConfig is None


def test_policy_defaults_and_example_name_only_installed_profiles(
    profiles: KubeSchedulerConfiguration,
) -> None:
    served = {p.schedulerName for p in profiles.profiles}
    defaults = SchedulerProfiles()
    assert {defaults.spread, defaults.binpack} == set(STEER_PROFILES)
    spec = yaml.safe_load(EXAMPLE_POLICY.read_text())["spec"]
    named = {spec["schedulerProfiles"]["spread"], spec["schedulerProfiles"]["binpack"]}
    named |= {
        c["schedulerProfile"] for c in spec.get("podClasses", ()) if c.get("schedulerProfile")
    }
    for tenant in spec.get("tenants", ()):
        named |= set(tenant.get("allowedSchedulerNames", ()))
        if tenant.get("defaultSchedulerName"):
            named.add(tenant["defaultSchedulerName"])
    assert named <= served, f"policy names profiles no scheduler serves: {sorted(named - served)}"


# --- second-scheduler.yaml ----------------------------------------------------------------------


def test_second_scheduler_serves_exactly_the_steer_profiles_from_profiles_yaml(
    second: KubeSchedulerConfiguration,
) -> None:
    source = {p["schedulerName"]: p for p in _profiles_raw()["profiles"]}
    embedded = _second_scheduler_config_raw()["profiles"]
    # Same bytes-level structure, not just the same meaning: one source of truth.
    assert embedded == [source[name] for name in STEER_PROFILES]
    # Serving default-scheduler too would make two schedulers race for every ordinary pod.
    assert "default-scheduler" not in {p.schedulerName for p in second.profiles}


def test_second_scheduler_has_its_own_lease(second: KubeSchedulerConfiguration) -> None:
    election = second.leaderElection
    assert election is not None and election.leaderElect is True
    assert election.resourceLock == "leases"
    # Not `kube-scheduler`: sharing the control plane's lease would stop one of the two.
    assert election.resourceName == "steer-scheduler"
    role = _one(_second_scheduler_docs(), "Role", "steer-scheduler-lease")
    (rule,) = role["rules"]
    assert rule["resources"] == ["leases"] and rule["resourceNames"] == [election.resourceName]
    assert role["metadata"]["namespace"] == election.resourceNamespace
    assert set(rule["verbs"]) == {"get", "update"}


def test_second_scheduler_runs_stock_image_with_the_config_mounted() -> None:
    docs = _second_scheduler_docs()
    account = _one(docs, "ServiceAccount")["metadata"]
    deployment = _one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["name"]
    (container,) = pod["containers"]
    image, _, tag = container["image"].partition(":")
    assert image == "registry.k8s.io/kube-scheduler" and tag.startswith("v1.36.")

    (config_flag,) = [a for a in container["command"] if a.startswith("--config=")]
    config_path = Path(config_flag.removeprefix("--config="))
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == config_path.parent]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    config_map = _one(docs, "ConfigMap")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert config_path.name in config_map["data"]
    assert deployment["spec"]["replicas"] >= 2

    bindings = {
        d["roleRef"]["name"]: d["subjects"]
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    for role in ("system:kube-scheduler", "system:volume-scheduler", "steer-scheduler-lease",
                 "extension-apiserver-authentication-reader"):  # fmt: skip
        assert bindings[role] == [subject], role

"""Policy validation: every mistake is named by its field path, all at once."""

from __future__ import annotations

import pytest
import yaml

from steer.core.policy import PolicyError, parse_policy
from steer.core.policy.document import LIBYAML_TOO_DEEP, SAFE_LOADER, TOO_DEEP
from steer.core.steering import composites, dimension_key, reserved_key
from tests.conftest import EXAMPLE_POLICY


def _doc(**spec_overrides: object) -> dict[str, object]:
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"].update(spec_overrides)
    return doc


def _issues(doc: object) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(yaml.safe_dump(doc))
    return [str(i) for i in info.value.issues]


def test_example_policy_is_valid_and_versioned(example_policy_text: str) -> None:
    policy = parse_policy(example_policy_text)
    assert policy.name == "gpu-cluster"
    assert policy.version.startswith("gpu-cluster@") and len(policy.digest) == 64
    assert [d.name for d in policy.spec.dimensions][:3] == ["gpu-util", "gpu-free", "gpu-frag"]
    assert policy.tenant("dept-b").overcommit_percent == 0
    assert policy.spec.taints[0].condition.source == "raw"
    # Same bytes, same version; any edit, a new one.
    assert parse_policy(example_policy_text).version == policy.version
    assert parse_policy(example_policy_text + "\n# edit\n").version != policy.version


def test_minimal_policy_gets_sane_defaults() -> None:
    policy = parse_policy(
        "apiVersion: kube-steer.github.io/v1alpha1\nkind: SteeringPolicy\n"
        "spec:\n  dimensions:\n  - name: load\n    query: node_load1\n"
    )
    spec = policy.spec
    assert spec.label_prefix == "kube-steer.github.io/"
    assert spec.scoring.step == 10 and spec.scoring.hysteresis == 3
    assert spec.scheduler_profiles.installed is False
    assert spec.unscored_nodes == "allow"
    assert policy.label_key("score") == "kube-steer.github.io/score"


def test_field_errors_are_all_reported_with_paths() -> None:
    doc = _doc()
    doc["spec"]["tenants"][1]["overcommitPercent"] = 150
    doc["spec"]["dimensions"][0]["direction"] = "up"
    doc["spec"]["scoring"]["step"] = 15
    doc["spec"]["taints"][0]["effect"] = "NoEntry"
    doc["spec"]["tenants"][0]["overcomitPercent"] = 5
    del doc["spec"]["dimensions"][1]["query"]
    issues = _issues(doc)
    assert "spec.tenants[1].overcommitPercent: must be between 0 and 100, got 150" in issues
    assert (
        "spec.scoring.step: must divide 100 (1, 2, 4, 5, 10, 20, 25, 50 or 100), got 15" in issues
    )
    assert "spec.dimensions[1].query: required field is missing" in issues
    assert any(i.startswith("spec.dimensions[0].direction: ") and "'up'" in i for i in issues)
    assert any(i.startswith("spec.taints[0].effect: ") and "'NoEntry'" in i for i in issues)
    assert (
        "spec.tenants[0].overcomitPercent: unknown field (check the spelling; fields are camelCase)"
        in issues
    )
    assert len(issues) == 6


def test_cross_field_errors_are_all_reported() -> None:
    doc = _doc()
    doc["spec"]["taints"][0]["condition"]["dimension"] = "gpu-utilisation"
    doc["spec"]["tenants"][1]["name"] = "dept-a"
    doc["spec"]["tenants"][0]["allowedTolerations"] = ["gpu-hott"]
    doc["spec"]["podClasses"][0]["dimensions"] = ["gpu-util", "nope"]
    doc["spec"]["spread"][0]["topologyKey"] = "Bad Key/zone"
    doc["spec"]["tenants"][1]["defaultSchedulerName"] = "my-scheduler"
    issues = _issues(doc)
    assert any(
        i.startswith("spec.taints[0].condition.dimension: unknown dimension 'gpu-utilisation'")
        for i in issues
    )
    assert "spec.tenants[1].name: duplicate name 'dept-a'" in issues
    assert any(
        i.startswith("spec.tenants[0].allowedTolerations[0]: unknown taint rule 'gpu-hott'")
        for i in issues
    )
    assert "spec.podClasses[0].dimensions[1]: unknown dimension 'nope'" in issues
    assert any(
        i.startswith("spec.spread[0].topologyKey: prefix part a lowercase RFC 1123 subdomain")
        for i in issues
    )
    assert any(
        i.startswith(
            "spec.tenants[1].defaultSchedulerName: 'my-scheduler' is not in allowedSchedulerNames"
        )
        for i in issues
    )
    assert len(issues) == 6


def test_weights_must_sum_above_zero() -> None:
    doc = _doc()
    for dim in doc["spec"]["dimensions"]:
        dim["weight"] = 0
        dim.pop("coverage", None)  # some name the pod class deleted below
    del doc["spec"]["podClasses"]
    del doc["spec"]["scoring"]["compositeDimensions"]
    assert _issues(doc) == [
        "spec.dimensions: the weights of the score dimensions must sum to more than 0 (no composite score otherwise)"
    ]


@pytest.mark.parametrize(
    ("prefix", "fragment"),
    [
        ("kube-steer.github.io", "must contain a DNS-subdomain and '/'"),
        ("Steer.IO/", "prefix part a lowercase RFC 1123 subdomain"),
        ("kubernetes.io/", "prefixes are reserved"),
    ],
)
def test_label_prefix_must_yield_valid_keys(prefix: str, fragment: str) -> None:
    issues = _issues(_doc(labelPrefix=prefix))
    assert issues and all(fragment in i for i in issues[:1])


def test_node_restriction_prefix_is_supported() -> None:
    doc = _doc(labelPrefix="node-restriction.kubernetes.io/steer-")
    # Extended resources may not live under kubernetes.io: label enforcement of budgets only.
    doc["spec"]["overcommit"] = {"enforcement": "labels"}
    policy = parse_policy(yaml.safe_dump(doc))
    assert policy.label_key("score") == "node-restriction.kubernetes.io/steer-score"


def test_long_dimension_name_breaks_the_63_byte_label_rule() -> None:
    doc = _doc()
    # A name of 60 is a valid name (at most 63), but not with `score-` in front of it.
    doc["spec"]["dimensions"][3]["name"] = "x" * 60
    issues = _issues(doc)
    assert issues == [
        f"spec.dimensions[3].name: label key 'kube-steer.github.io/score-{'x' * 60}' is invalid: name part must be no more than 63 bytes"
    ]


def test_the_label_contract_names_scores_and_raw_values_apart() -> None:
    policy = parse_policy(EXAMPLE_POLICY.read_text())
    assert policy.spec.label_prefix == "kube-steer.github.io/"
    keys = {d.name: dimension_key(policy, d) for d in policy.spec.dimensions}
    assert keys["gpu-util"] == "kube-steer.github.io/score-gpu-util"
    assert keys["power"] == "kube-steer.github.io/score-power"
    # A raw value keeps its name, which ends with its unit.
    assert keys["overcommit-pct"] == "kube-steer.github.io/overcommit-pct"
    assert policy.dimension("overcommit-pct").raw_unit == "pct"
    assert policy.dimension("power").raw_unit == "watts"
    assert [key for _, key in composites(policy)] == [
        "kube-steer.github.io/score",
        "kube-steer.github.io/score-class-gpu",
    ]
    assert reserved_key(policy, policy.spec.pod_classes[0]) == (
        "kube-steer.github.io/reserved-for-gpu"
    )


def test_a_raw_label_must_end_with_its_unit() -> None:
    doc = _doc()
    doc["spec"]["dimensions"][3]["publish"] = "raw"  # power, published as raw watts
    doc["spec"]["dimensions"][2]["unit"] = "Ratio!"
    issues = _issues(doc)
    assert issues == [
        "spec.dimensions[2].unit: must be one lower-case word such as pct, watts, gpus or ratio, got 'Ratio!'",
        "spec.dimensions[3].name: publish: raw writes the value itself as label 'power', so the "
        "name must end with its unit (e.g. 'power-watts') and read apart from the 0..100 scores, "
        "got 'power'",
    ]
    doc["spec"]["dimensions"][2]["unit"] = "ratio"
    doc["spec"]["dimensions"][3]["name"] = "power-watts"
    doc["spec"]["scoring"]["compositeDimensions"] = ["health"]
    doc["spec"]["clusterScores"]["scores"][3]["dimension"] = "power-watts"
    policy = parse_policy(yaml.safe_dump(doc))
    power = policy.dimension("power-watts")
    assert dimension_key(policy, power) == "kube-steer.github.io/power-watts"
    assert power.raw_unit == "watts"


@pytest.mark.parametrize(
    ("name", "unit", "problem"),
    [
        ("queue-depth", None, True),  # "depth" is no unit: say which one, or name a known one
        ("queue-count", None, False),
        ("queue-depth", "depth", False),  # a unit of your own, named
        ("queue-count", "jobs", True),  # named, but not what the name ends with
    ],
)
def test_a_raw_name_ends_with_a_known_or_a_named_unit(
    name: str, unit: str | None, problem: bool
) -> None:
    doc = {
        "apiVersion": "kube-steer.github.io/v1alpha1",
        "kind": "SteeringPolicy",
        "spec": {
            "dimensions": [
                {"name": "load", "query": "node_load1"},
                {"name": name, "query": "q", "publish": "raw", "weight": 0}
                | ({"unit": unit} if unit else {}),
            ]
        },
    }
    if not problem:
        assert parse_policy(yaml.safe_dump(doc)).dimension(name).raw_unit == name.split("-")[1]
        return
    (issue,) = _issues(doc)
    assert issue.startswith(
        f"spec.dimensions[1].name: publish: raw writes the value itself as label {name!r}"
    )
    assert ("known without it: bytes, celsius, cores, count" in issue) == (unit is None)


def test_a_dimension_may_not_take_a_composite_label() -> None:
    doc = _doc()
    doc["spec"]["dimensions"][3]["name"] = "class-gpu"  # score-class-gpu: the GPU composite
    doc["spec"]["scoring"]["compositeDimensions"] = ["health"]
    doc["spec"]["clusterScores"]["scores"][3]["dimension"] = "class-gpu"
    issues = _issues(doc)
    assert issues == [
        "spec.dimensions[3].name: label 'kube-steer.github.io/score-class-gpu' would be written by two rules",
        "spec.podClasses[0].name: label 'kube-steer.github.io/score-class-gpu' would be written by two rules",
    ]


def test_a_policy_under_the_former_api_version_still_loads() -> None:
    text = EXAMPLE_POLICY.read_text().replace(
        "apiVersion: kube-steer.github.io/v1alpha1", "apiVersion: steer.io/v1alpha1"
    )
    assert parse_policy(text).doc.api_version == "kube-steer.github.io/v1alpha1"


def test_fixed_normalization_needs_ordered_bounds() -> None:
    doc = _doc()
    doc["spec"]["dimensions"][0]["normalization"] = {"method": "fixed", "min": 5, "max": 5}
    doc["spec"]["dimensions"][1]["normalization"] = {"method": "fixed", "min": 5}
    doc["spec"]["dimensions"][3]["normalization"] = {"method": "minMax", "max": 5}
    issues = _issues(doc)
    assert "spec.dimensions[0].normalization.max: must be greater than min (5.0), got 5.0" in issues
    assert "spec.dimensions[1].normalization: method fixed needs both min and max" in issues
    assert "spec.dimensions[3].normalization: min/max are only used with method: fixed" in issues


def test_overcommit_budget_by_labels_needs_the_raw_overcommit_dimension() -> None:
    doc = _doc()
    doc["spec"]["dimensions"] = [
        d for d in doc["spec"]["dimensions"] if d["name"] != "overcommit-pct"
    ]
    doc["spec"]["overcommit"] = {"enforcement": "labels"}
    issues = _issues(doc)
    assert all("needs a dimension named 'overcommit-pct'" in i for i in issues) and len(issues) == 2
    # Enforced by the scheduler, budgets read the node's pods, not the label.
    doc["spec"]["overcommit"] = {"enforcement": "scheduler"}
    assert parse_policy(yaml.safe_dump(doc)).spec.overcommit.enforcement == "scheduler"


@pytest.mark.parametrize(
    ("prefix", "native", "expected"),
    [
        ("kube-steer.github.io", False, "must be a DNS subdomain followed by '/'"),
        ("kubernetes.io/", True, "the bare kubernetes.io/ and k8s.io/ prefixes"),
        ("kube-steer.kubernetes.io/", False, "reserve to Kubernetes"),
        ("steer.k8s.io/", False, "reserve to Kubernetes"),
        ("steer.k8s.io/", True, "needs a resourcePrefix containing 'kubernetes.io/'"),
        ("kube-steer.github.io/", True, "needs a resourcePrefix containing 'kubernetes.io/'"),
        ("bad_domain.example.com/", False, "resource name 'bad_domain.example.com/pool-memory'"),
        ("bad_domain.kubernetes.io/", True, "resource name 'bad_domain.kubernetes.io/pool-memory'"),
    ],
)
def test_resource_prefix_is_the_operators_domain_unless_native_names_are_chosen(
    prefix: str, native: bool, expected: str
) -> None:
    doc = _doc()
    doc["spec"]["resourcePrefix"] = prefix
    doc["spec"]["nativeResourceNames"] = native
    doc["spec"]["formerResourcePrefixes"] = []
    issues = _issues(doc)
    assert issues and all(
        i.startswith(("spec.resourcePrefix:", "spec.nativeResourceNames:")) for i in issues
    )
    assert expected in issues[0]


def test_native_resource_names_are_an_explicit_choice() -> None:
    doc = _doc()
    doc["spec"]["resourcePrefix"] = "kube-steer.kubernetes.io/"
    doc["spec"]["nativeResourceNames"] = True
    doc["spec"]["formerResourcePrefixes"] = ["kube-steer.github.io/"]
    policy = parse_policy(yaml.safe_dump(doc))
    assert policy.spec.resource_prefixes == ("kube-steer.kubernetes.io/", "kube-steer.github.io/")


@pytest.mark.parametrize(
    ("former", "expected"),
    [
        (["kube-steer.github.io/"], "spec.formerResourcePrefixes[0]: is the resourcePrefix itself"),
        (
            ["a.example.com/", "a.example.com/"],
            "spec.formerResourcePrefixes: lists 'a.example.com/' twice",
        ),
        (["bad_x/"], "spec.formerResourcePrefixes[0]: 'bad_x/' is not a resource prefix"),
    ],
)
def test_former_resource_prefixes_are_checked(former: list[str], expected: str) -> None:
    doc = _doc()
    doc["spec"]["formerResourcePrefixes"] = former
    assert any(i.startswith(expected) for i in _issues(doc)), _issues(doc)


def test_the_default_resource_prefix_is_the_projects_and_the_former_default_is_read() -> None:
    policy = parse_policy(yaml.safe_dump(_doc()))
    assert policy.spec.resource_prefix == "kube-steer.github.io/"
    assert policy.spec.former_resource_prefixes == ("kube-steer.kubernetes.io/",)
    assert not policy.spec.native_resource_names


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "must be a YAML mapping (a SteeringPolicy), got an empty document"),
        ("- a\n- b\n", "must be a YAML mapping (a SteeringPolicy), got list"),
        ("spec: [unclosed\n", "not valid YAML: line 2, column 1"),
    ],
)
def test_not_a_policy_document(text: str, expected: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    assert str(info.value).startswith(expected)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 10_000 + "]" * 10_000,
        "spec:\n" + "".join("  " * depth + "a:\n" for depth in range(1, 3_000)),
    ],
    ids=["flow", "block"],
)
def test_a_document_nested_thousands_deep_is_refused_by_the_parser(text: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    assert str(info.value) == TOO_DEEP


def test_policies_are_read_by_libyaml_into_what_the_pure_python_loader_makes() -> None:
    """PyYAML's wheels carry libyaml, and parse_policy relies on it to refuse deep nesting
    without the pure-Python scanner's quadratic cost; the objects it makes are the same."""
    assert yaml.__with_libyaml__ and SAFE_LOADER is yaml.CSafeLoader
    text = EXAMPLE_POLICY.read_text()
    assert yaml.load(text, Loader=SAFE_LOADER) == yaml.load(text, Loader=yaml.SafeLoader)
    deep = "[" * 1_001 + "]" * 1_001
    with pytest.raises(yaml.YAMLError) as info:
        yaml.load(deep, Loader=SAFE_LOADER)
    assert getattr(info.value, "problem", None) == LIBYAML_TOO_DEEP


def test_wrong_api_version_and_kind() -> None:
    doc = _doc()
    doc["apiVersion"] = "kube-steer.github.io/v1"
    doc["kind"] = "Policy"
    issues = _issues(doc)
    assert issues == [
        "apiVersion: input should be 'kube-steer.github.io/v1alpha1', got 'kube-steer.github.io/v1'",
        "kind: input should be 'SteeringPolicy', got 'Policy'",
    ]


@pytest.mark.parametrize(
    ("operator", "observed", "active", "expected"),
    [
        ("Gt", 91, False, True),
        ("Gt", 90, False, False),
        ("Gt", 87, True, True),  # set: clears only below 90 - 5
        ("Gt", 85, True, False),
        ("Ge", 85, True, True),
        ("Lt", 0.4, False, True),
        ("Lt", 0.6, True, True),  # set: clears only at 0.5 + 0.2 or above
        ("Lt", 0.7, True, False),
        ("Le", 0.7, True, True),
    ],
)
def test_condition_margin_delays_clearing_only(
    operator: str, observed: float, active: bool, expected: bool
) -> None:
    from steer.core.policy import Condition

    threshold, margin = (90, 5) if operator in ("Gt", "Ge") else (0.5, 0.2)
    condition = Condition(dimension="d", operator=operator, value=threshold, margin=margin)
    assert condition.holds(observed, active=active) is expected


def test_field_and_reference_errors_are_reported_together() -> None:
    doc = _doc()
    doc["spec"]["podClasses"][0]["dimensions"] = ["gpu-util", "gpu-free", "gpu-frag", "health"]
    doc["spec"]["tenants"][1]["overcommitPercent"] = 150
    doc["spec"]["taints"][0]["condition"]["dimension"] = "gpu-utilisation"
    doc["spec"]["tenants"][0]["allowedTolerations"] = ["gpu-hott"]
    doc["spec"]["dimensions"][1]["name"] = "gpu-util"
    doc["spec"]["dimensions"][2] = "not an object"
    issues = _issues(doc)
    assert (
        issues[0]
        == "spec.dimensions[2]: input should be a valid dictionary or instance of Dimension, got 'not an object'"
    )
    assert "spec.tenants[1].overcommitPercent: must be between 0 and 100, got 150" in issues
    assert "spec.dimensions[1].name: duplicate name 'gpu-util'" in issues
    assert any(
        i.startswith("spec.taints[0].condition.dimension: unknown dimension 'gpu-utilisation'")
        for i in issues
    )
    assert any(
        i.startswith("spec.tenants[0].allowedTolerations[0]: unknown taint rule 'gpu-hott'")
        for i in issues
    )
    # gpu-free (renamed) and gpu-frag (malformed) are unknown to the pod class now.
    assert "spec.podClasses[0].dimensions[1]: unknown dimension 'gpu-free'" in issues
    assert "spec.podClasses[0].dimensions[2]: unknown dimension 'gpu-frag'" in issues
    assert len(issues) == 7


# --- tenants whose pods could never be created ------------------------------------------------


def _tenant_issues(doc: dict[str, object]) -> list[str]:
    return [i for i in _issues(doc) if "allowedSchedulerNames" in i]


def test_example_dept_b_covers_opted_in_namespaces_only() -> None:
    doc = _doc()
    doc["spec"]["tenants"][1]["namespaceSelector"] = {"matchLabels": {"tenant": "dept-b"}}  # type: ignore[index]
    (issue,) = _tenant_issues(doc)
    assert issue.startswith("spec.tenants[1].allowedSchedulerNames: tenant 'dept-b': ")
    assert "not opted in keep schedulerName 'default-scheduler'" in issue
    assert "add 'default-scheduler' to allowedSchedulerNames" in issue
    assert "require the opt-in label (kube-steer.github.io/enabled=true)" in issue


@pytest.mark.parametrize(
    "selector",
    [
        {"matchLabels": {"tenant": "dept-b", "kube-steer.github.io/enabled": "true"}},
        {
            "matchLabels": {"tenant": "dept-b"},
            "matchExpressions": [
                {"key": "kube-steer.github.io/enabled", "operator": "In", "values": ["true"]}
            ],
        },
    ],
)
def test_a_selector_that_implies_the_opt_in_is_accepted(selector: dict[str, object]) -> None:
    doc = _doc()
    doc["spec"]["tenants"][1]["namespaceSelector"] = selector  # type: ignore[index]
    parse_policy(yaml.safe_dump(doc))


def test_a_selector_that_does_not_imply_the_opt_in_is_rejected() -> None:
    doc = _doc()
    doc["spec"]["tenants"][1]["namespaceSelector"] = {  # type: ignore[index]
        "matchLabels": {"tenant": "dept-b"},
        "matchExpressions": [
            {"key": "kube-steer.github.io/enabled", "operator": "In", "values": ["true", "false"]}
        ],
    }
    assert len(_tenant_issues(doc)) == 1


def test_profiles_not_installed_leave_default_scheduler_which_the_tenant_must_allow() -> None:
    doc = _doc()
    doc["spec"]["schedulerProfiles"]["installed"] = False  # type: ignore[index]
    (issue,) = _tenant_issues(doc)
    assert issue == (
        "spec.tenants[1].allowedSchedulerNames: tenant 'dept-b': opted-in pods of no class and "
        "pods of class 'gpu' keep schedulerName 'default-scheduler', which ['steer-spread', "
        "'steer-binpack'] does not allow (it names 'steer-spread', 'steer-binpack', but "
        "spec.schedulerProfiles.installed is false, so the webhook routes no pod to a profile), "
        "so every such pod is denied; add 'default-scheduler' to allowedSchedulerNames, or "
        "install the scheduler profiles and set spec.schedulerProfiles.installed: true"
    )
    doc["spec"]["tenants"][1]["allowedSchedulerNames"].append("default-scheduler")  # type: ignore[index]
    parse_policy(yaml.safe_dump(doc))


def test_a_route_to_a_scheduler_the_tenant_does_not_allow_is_rejected() -> None:
    doc = _doc()
    tenant = doc["spec"]["tenants"][1]  # type: ignore[index]
    # No default: a gpu pod goes to steer-binpack (not allowed) and then keeps default-scheduler.
    tenant["allowedSchedulerNames"] = ["steer-spread"]
    del tenant["defaultSchedulerName"]
    (issue,) = _tenant_issues(doc)
    assert "tenant 'dept-b': opted-in pods of class 'gpu' are routed to schedulerName " in issue
    assert "'default-scheduler', which ['steer-spread'] does not allow" in issue
    # With a default it allows, the gpu pod falls back to it: valid.
    tenant["defaultSchedulerName"] = "steer-spread"
    parse_policy(yaml.safe_dump(doc))


# Each name the policy mints into labels, resource names, taint keys, traces or CEL string
# literals, and each object name it refers to, with a value none of them may hold.
NAME_FIELDS = [
    (("tenants", 1, "name"), "dept\nb", "spec.tenants[1].name", "RFC 1123 label"),
    (("tenants", 0, "name"), "dept-a'", "spec.tenants[0].name", "RFC 1123 label"),
    (("tenants", 0, "name"), "Dept-A", "spec.tenants[0].name", "RFC 1123 label"),
    (
        ("tenants", 0, "allowedSchedulerNames", 0),
        "x\\y",
        "spec.tenants[0].allowedSchedulerNames[0]",
        "subdomain",
    ),
    (("podClasses", 0, "name"), "gpu job", "spec.podClasses[0].name", "RFC 1123 label"),
    (
        ("podClasses", 0, "deviceClasses"),
        ["gpu\n"],
        "spec.podClasses[0].deviceClasses[0]",
        "subdomain",
    ),
    (("dimensions", 0, "name"), "gpu_util", "spec.dimensions[0].name", "RFC 1123 label"),
    (("taints", 0, "name"), "gpu-hot" + "x" * 60, "spec.taints[0].name", "RFC 1123 label"),
    (("spread", 0, "name"), "zone'); true || ('", "spec.spread[0].name", "RFC 1123 label"),
    (
        ("schedulerProfiles", "binpack"),
        "steer binpack",
        "spec.schedulerProfiles.binpack",
        "subdomain",
    ),
    (("projectNamespace",), "kube-steer\n", "spec.projectNamespace", "RFC 1123 label"),
    (
        ("optIn", "excludedNamespaces"),
        ["ok", "Not-OK"],
        "spec.optIn.excludedNamespaces[1]",
        "RFC 1123 label",
    ),
]


@pytest.mark.parametrize(("where", "value", "path", "form"), NAME_FIELDS)
def test_names_are_checked_at_load_naming_the_field(
    where: tuple[str | int, ...], value: object, path: str, form: str
) -> None:
    doc = _doc()
    parent: object = doc["spec"]
    for step in where[:-1]:
        parent = parent[step]  # type: ignore[index]
    parent[where[-1]] = value  # type: ignore[index]
    issues = _issues(doc)
    assert any(
        i.startswith(f"{path}: must be a lower-case RFC 1123") and form in i for i in issues
    ), issues


def test_selector_expressions_hold_only_label_keys_and_values() -> None:
    doc = _doc()
    doc["spec"]["tenants"][0]["namespaceSelector"] = {
        "matchExpressions": [{"key": "tenant", "operator": "In", "values": ["dept-a", "a\nb"]}]
    }
    issues = _issues(doc)
    assert any(
        i.startswith("spec.tenants[0].namespaceSelector.matchExpressions[0].values[1]: 'a\\nb'")
        for i in issues
    ), issues
    doc["spec"]["tenants"][0]["namespaceSelector"] = {
        "matchExpressions": [{"key": "bad key'", "operator": "Exists"}]
    }
    assert any(
        i.startswith('spec.tenants[0].namespaceSelector.matchExpressions[0].key: "bad key\'"')
        for i in _issues(doc)
    )

"""`spec.clusterScores` validation: every problem named by its field path."""

from __future__ import annotations

import pytest

from steer.core.policy import (
    FreeResourceScore,
    PolicyError,
    PowerPerCoreScore,
    TenantHeadroomScore,
    parse_policy,
)
from steer.core.policy.cluster_scores import SCORE_KINDS
from tests.scorer_support import SMALL_POLICY


def issues(section: str) -> dict[str, str]:
    with pytest.raises(PolicyError) as err:
        parse_policy(SMALL_POLICY + section)
    return {i.path: i.message for i in err.value.issues}


def test_defaults_are_off() -> None:
    config = parse_policy(SMALL_POLICY).spec.cluster_scores
    assert not config.enabled
    assert config.resource_name == "kube-steer"
    assert config.valid_for_seconds == 300


def test_a_valid_section() -> None:
    policy = parse_policy(
        SMALL_POLICY
        + """\
  clusterScores:
    enabled: true
    hubKubeconfig: /etc/hub/kubeconfig
    clusterName: cluster-a
    resourceName: steer-scores
    validForSeconds: 90
    scores:
      - {name: free-gpus, kind: freeResource, best: 32}
      - {name: block, kind: freeResource, resource: example.com/fpga, aggregate: max, best: 4}
      - {name: headroom, kind: tenantHeadroom, tenant: dept-b, resource: memory, best: 512}
      - {name: power, kind: powerPerCore, dimension: power, worst: 40, best: 5}
"""
    )
    config = policy.spec.cluster_scores
    assert config.hub_kubeconfig == "/etc/hub/kubeconfig"
    assert [s.target for s in config.scores] == [
        "nvidia.com/gpu",
        "example.com/fpga",
        "memory",
        "cpu",
    ]
    assert config.scores[3].bounds == (40, 5)
    assert config.scores[0].bounds == (0, 32)


def test_enabled_needs_a_cluster_scores_and_a_long_enough_validity() -> None:
    got = issues(
        """\
  clusterScores:
    enabled: true
    validForSeconds: 30
"""
    )
    assert got["spec.clusterScores.clusterName"].startswith("required when enabled")
    assert got["spec.clusterScores.scores"] == "must list at least one score when enabled"
    assert got["spec.clusterScores.validForSeconds"] == (
        "must be greater than spec.scoring.intervalSeconds (30), or the scores expire "
        "between cycles; got 30"
    )


def test_names_must_be_kubernetes_names() -> None:
    got = issues(
        """\
  clusterScores:
    enabled: true
    clusterName: Cluster_A
    resourceName: "no/slash"
    scores: [{name: f, kind: freeResource, best: 1}]
"""
    )
    assert "namespace name" in got["spec.clusterScores.clusterName"]
    assert "object name" in got["spec.clusterScores.resourceName"]


def test_each_kind_checks_its_fields() -> None:
    got = issues(
        """\
  clusterScores:
    enabled: true
    clusterName: c
    scores:
      - {name: a, kind: freeResource, resource: cpu}
      - {name: a, kind: tenantHeadroom, tenant: nobody, best: 1, aggregate: max}
      - {name: c, kind: tenantHeadroom, best: 1, resource: gpu}
      - {name: d, kind: powerPerCore, dimension: watts, best: 5}
      - {name: e, kind: powerPerCore, dimension: power, worst: 5, best: 5, tenant: dept-b}
      - {name: " ", kind: freeResource, best: 2, dimension: power}
"""
    )
    s = "spec.clusterScores.scores"
    assert got[f"{s}[0].best"].startswith("required: the raw value worth 100")
    assert got[f"{s}[0].resource"].startswith("counts whole units of an extended resource")
    assert got[f"{s}[0].name"] == "duplicate score name 'a'"
    assert got[f"{s}[1].tenant"] == "unknown tenant 'nobody'; known: ['dept-b']"
    assert got[f"{s}[1].aggregate"] == "not used by tenantHeadroom"
    assert got[f"{s}[2].tenant"] == "required for tenantHeadroom"
    assert got[f"{s}[2].resource"] == "must be cpu or memory, got 'gpu'"
    assert (
        got[f"{s}[3].dimension"]
        == "unknown dimension 'watts'; known: ['overcommit-pct', 'power', 'util']"
    )
    assert got[f"{s}[3].worst"] == "required for powerPerCore: the watts per core worth -100"
    assert got[f"{s}[4].best"] == "must differ from worst (5)"
    assert got[f"{s}[4].tenant"] == "not used by powerPerCore"
    assert got[f"{s}[5].name"] == "must be a non-blank name, got ' '"
    assert got[f"{s}[5].dimension"] == "not used by freeResource"


def test_headroom_needs_a_budget() -> None:
    got = issues(
        """\
    - name: dept-c
      namespaceSelector: {matchLabels: {tenant: dept-c}}
  clusterScores:
    enabled: true
    clusterName: c
    scores: [{name: h, kind: tenantHeadroom, tenant: dept-c, best: 1}]
"""
    )
    assert "has no overcommitPercent" in got["spec.clusterScores.scores[0].tenant"]


def test_disabled_sections_are_still_checked_but_need_no_cluster() -> None:
    got = issues(
        """\
  clusterScores:
    scores: [{name: f, kind: freeResource}]
"""
    )
    assert list(got) == ["spec.clusterScores.scores[0].best"]


def test_unknown_fields_and_kinds_are_rejected() -> None:
    got = issues(
        """\
  clusterScores:
    enabled: true
    clusterName: c
    hub: x
    scores: [{name: f, kind: freeGpus, best: 1}]
"""
    )
    assert got["spec.clusterScores.hub"].startswith("unknown field")
    assert "freeResource" in got["spec.clusterScores.scores[0].kind"]


def scores(*entries: str, enabled: str = "true") -> str:
    listed = "".join(f"      - {e}\n" for e in entries)
    return f"  clusterScores:\n    enabled: {enabled}\n    clusterName: c\n    scores:\n{listed}"


def test_each_kind_is_its_own_model() -> None:
    config = parse_policy(
        SMALL_POLICY
        + scores(
            "{name: f, kind: freeResource, best: 8, aggregate: max}",
            # Defaults written out (a dumped policy read back) are not settings of the kind.
            "{name: h, kind: tenantHeadroom, tenant: dept-b, best: 1, aggregate: sum}",
            "{name: p, kind: powerPerCore, dimension: power, worst: 40, best: 5, tenant: null}",
        )
    ).spec.cluster_scores
    free, headroom, power = config.scores
    assert isinstance(free, FreeResourceScore) and free.aggregate == "max"
    assert isinstance(headroom, TenantHeadroomScore) and headroom.tenant == "dept-b"
    assert isinstance(power, PowerPerCoreScore) and power.dimension == "power"
    assert [s.target for s in config.scores] == ["nvidia.com/gpu", "cpu", "cpu"]
    assert SCORE_KINDS.settings == {"resource", "aggregate", "tenant", "dimension"}


@pytest.mark.parametrize(
    ("entry", "path", "expected"),
    [
        ("{name: f, kind: freeResource, best: 1, tenant: dept-b}", "tenant", "not used by freeResource"),
        ("{name: f, kind: tenantHeadroom, tenant: dept-b, best: 1, dimension: power}", "dimension", "not used by tenantHeadroom"),
        ("{name: f, kind: powerPerCore, dimension: power, worst: 9, best: 1, resource: cpu}", "resource", "not used by powerPerCore"),
        ("{name: f, kind: powerPerCore, dimension: power, worst: 9, best: 1, aggregate: max}", "aggregate", "not used by powerPerCore"),
        ("{name: f, kind: tenantHeadroom, best: 1, tenant: null}", "tenant", "required for tenantHeadroom"),
        ("{name: f, kind: powerPerCore, worst: 9, best: 1}", "dimension", "required for powerPerCore: the dimension of node watts"),
        ("{name: f, kind: powerPerCore, dimension: power, best: 1}", "worst", "required for powerPerCore: the watts per core worth -100"),
        ("{name: f, kind: tenantHeadroom, tenant: dept-b, best: null}", "best", "required: the raw value worth 100 (keep it the same in every cluster)"),
        ("{name: f, kind: freeResource, best: 0}", "best", "must differ from worst (0)"),
        ("{name: f, kind: freeResource, best: 1, aggregate: min}", "aggregate", "input should be 'sum' or 'max', got 'min'"),
        ("{name: f, kind: tenantHeadroom, tenant: 5, best: 1}", "tenant", "input should be a valid string, got 5"),
        ("{name: f, kind: freeResource, best: 1, bset: 2}", "bset", "unknown field (check the spelling; fields are camelCase)"),
        ("{name: f, best: 1}", "kind", "required field is missing"),
        ("{name: f, kind: null, best: 1}", "kind", "input should be 'freeResource', 'tenantHeadroom' or 'powerPerCore', got None"),
        ("{name: f, kind: freeGpus, best: 1}", "kind", "input should be 'freeResource', 'tenantHeadroom' or 'powerPerCore', got 'freeGpus'"),
        ("nope", "", "input should be a valid dictionary or instance of ClusterScore, got 'nope'"),
    ],
)  # fmt: skip
def test_the_kind_settings_errors_read_as_before(entry: str, path: str, expected: str) -> None:
    got = issues(scores(entry))
    assert got == {f"spec.clusterScores.scores[0]{'.' if path else ''}{path}": expected}


def test_references_are_reported_beside_field_errors() -> None:
    got = issues(
        scores(
            "{name: f, kind: tenantHeadroom, tenant: nobody, best: 1}",
            "{name: f, kind: powerPerCore, dimension: watts, best: 1}",
        )
    )
    s = "spec.clusterScores.scores"
    assert got == {
        f"{s}[1].worst": "required for powerPerCore: the watts per core worth -100",
        f"{s}[0].name": "duplicate score name 'f'",
        f"{s}[1].name": "duplicate score name 'f'",
        f"{s}[0].tenant": "unknown tenant 'nobody'; known: ['dept-b']",
        f"{s}[1].dimension": (
            "unknown dimension 'watts'; known: ['overcommit-pct', 'power', 'util']"
        ),
    }
    disabled = scores("{name: f, kind: tenantHeadroom, tenant: nobody, best: 1}", enabled="false")
    assert (
        parse_policy(SMALL_POLICY + disabled).spec.cluster_scores.scores[0].kind == "tenantHeadroom"
    )

"""What a pod asks of DRA devices (steer/core/dra/claims.py), and the pod class that puts it in
(`classify_pod`, `pod_classification`): device-plugin requests, extended resources a
DeviceClass serves, claims and claim templates, and claims not known yet."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from steer.core.dra.claims import (
    ClaimSource,
    DeviceAsk,
    claim_asks,
    claim_sources,
    extended_asks,
    may_be_device_backed,
)
from steer.core.pod_shape import UninterpretablePod
from steer.core.policy import Policy, parse_policy
from steer.core.steering import classify_pod, pod_classification, pod_gates
from tests.conftest import EXAMPLE_POLICY
from tests.dra_support import (
    CLAIM_POD,
    EXTENDED_POD,
    GPU_CLASS,
    NVIDIA,
    FakeCatalog,
    pod,
)

NS = "gpu-test1"


def _policy(*extra: dict[str, Any], gpu_reserve: str = "require") -> Policy:
    """The example policy, its gpu class reserving nodes outright, and `extra` classes after it."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["podClasses"][0]["reserveNodes"] = gpu_reserve
    doc["spec"]["podClasses"] += list(extra)
    return parse_policy(yaml.safe_dump(doc))


FPGA = {"name": "fpga", "deviceClasses": ["fpga.example.com"], "reserveNodes": "require"}
POLICY = _policy(FPGA)


def _names(gates: Any) -> set[str]:
    return {g.rule for g in gates}


# -- reading the pod -------------------------------------------------------------------------


def test_claim_sources_read_templates_and_claims_by_the_pods_own_names() -> None:
    spec = pod(
        resourceClaims=[
            {"name": "twogpus", "resourceClaimTemplateName": "double-gpu"},
            {"name": "shared", "resourceClaimName": "team-gpu"},
            {"name": "neither"},  # the apiserver refuses it; it names nothing
        ]
    )["spec"]
    assert claim_sources(spec) == (
        ClaimSource("twogpus", "template", "double-gpu"),
        ClaimSource("shared", "claim", "team-gpu"),
    )
    assert claim_sources({"containers": []}) == ()


@pytest.mark.parametrize(
    ("claims", "field"),
    [
        ("twogpus", "spec.resourceClaims"),
        (["twogpus"], "spec.resourceClaims"),
        ([{"name": "x", "resourceClaimTemplateName": 3}], "spec.resourceClaims[0]."),
    ],
)
def test_a_malformed_resource_claims_list_is_named(claims: Any, field: str) -> None:
    with pytest.raises(UninterpretablePod) as info:
        claim_sources({"resourceClaims": claims})
    assert info.value.field.startswith(field)


def test_claim_asks_come_from_the_catalogue_in_the_pods_namespace() -> None:
    catalog = FakeCatalog.of(
        *[
            {
                "kind": "ResourceClaim",
                "metadata": {"namespace": NS, "name": "team-gpu"},
                "spec": {
                    "devices": {
                        "requests": [{"name": "g", "exactly": {"deviceClassName": GPU_CLASS}}]
                    }
                },
            }
        ]
    )
    spec = pod(
        resourceClaims=[
            {"name": "twogpus", "resourceClaimTemplateName": "double-gpu"},
            {"name": "shared", "resourceClaimName": "team-gpu"},
        ]
    )["spec"]
    asks = claim_asks(spec, NS, catalog)
    assert asks == (
        DeviceAsk("template", "double-gpu", None),  # this catalogue has no such template
        DeviceAsk("claim", "team-gpu", frozenset({GPU_CLASS})),
    )
    assert catalog.lookups == [("template", NS, "double-gpu"), ("claim", NS, "team-gpu")]
    # No catalogue, or no namespace to look in: nothing is known.
    assert all(not a.known for a in claim_asks(spec, None, catalog))
    assert all(not a.known for a in claim_asks(spec, NS, None))


def test_first_available_alternatives_all_count() -> None:
    spec = pod(resourceClaims=[{"name": "g", "resourceClaimTemplateName": "large-or-small"}])
    (ask,) = claim_asks(spec["spec"], NS, NVIDIA)
    assert ask.device_classes == {GPU_CLASS, "mig.nvidia.com"}


def test_extended_asks_the_implicit_name_statically_the_others_by_the_catalogue() -> None:
    implicit = f"deviceclass.resource.kubernetes.io/{GPU_CLASS}"
    names = ["cpu", "memory", "hugepages-2Mi", "example.com/foo", "nvidia.com/gpu", implicit]
    assert extended_asks(names, NVIDIA) == (
        DeviceAsk("extended", implicit, frozenset({GPU_CLASS})),
        DeviceAsk("extended", "nvidia.com/gpu", frozenset({GPU_CLASS})),
    )
    # Without a catalogue only the implicit name is known; any other extended name may be
    # served by a DeviceClass no one has told us of.
    assert extended_asks(names, None) == (
        DeviceAsk("extended", implicit, frozenset({GPU_CLASS})),
        DeviceAsk("extended", "example.com/foo", None),
        DeviceAsk("extended", "nvidia.com/gpu", None),
    )
    assert not may_be_device_backed("kubernetes.io/batch")
    assert not may_be_device_backed("requests.example.com/x")


def test_asks_say_what_they_are() -> None:
    assert DeviceAsk("template", "double-gpu", frozenset({GPU_CLASS})).text() == (
        "claim template double-gpu -> gpu.nvidia.com"
    )
    assert DeviceAsk("claim", "c", None).text() == "claim c not known yet"
    assert DeviceAsk("extended", "nvidia.com/gpu", frozenset({GPU_CLASS})).text() == (
        "nvidia.com/gpu mapped by DeviceClass gpu.nvidia.com"
    )


# -- the pod class ---------------------------------------------------------------------------


def test_each_of_the_three_forms_puts_a_gpu_pod_in_the_gpu_class() -> None:
    plugin = pod(EXTENDED_POD)["spec"]
    implicit = pod(
        EXTENDED_POD,
        containers=[
            {
                "name": "c",
                "resources": {"limits": {f"deviceclass.resource.kubernetes.io/{GPU_CLASS}": "1"}},
            }
        ],
    )["spec"]
    claim = CLAIM_POD["spec"]
    for spec in (plugin, implicit, claim):
        found = classify_pod(POLICY, spec, namespace=NS, devices=NVIDIA)
        assert found is not None and found.name == "gpu"
    # The extended-resource pods need no catalogue; the claim pod does.
    assert (
        classify_pod(POLICY, plugin) == classify_pod(POLICY, implicit) == POLICY.spec.pod_classes[0]
    )
    assert classify_pod(POLICY, claim) is None


def test_a_class_with_only_device_classes_takes_claim_pods() -> None:
    catalog = FakeCatalog(
        templates={
            (NS, "fpga"): {
                "devices": {
                    "requests": [{"name": "f", "exactly": {"deviceClassName": "fpga.example.com"}}]
                }
            }
        }
    )
    spec = pod(resourceClaims=[{"name": "f", "resourceClaimTemplateName": "fpga"}])["spec"]
    found = pod_classification(POLICY, spec, namespace=NS, devices=catalog)
    assert found.pod_class is not None and found.pod_class.name == "fpga"
    assert found.notes() == () and found.spared == frozenset()
    # An FPGA pod keeps off the nodes reserved for GPU pods, as any other pod does.
    assert "reserved:gpu" in _names(pod_gates(POLICY, None, found.pod_class, found.spared))


def test_policy_order_decides_and_no_class_a_pod_asks_for_keeps_it_off_its_nodes() -> None:
    catalog = FakeCatalog(
        templates={
            (NS, "fpga"): {
                "devices": {
                    "requests": [{"name": "f", "exactly": {"deviceClassName": "fpga.example.com"}}]
                }
            }
        }
    )
    both = pod(EXTENDED_POD, resourceClaims=[{"name": "f", "resourceClaimTemplateName": "fpga"}])[
        "spec"
    ]
    found = pod_classification(POLICY, both, namespace=NS, devices=catalog)
    assert found.pod_class is not None and found.pod_class.name == "gpu"  # first in the policy
    # It needs an FPGA node too: the fpga class's "unreserved" gate would keep it off them all.
    assert found.spared == {"fpga"}
    assert "reserved:fpga" not in _names(pod_gates(POLICY, None, found.pod_class, found.spared))
    # The same order with the classes swapped.
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["podClasses"] = [FPGA, doc["spec"]["podClasses"][0]]
    swapped = parse_policy(yaml.safe_dump(doc))
    again = pod_classification(swapped, both, namespace=NS, devices=catalog)
    assert again.pod_class is not None and again.pod_class.name == "fpga"


def test_an_unknown_template_leaves_the_class_in_doubt_and_spares_its_gates() -> None:
    """A claim template the catalogue has not seen (created a moment ago, or the watch has not
    synced) may ask for GPUs: the pod is classified by what is known, and gets no gate that
    keeps it off nodes reserved for a class it may be in."""
    for catalog in (FakeCatalog(), None):
        found = pod_classification(POLICY, CLAIM_POD["spec"], namespace=NS, devices=catalog)
        assert found.pod_class is None
        assert found.doubt == ("gpu", "fpga")
        assert found.spared == {"gpu", "fpga"}
        assert found.notes() == (
            "claim template double-gpu not known yet: classified by requests only",
        )
        gates = _names(pod_gates(POLICY, None, found.pod_class, found.spared))
        assert not {"reserved:gpu", "reserved:fpga"} & gates
    # Known, the same pod is a GPU pod, and keeps off the FPGA nodes.
    known = pod_classification(POLICY, CLAIM_POD["spec"], namespace=NS, devices=NVIDIA)
    assert known.pod_class is not None and known.pod_class.name == "gpu"
    assert known.notes() == () and known.spared == frozenset()


def test_doubt_is_only_about_classes_that_could_change_anything() -> None:
    # First in policy order by its request: no unknown ask can move it to another class, but
    # the unknown claim may still be for an FPGA.
    spec = pod(EXTENDED_POD, resourceClaims=[{"name": "x", "resourceClaimName": "mystery"}])
    found = pod_classification(POLICY, spec["spec"], namespace=NS, devices=NVIDIA)
    assert found.pod_class is not None and found.pod_class.name == "gpu"
    assert found.doubt == ("fpga",) and found.spared == {"fpga"}
    assert found.notes() == ("claim mystery not known yet: classified by what is known",)
    # A policy where no class names deviceClasses: claims cannot matter, and are not read.
    plain: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    del plain["spec"]["podClasses"][0]["deviceClasses"]
    none = pod_classification(parse_policy(yaml.safe_dump(plain)), CLAIM_POD["spec"])
    assert none.asks == () and none.doubt == () and none.pod_class is None


def test_the_projects_own_resources_are_never_taken_for_devices() -> None:
    """A steered pod carries pool and gate requests under the resource prefix: they must not make
    its reinvocation look like a device pod (the patch would then change)."""
    spec = pod(
        EXTENDED_POD,
        containers=[
            {
                "name": "c",
                "resources": {
                    "requests": {"cpu": "1", "kube-steer.github.io/unreserved-gpu": "1"},
                    "limits": {"kube-steer.github.io/unreserved-gpu": "1"},
                },
            }
        ],
    )["spec"]
    found = pod_classification(POLICY, spec)
    assert found.asks == () and found.doubt == ()

"""The admission latency bench's pure parts (bench/admission_latency.py): which pod a create
sends, the bodies it POSTs, how a pod's trace names the path that steered it, the summary of a
run (warm-up left out, errors and wrong steering counted apart from the latencies), the
apiserver's histogram sums and the table."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest

from bench.admission_latency import (
    FLOOR_VIA,
    RUN_LABEL,
    WEBHOOK_TRACE,
    Sample,
    admission_sums,
    admit_step_mean_ms,
    bench_namespace_labels,
    floor_policy_objects,
    markdown,
    mutating_policy_objects,
    pod_body,
    pod_kind,
    pod_post_mean_ms,
    pod_shapes,
    ratio,
    server_means_ms,
    steered_by,
    summarise,
)
from bench.benchkit.realistic import realistic_pod
from steer.adapters.policy_file import load_policy_file
from steer.core.admission_policy.mutating import TRACE_VIA
from steer.core.mutation import MutationPlan
from steer.core.steering import trace_annotation_key

ROOT = Path(__file__).resolve().parent.parent
POLICY = load_policy_file(str(ROOT / "examples" / "policy.yaml"))
TRACE_KEY = trace_annotation_key(POLICY)


def sample(
    index: int, ms: float, *, warmup: bool = False, status: int = 201, via: str | None = None
) -> Sample:
    return Sample(index, "service", warmup, 0.0, ms / 1000, status, via)


@pytest.mark.parametrize(("share", "gpus"), [(0.0, 0), (0.1, 10), (0.25, 25), (1.0, 100)])
def test_gpu_jobs_are_spread_evenly_at_the_share(share: float, gpus: int) -> None:
    kinds = [pod_kind(i, share) for i in range(100)]
    assert kinds.count("gpu") == gpus
    if 0 < share < 1:
        firsts = [i for i, k in enumerate(kinds) if k == "gpu"]
        assert {b - a for a, b in itertools.pairwise(firsts)} == {round(1 / share)}


def test_the_bench_namespace_is_opted_in_and_of_the_first_tenant() -> None:
    labels = bench_namespace_labels(POLICY)
    plan = MutationPlan.from_policy(POLICY)
    assert plan.opted_in("bench-admission", labels)
    tenant = plan.tenant(labels)
    assert tenant is not None
    assert tenant.name == POLICY.spec.tenants[0].name


def test_the_pods_are_realistic_and_named_per_run() -> None:
    shapes = pod_shapes(bench_namespace_labels(POLICY))
    gpu = realistic_pod(shapes["gpu"])
    body = orjson.loads(pod_body(gpu, "policy-1-00007", "policy-1"))
    assert body["metadata"]["name"] == "policy-1-00007"
    assert "generateName" not in body["metadata"]
    assert body["metadata"]["labels"][RUN_LABEL] == "policy-1"
    assert RUN_LABEL not in gpu["metadata"]["labels"]  # the template is left as it was
    containers = body["spec"]["containers"]
    assert len(containers) == 2
    assert containers[0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "schedulerName" not in body["spec"]


def test_the_trace_names_the_path() -> None:
    def pod(trace: dict[str, object] | None) -> dict[str, object]:
        annotations = {TRACE_KEY: orjson.dumps(trace).decode()} if trace is not None else {}
        return {"metadata": {"annotations": annotations}}

    assert steered_by(pod(None), TRACE_KEY) is None
    assert steered_by(pod({"policy": "v1", "rules": []}), TRACE_KEY) == WEBHOOK_TRACE
    assert steered_by(pod({"policy": "v1", "via": TRACE_VIA}), TRACE_KEY) == TRACE_VIA


def test_the_summary_leaves_out_the_warm_up_and_the_errors() -> None:
    samples = [sample(i, 1000.0, warmup=True, via=WEBHOOK_TRACE) for i in range(5)]
    samples += [sample(5 + i, float(i + 1), via=WEBHOOK_TRACE) for i in range(100)]
    samples += [sample(200, 0.5, status=0), sample(201, 0.7, status=500)]
    samples += [sample(202, 2.0, via=None)]  # admitted unsteered: failurePolicy Ignore
    summary = summarise(samples, WEBHOOK_TRACE)
    assert summary.pods == 103
    assert summary.errors == 2
    assert summary.wrong_steering == 1
    assert summary.p50_ms == 50.0  # nearest rank over the 101 latencies of 201 answers
    assert summary.p99_ms == 99.0
    assert summary.max_ms == 100.0
    assert summary.late == 0


def test_a_late_start_shows_in_the_wait_from_the_slot() -> None:
    on_time = [sample(i, 10.0) for i in range(99)]
    late = Sample(99, "gpu", False, 0.5, 0.010, 201, None)  # every client thread was busy
    summary = summarise([*on_time, late], None)
    assert summary.p99_ms == 10.0
    assert summary.late == 1
    assert summary.max_lag_ms == 500.0
    assert summary.p99_from_slot_ms == 10.0  # the 100th of 100 is above the 99th
    summary = summarise([*on_time, late, late], None)
    assert summary.p99_from_slot_ms == 510.0


def test_a_summary_of_nothing_has_no_figures() -> None:
    summary = summarise([sample(0, 1.0, warmup=True)], None)
    assert (summary.pods, summary.p50_ms, summary.max_ms, summary.mean_ms) == (0, None, None, None)
    assert ratio(None, 1.0) is None
    assert ratio(2.0, 0.0) is None
    assert ratio(3.0, 2.0) == 1.5


def test_the_apiserver_sums_keep_pod_posts_and_admission() -> None:
    text = "\n".join(
        [
            "# HELP apiserver_request_duration_seconds ...",
            'apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",'
            'resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2',
            'apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",'
            'resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 100',
            'apiserver_request_duration_seconds_sum{dry_run="",resource="nodes",subresource="",'
            'verb="POST"} 9',
            'apiserver_request_duration_seconds_sum{dry_run="",resource="pods",subresource="binding",'
            'verb="POST"} 9',
            'apiserver_request_duration_seconds_bucket{dry_run="",resource="pods",subresource="",'
            'verb="POST",le="0.1"} 100',
            'apiserver_admission_step_admission_duration_seconds_sum{operation="CREATE",'
            'rejected="false",type="admit"} 0.5',
            'apiserver_admission_step_admission_duration_seconds_count{operation="CREATE",'
            'rejected="false",type="admit"} 100',
            'apiserver_storage_objects{resource="pods"} 3',
        ]
    )
    sums = admission_sums(text)
    assert sums == {
        "apiserver_request_duration_seconds_sum{dry_run=}": 2.0,
        "apiserver_request_duration_seconds_count{dry_run=}": 100.0,
        "apiserver_admission_step_admission_duration_seconds_sum"
        "{operation=CREATE,rejected=false,type=admit}": 0.5,
        "apiserver_admission_step_admission_duration_seconds_count"
        "{operation=CREATE,rejected=false,type=admit}": 100.0,
    }
    means = server_means_ms(sums)
    assert pod_post_mean_ms(means) == 20.0
    assert admit_step_mean_ms(means) == 5.0


def test_the_table_has_a_row_per_mode_with_the_ratio_to_none() -> None:
    def entry(p50: float, p99: float, apiserver_cpu: float = 5.0) -> dict[str, object]:
        return {
            "pods": 1000,
            "errors": 0,
            "wrong_steering": 0,
            "p50_ms": p50,
            "p99_ms": p99,
            "max_ms": p99 * 2,
            "late": 0,
            "p99_from_slot_ms": p99,
            "apiserver_post_mean_ms": p50 - 2,
            "admit_step_mean_ms": 1.0,
            "cpu_ms_per_pod": {"apiserver": apiserver_cpu, "total": apiserver_cpu + 1},
        }

    doc = {
        "args": {"rate": 50.0, "seconds": 20.0, "clients": 8, "warmup": 3.0},
        "rounds": 1,
        "loadavg_before": [1.0, 1.0, 1.0],
        "summary": {
            "none": entry(10, 20),
            "webhook": entry(15, 40, apiserver_cpu=9.0),
            "policy": entry(12, 30, apiserver_cpu=6.5),
        },
    }
    lines = markdown(doc).splitlines()
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| none", "| webhook", "| policy"]
    assert "| 1.50 | 2.00 |" in rows[1]
    assert "| 1.20 | 1.50 |" in rows[2]
    # The apiserver's own CPU per pod and its ratio to none's: what policy mode is judged by.
    assert rows[0].endswith("| 5.0 (1.00) |")
    assert rows[1].endswith("| 9.0 (1.80) |")
    assert rows[2].endswith("| 6.5 (1.30) |")


def test_the_floor_mode_is_one_constant_patch_on_the_pods_steer_mutation_matches() -> None:
    """`floor` measures the MutatingAdmissionPolicy mechanism: the same matchConstraints as
    the compiled steer-mutation, nothing evaluated but one constant JSONPatch (the trace
    annotation, its `/` escaped as `~1`), never reinvoked; its binding matches the same."""
    steer_mutation = next(
        o for o in mutating_policy_objects() if o["kind"] == "MutatingAdmissionPolicy"
    )
    policy, binding = floor_policy_objects([steer_mutation], TRACE_KEY)
    spec = policy["spec"]
    assert spec["matchConstraints"] == steer_mutation["spec"]["matchConstraints"]
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "matchResources": spec["matchConstraints"],
    }
    assert spec["reinvocationPolicy"] == "Never"
    assert "matchConditions" not in spec and "variables" not in spec
    (mutation,) = spec["mutations"]
    expression = mutation["jsonPatch"]["expression"]
    assert TRACE_KEY.replace("/", "~1") in expression
    assert orjson.dumps(orjson.dumps({"via": FLOOR_VIA}).decode()).decode() in expression

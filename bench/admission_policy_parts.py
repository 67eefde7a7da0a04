"""What each part of `steer-mutation` costs the apiserver: CPU per pod create, variant by variant.

    .venv/bin/python bench/admission_policy_parts.py                  # every variant, ~5 min
    .venv/bin/python bench/admission_policy_parts.py --creates 3000 --repeats 3
    .venv/bin/python bench/admission_policy_parts.py --variants none,floor,policy
    .venv/bin/python bench/admission_policy_parts.py --report bench/results/admission-policy-parts-<ts>.json

bench/admission_latency.py says what policy mode costs as a whole; this says where it goes, so
a change to the compiled policy (steer/core/admission_policy/mutating.py) is judged by the part
it changes. One real kube-apiserver v1.36.2 (etcd beside it, no scheduler, no controller
manager) and the namespace and pods of bench/admission_latency.py (examples/policy.yaml's
tenant dept-a, opted in; a Deployment's 5-8 KiB pod, every tenth a GPU job). Each variant is a
MutatingAdmissionPolicy and binding built from the one `steer policy admission-policy
--mutating` compiles, applied alone; a dry-run probe must come back with the variant's trace
before it is measured. Then --repeats times --creates dry-run creates (`dryRun=All`: admission
runs in full, nothing is stored, so etcd and the watch caches stay out of the figure) from 4
client threads, and the apiserver's CPU time from /proc over them, per create.

The variants:

- `none`: no policy: what a create costs the apiserver without one;
- `floor`: bench/admission_latency.py's `floor` (steer-mutation's matchConstraints, one
  constant JSONPatch, no condition, never reinvoked): the MutatingAdmissionPolicy mechanism;
- `policy`: steer-mutation as compiled (one matchCondition, `reinvocationPolicy: IfNeeded`);
- `policy-never`: the same, never reinvoked: the difference is the second pass;
- `no-condition`: the same, with no matchCondition and never reinvoked (what the condition and
  the second pass cost together; it steers infrastructure pods and DRA pods as well, which the
  bench's pods are not);
- `condition`: steer-mutation's matchCondition with a constant patch (the trace annotation),
  never reinvoked: the condition on the first pass;
- `condition-true`: a matchCondition `true` with the constant patch: what any condition costs
  (the pod converted for it);
- `part-<name>`: no condition, never reinvoked, the patch of one part (`MUTATION_PARTS`:
  preferred terms, resources, tolerations, spread, schedulerName, trace) beside the constant
  trace annotation (the trace part alone for `part-trace`): that part's CEL and its JSON Patch
  operations, over `floor`.

The figures are CPU of a 2-core machine shared with the client: compare variants of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.admission_latency import (  # noqa: E402
    EXAMPLE_POLICY,
    FLOOR_VIA,
    NAMESPACE,
    bench_namespace_labels,
    constant_trace_patch,
    cpu_seconds,
    create_objects,
    delete_objects,
    floor_policy_objects,
    mutating_policy_objects,
    pod_body,
    pod_shapes,
    steered_by,
)
from bench.benchkit.api import Api  # noqa: E402
from bench.benchkit.progress import log  # noqa: E402
from bench.benchkit.provenance import loadavg, product_changes, source_version  # noqa: E402
from bench.benchkit.realistic import realistic_pod  # noqa: E402
from bench.benchkit.results import (  # noqa: E402
    recorded_args,
    results_file,
    run_workdir,
    utc_stamp,
    write_results,
)
from kits.control_plane import ControlPlane  # noqa: E402
from steer.adapters.policy_file import load_policy_file  # noqa: E402
from steer.core.admission_policy.mutating import (  # noqa: E402
    MUTATION_PARTS,
    TRACE_VIA,
    mutation_parts,
)
from steer.core.policy import Policy  # noqa: E402
from steer.core.steering import trace_annotation_key  # noqa: E402

PART_VIA = "part"  # the constant trace the part variants write
CLIENTS = 4
PROBE_TIMEOUT_S = 60.0

Objects = list[dict[str, Any]]


@dataclass(frozen=True)
class Variant:
    name: str
    about: str
    objects: Objects  # the MutatingAdmissionPolicy and its binding; none for `none`
    steered_by: str | None  # the trace `via` a created pod carries (None: no trace)


# -- the variants (pure, given the compiled objects) ---------------------------------------------


def derived(
    compiled: Objects,
    name: str,
    *,
    expression: str | None = None,
    condition: str | bool | None = True,
    reinvocation: str | None = None,
) -> Objects:
    """steer-mutation and its binding renamed `bench-<name>`, with the patch `expression`,
    the matchCondition kept (True), replaced by the CEL `condition`, or removed (None), and
    `reinvocation` as its reinvocationPolicy, when given."""
    policy = copy.deepcopy(next(o for o in compiled if o["kind"] == "MutatingAdmissionPolicy"))
    binding = copy.deepcopy(next(o for o in compiled if o["kind"] != "MutatingAdmissionPolicy"))
    policy["metadata"] = {"name": f"bench-{name}"}
    binding["metadata"] = {"name": f"bench-{name}"}
    binding["spec"]["policyName"] = f"bench-{name}"
    spec = policy["spec"]
    if expression is not None:
        (mutation,) = spec["mutations"]
        mutation["jsonPatch"]["expression"] = expression
    if condition is None:
        spec.pop("matchConditions", None)
    elif isinstance(condition, str):
        spec["matchConditions"] = [{"name": "bench-condition", "expression": condition}]
    if reinvocation is not None:
        spec["reinvocationPolicy"] = reinvocation
    return [policy, binding]


def variants(policy: Policy, compiled: Objects) -> list[Variant]:
    """Every variant, in the order run (module docstring)."""
    trace_key = trace_annotation_key(policy)
    constant = constant_trace_patch(trace_key, PART_VIA)
    parts = mutation_parts(policy)
    out = [
        Variant("none", "no policy", [], None),
        Variant(
            "floor",
            "one constant patch, no condition, never reinvoked",
            floor_policy_objects(compiled, trace_key),
            FLOOR_VIA,
        ),
        Variant("policy", "steer-mutation as compiled", compiled, TRACE_VIA),
        Variant(
            "policy-never",
            "steer-mutation, never reinvoked",
            derived(compiled, "policy-never", reinvocation="Never"),
            TRACE_VIA,
        ),
        Variant(
            "no-condition",
            "steer-mutation without its matchCondition, never reinvoked",
            derived(compiled, "no-condition", condition=None, reinvocation="Never"),
            TRACE_VIA,
        ),
        Variant(
            "condition",
            "steer-mutation's matchCondition, a constant patch, never reinvoked",
            derived(compiled, "condition", expression=constant, reinvocation="Never"),
            PART_VIA,
        ),
        Variant(
            "condition-true",
            "a matchCondition `true`, a constant patch, never reinvoked",
            derived(
                compiled,
                "condition-true",
                expression=constant,
                condition="true",
                reinvocation="Never",
            ),
            PART_VIA,
        ),
    ]
    for part in MUTATION_PARTS:
        expression = parts[part] if part == "trace" else f"{parts[part]} + {constant}"
        out.append(
            Variant(
                f"part-{part}",
                f"the {part} part of the patch, no condition, never reinvoked",
                derived(
                    compiled,
                    f"part-{part}",
                    expression=expression,
                    condition=None,
                    reinvocation="Never",
                ),
                TRACE_VIA if part == "trace" else PART_VIA,
            )
        )
    return out


def chosen(all_variants: Sequence[Variant], text: str | None) -> list[Variant]:
    if not text:
        return list(all_variants)
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {v.name: v for v in all_variants}
    unknown = sorted(set(names) - set(known))
    if unknown or not names:
        raise SystemExit(f"--variants: unknown {unknown}; choose from {', '.join(known)}")
    return [known[n] for n in names]


def markdown(doc: Mapping[str, Any]) -> str:
    rows = doc["variants"]
    floor = next((r["cpu_ms"] for r in rows if r["name"] == "floor"), None)
    none = next((r["cpu_ms"] for r in rows if r["name"] == "none"), None)
    lines = [
        f"Apiserver CPU per dry-run pod create, {doc['args']['creates']} creates x "
        f"{doc['args']['repeats']} per variant, {CLIENTS} client threads, load average "
        f"{doc['loadavg_before']} before.",
        "",
        "| variant | what | CPU ms per create (each repeat) | mean | over none | over floor |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in rows:
        each = " / ".join(f"{x:.2f}" for x in row["each_ms"])
        over_none = f"{row['cpu_ms'] - none:+.2f}" if none is not None else "-"
        over_floor = f"{row['cpu_ms'] - floor:+.2f}" if floor is not None else "-"
        lines.append(
            f"| {row['name']} | {row['about']} | {each} | {row['cpu_ms']:.2f} "
            f"| {over_none} | {over_floor} |"
        )
    return "\n".join(lines)


# -- I/O ------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, plane: ControlPlane, templates: Mapping[str, Mapping[str, Any]]) -> None:
        self.plane = plane
        self.api = Api(plane, pool=2 * CLIENTS)
        process = plane.components["kube-apiserver"].process
        if process is None:
            raise RuntimeError("kube-apiserver is not running")
        self.pids = {"apiserver": [process.pid]}
        self.templates = templates

    def body(self, index: int) -> bytes:
        kind = "gpu" if index % 10 == 0 else "service"
        return pod_body(self.templates[kind], f"parts-{index}", "parts")

    def create(self, body: bytes) -> tuple[int, bytes]:
        resp = self.api.session.post(
            f"{self.plane.url}/api/v1/namespaces/{NAMESPACE}/pods",
            data=body,
            params={"dryRun": "All"},
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        return resp.status_code, resp.content

    def creates(self, count: int) -> list[tuple[int, bytes]]:
        bodies = [self.body(i) for i in range(count)]
        with ThreadPoolExecutor(CLIENTS) as pool:
            return list(pool.map(self.create, bodies))

    def wait_steered(self, variant: Variant, trace_key: str) -> None:
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while time.monotonic() < deadline:
            status, data = self.create(self.body(1))
            if status == 201 and steered_by(orjson.loads(data), trace_key) == variant.steered_by:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{variant.name}: the probe pod is not steered as {variant.steered_by}")

    @contextlib.contextmanager
    def installed(self, variant: Variant) -> Iterator[None]:
        paths: list[str] = []
        try:
            paths += create_objects(self.api, variant.objects)
            yield
        finally:
            delete_objects(self.api, paths)

    def measure(self, variant: Variant, trace_key: str, args: argparse.Namespace) -> dict[str, Any]:
        with self.installed(variant):
            self.wait_steered(variant, trace_key)
            self.creates(200)  # the policy's compiled programs warm
            each = []
            for _ in range(args.repeats):
                before = cpu_seconds(self.pids)["apiserver"]
                answers = self.creates(args.creates)
                after = cpu_seconds(self.pids)["apiserver"]
                failed = [s for s, _ in answers if s != 201]
                if failed:
                    raise RuntimeError(f"{variant.name}: {len(failed)} creates failed")
                wrong = sum(
                    1
                    for _, d in answers
                    if steered_by(orjson.loads(d), trace_key) != variant.steered_by
                )
                if wrong:
                    raise RuntimeError(
                        f"{variant.name}: {wrong} pods not steered the variant's way"
                    )
                each.append((after - before) * 1000 / args.creates)
        # Let the apiserver's informers drop the policy before the next one.
        time.sleep(2)
        row = {
            "name": variant.name,
            "about": variant.about,
            "each_ms": [round(x, 3) for x in each],
            "cpu_ms": round(sum(each) / len(each), 3),
        }
        log(
            f"{variant.name}: {row['cpu_ms']:.2f} ms of apiserver CPU per create ({row['each_ms']})"
        )
        return row


def run_bench(args: argparse.Namespace) -> int:
    policy = load_policy_file(str(EXAMPLE_POLICY))
    labels = bench_namespace_labels(policy)
    templates = {kind: realistic_pod(shape) for kind, shape in pod_shapes(labels).items()}
    compiled = mutating_policy_objects()
    todo = chosen(variants(policy, compiled), args.variants)
    trace_key = trace_annotation_key(policy)
    stamp = utc_stamp()
    source = source_version()
    out_file = results_file(args.json, "admission-policy-parts", stamp)
    load_before = loadavg()
    began = time.monotonic()
    rows = []
    with contextlib.ExitStack() as stack:
        workdir = run_workdir(stack, args.workdir, "steer-admission-policy-parts-")
        log("starting etcd and kube-apiserver")
        plane = stack.enter_context(
            ControlPlane.start(workdir / "plane", scheduler=False, controller_manager=False)
        )
        plane.ensure_namespace(NAMESPACE, labels)
        bench = Bench(plane, templates)
        log(f"settling: {args.settle} unsteered creates")
        bench.creates(args.settle)
        for variant in todo:
            rows.append(bench.measure(variant, trace_key, args))
    doc = {
        "section": "admission-policy-parts",
        "started": stamp,
        "source": source,
        "product_changes": product_changes(),
        "runtime_s": round(time.monotonic() - began, 1),
        "args": recorded_args(args),
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "variants": rows,
    }
    write_results(out_file, doc)
    print(markdown(doc))
    log(f"results written to {out_file}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--variants", help="comma-separated, run in this order (default: every variant)"
    )
    parser.add_argument(
        "--creates", type=int, default=1500, help="dry-run creates per repeat (default 1500)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="repeats per variant (default 2)")
    parser.add_argument(
        "--settle",
        type=int,
        default=1500,
        help="unsteered creates on the fresh apiserver first, not counted (default 1500)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="results file (default bench/results/admission-policy-parts-<ts>.json)",
    )
    parser.add_argument("--workdir", type=Path, help="keep logs here (default: a temporary folder)")
    parser.add_argument(
        "--report", type=Path, metavar="JSON", help="print the table of a results file, no run"
    )
    args = parser.parse_args(argv)
    if args.report:
        print(markdown(json.loads(args.report.read_text())))
        return 0
    if args.creates < 1 or args.repeats < 1 or args.settle < 0:
        parser.error("--creates and --repeats must be >= 1, --settle >= 0")
    return run_bench(args)


if __name__ == "__main__":
    sys.exit(main())

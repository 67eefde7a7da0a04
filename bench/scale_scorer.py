"""The scorer at scale: `steer scorer run` on a real kube-apiserver with 5,000 fake nodes and
100,000 bound pods (or fewer), measured as the service it is.

    .venv/bin/python bench/scale_scorer.py --nodes 5000 --pods 100000
    .venv/bin/python bench/scale_scorer.py --nodes 1000 --pods 20000
    .venv/bin/python bench/scale_scorer.py --quick        # 200 nodes, 2,000 pods: smoke

Not a test: it asserts nothing, it measures. A markdown table (each goal, the value measured,
met or not) goes to stdout, progress to stderr, everything to
bench/results/scale-scorer-<UTC stamp>.json (or --json PATH). `run(args)` and
`add_arguments(parser)` let bench/scale.py offer it as a section.

Goals (the project's scale issue):
1. scorer RSS, peak (VmHWM) and steady (VmRSS over the steady cycles), <= 300 MiB;
2. process CPU per steady cycle (utime + stime from /proc/<pid>/stat between two cycle log
   lines: the cycle, and whatever the process did until the next one) <= 1 s, median and
   max; Prometheus's own CPU over the same spans is read at the same moments and reported
   beside it (the cycle's queries cost it, not the scorer);
3. time from the scorer's start until every node carries its budget pool and gates in
   `status.allocatable` <= 60 s; the time until every node carries its composite label is
   reported beside it;
4. after the steady state, bursts of pods bound to a few nodes, then to many: the scorer's
   writes (its `steer_scorer_write_requests_total`, the apiserver's node PATCHes by
   subresource, the node events a watch sees) and the node LISTs the apiserver served during
   each burst; goal: at most one status write per node per burst (labels only where the
   hot-node penalty moves a composite), and no node LIST.

The cluster (no kubelets, no scheduler, no controller manager):
- etcd (backend quota raised to 8 GiB) and kube-apiserver v1.36.2 with raised inflight limits
  (APISERVER_ARGS), from kits.control_plane.
- N Nodes created with their status (capacity = allocatable: 64 cores, 256 GiB, 110 pods; every
  4th node 8 `nvidia.com/gpu`; Ready; nodeInfo, addresses, ~35 images, cloud-style labels and
  annotations: 8-10 KB a Node, as real ones are).
- P pods created with `spec.nodeName` set (bound, no scheduler), ~7.5 KB each (a Deployment's
  pod: labels, annotations, owner reference, env, probes, volumes, a sidecar; the service
  account token volume the apiserver adds), then given a kubelet-like status (Running,
  PodScheduled an hour ago, container statuses): the scorer starts on a cluster whose pods
  were bound long ago, so the hot-node window counts none of them. The mix: ~1/3 plain pods
  in namespaces that are not opted in; ~1/3 tenant pods (`tenant=dept-a` / `dept-b` +
  `kube-steer.github.io/enabled=true`); ~28 % opted-in pods of no tenant; 5 % GPU pods
  (`nvidia.com/gpu: 1`, on GPU nodes only, most of them dept-a). Every opted-in pod carries what
  the webhook adds: `steer.core.mutation.mutate_pod(MutationPlan.from_policy(policy), pod, tenant)`
  applied with jsonpatch, so the shape follows the product. Non-GPU pods are spread evenly
  over all nodes.
- Prometheus 2.x (evaluating the shipped recording rules unless --no-recording-rules)
  backfilled with promtool (kits.prometheus_server, as bench/scorer_bench.py does)
  from a `SyntheticCluster` (kits.synthetic_exporter) with the same node names: DCGM series for
  the GPU nodes, Kepler >= 0.10, kube-state-metrics allocatable, blackbox probes (3 % failing),
  ±2 % noise on every gauge at every sample, one sample every --prom-step s from 6 minutes
  before the scorer starts to --horizon minutes after (Prometheus answers "now" from the
  backfilled blocks; nothing is scraped). kube-state-metrics' per-container limits would be
  2 series per pod; the overcommit dimension only ever sees their sum per node, so each node
  gets one container series whose limits are the sum of its pods' (the same answer to the
  same query from 1/20 of the series).

The scorer: `python -m launcher scorer run --policy <copy of examples/policy.yaml>
--prometheus <url> --kubeconfig <admin kubeconfig> --no-leader-election --listen
127.0.0.1:<port>`, the real service, in its own process. The policy copy differs from the
example only in `prometheus.url` (and `scoring.intervalSeconds` if --interval is given); write
rates stay at the example's (labels 20/s, gates and pools 100/s), so the first labelling of
5,000 nodes takes minutes by design.

Method: a node watch (opened before the scorer starts; its initial LIST is then done) notes
when each node first carries `<resourcePrefix>pool-cpu` in `status.allocatable` and the
composite label, and classifies every later node event as a status change (an owned resource
moved) or a metadata change (owned labels, annotations, taints). Watching instead of polling a
LIST: a LIST of 5,000 Nodes is ~50 MB for the apiserver and this process on two shared cores,
and it would be counted with the scorer's LISTs; one LIST confirms the count at the end of the
publication phase. The scorer's log is tailed for its cycle lines; at each one this process
reads the scorer's /proc/<pid>/stat and status. Cycles 1 and 2 are the initial ones (every node
labelled; the debounced taints set); steady cycles are the next --steady-cycles ones. Bursts
start right after a cycle line, so the next periodic cycle (and its node LIST) falls after the
burst; a burst ends when no node event came for --quiet s; whether a periodic cycle overlapped
anyway is checked and reported.

Creating 100,000 pods and their statuses takes several minutes on the 2-core machine (timed
and reported); other work on the machine shows in the load averages recorded in the JSON.
The scorer runs the working tree as it is when it starts (others edit the same tree): the JSON
names that commit and the product files then modified, beside the commit at the bench's start.

Diagnostics, with py-spy (not a project dependency; `--py-spy PATH` or on PATH): `--profile`
samples the thread holding the GIL over the steady cycles and puts the functions with the most
samples into the JSON; `--stack-dumps S` dumps every thread's stack every S s until every node
is published. `--report JSON` prints the tables of an earlier run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit.api import Api  # noqa: E402
from bench.benchkit.backfill import backfilled_prometheus, synthetic_cluster  # noqa: E402
from bench.benchkit.bursts import burst_specs, overlapped, run_burst  # noqa: E402
from bench.benchkit.metrics_text import apiserver_requests, delta  # noqa: E402
from bench.benchkit.node_watch import NodeWatch  # noqa: E402
from bench.benchkit.nodes import FakeNode, create_nodes, fake_nodes  # noqa: E402
from bench.benchkit.plane import ETCD_QUOTA_BYTES, ScalePlane  # noqa: E402
from bench.benchkit.pods import (  # noqa: E402
    BOUND_LONG_AGO_S,
    PodSpec,
    Template,
    create_pods,
    ensure_namespaces,
    namespaces,
    pod_plan,
    set_pod_statuses,
    templates,
)
from bench.benchkit.procstat import read_proc  # noqa: E402
from bench.benchkit.progress import WORKERS, log  # noqa: E402
from bench.benchkit.provenance import loadavg, product_changes, source_version  # noqa: E402
from bench.benchkit.publication import wait_publication  # noqa: E402
from bench.benchkit.results import (  # noqa: E402
    recorded_args,
    results_file,
    run_workdir,
    utc_stamp,
    write_results,
)
from bench.benchkit.scorer_process import ScorerProcess  # noqa: E402
from bench.benchkit.scorer_report import report  # noqa: E402
from bench.benchkit.scorer_summary import (  # noqa: E402
    SteadyWindow,
    profile_summary,
    summarise,
    timeline,
)
from steer.core.policy import parse_policy  # noqa: E402

EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
RECORDING_RULES = ROOT / "manifests/components/prometheus-operator/recording-rules.yaml"
APISERVER_ARGS = (
    "--max-requests-inflight=3000",
    "--max-mutating-requests-inflight=1000",
)


# -- the run --------------------------------------------------------------------------------------


def policy_copy(prom_url: str, interval: int | None) -> tuple[str, dict[str, Any]]:
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    changes: dict[str, Any] = {"spec.prometheus.url": prom_url}
    doc["spec"]["prometheus"]["url"] = prom_url
    if interval is not None:
        doc["spec"]["scoring"]["intervalSeconds"] = interval
        changes["spec.scoring.intervalSeconds"] = interval
    return yaml.safe_dump(doc, sort_keys=False), changes


def object_sizes(api: Api, nodes: Sequence[FakeNode], specs: Sequence[PodSpec]) -> dict[str, Any]:
    """Bytes of the JSON the apiserver returns for a node and a pod of each kind."""
    out: dict[str, Any] = {}
    for node in [*nodes[:1], *[n for n in nodes if n.gpus][:1]]:
        out[f"node ({'gpu' if node.gpus else 'cpu'})"] = len(
            api.send("GET", f"/api/v1/nodes/{node.name}").content
        )
    seen: set[str] = set()
    sizes = []
    for spec in specs:
        if spec.kind in seen:
            continue
        seen.add(spec.kind)
        size = len(api.send("GET", f"/api/v1/namespaces/{spec.namespace}/pods/{spec.name}").content)
        out[f"pod {spec.kind}"] = size
        sizes.append(size)
    if sizes:
        out["pod mean of kinds"] = round(statistics.mean(sizes))
    return out


def run(args: argparse.Namespace) -> int:
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return 0
    if args.quick:
        args.nodes, args.pods = 200, 2000
    stamp = utc_stamp()
    out_file = results_file(args.json, "scale-scorer", stamp)
    source = source_version()
    began = time.monotonic()
    doc: dict[str, Any] = {
        "section": "scorer",
        "started": stamp,
        "source": source,
        "args": recorded_args(args),
        "machine": {"cpus": os.cpu_count(), "loadavg_start": loadavg()},
        "apiserver_args": list(APISERVER_ARGS),
        "etcd_quota_bytes": ETCD_QUOTA_BYTES,
    }
    log(f"scale scorer: {args.nodes:,} nodes, {args.pods:,} pods ({source})")
    with contextlib.ExitStack() as stack:
        workdir = run_workdir(stack, args.workdir, "steer-sc-")
        try:
            measure(args, workdir, doc, stack)
        except BaseException as exc:
            doc["error"] = f"{type(exc).__name__}: {exc}"
            log(f"run failed: {doc['error']}")
            if not isinstance(exc, Exception):
                raise
        finally:
            doc["runtime_s"] = round(time.monotonic() - began, 1)
            doc["machine"]["loadavg_end"] = loadavg()
            write_results(out_file, doc)
    print(report(doc))
    log(f"results written to {out_file}")
    return 1 if "error" in doc else 0


def measure(
    args: argparse.Namespace, workdir: Path, doc: dict[str, Any], stack: contextlib.ExitStack
) -> None:
    setup: dict[str, Any] = doc.setdefault("setup", {})
    t = time.monotonic()
    plane = ScalePlane.start(workdir / "plane", scheduler=False, apiserver_args=APISERVER_ARGS)
    stack.callback(plane.stop)
    api = Api(plane)
    stack.callback(api.close)
    setup["control_plane_s"] = round(time.monotonic() - t, 1)
    base_policy = parse_policy(EXAMPLE_POLICY.read_text())
    tmpl = templates(base_policy)
    doc["pod_kinds"] = {
        name: {
            "namespace_labels": dict(t.kind.namespace_labels),
            "mutated": t.mutated,
            "rules_in_effect": list(t.rules),
            "patch_ops": t.patch_ops,
        }
        for name, t in tmpl.items()
    }
    nodes = fake_nodes(args.nodes)
    log(f"creating {len(nodes):,} nodes ...")
    t = time.monotonic()
    create_nodes(api, nodes)
    setup["nodes_create_s"] = round(time.monotonic() - t, 1)
    log(f"   {len(nodes):,} nodes in {setup['nodes_create_s']} s")
    ensure_namespaces(api, namespaces())
    specs = pod_plan(nodes, args.pods, args.seed)
    setup["pods_by_kind"] = dict(Counter(s.kind for s in specs))
    bound_at = time.time() - BOUND_LONG_AGO_S
    log(f"creating {len(specs):,} bound pods ({WORKERS} threads) ...")
    setup["pods_create_s"] = round(create_pods(api, specs, tmpl), 1)
    log(f"setting {len(specs):,} pod statuses (Running, PodScheduled an hour ago) ...")
    node_ips = {n.name: n.ip for n in nodes}
    setup["pods_status_s"] = round(set_pod_statuses(api, specs, node_ips, bound_at), 1)
    setup["pods_per_s"] = round(len(specs) / max(setup["pods_create_s"], 1e-9), 1)
    setup["client_retries"] = api.retries
    setup["object_bytes"] = object_sizes(api, nodes, specs)
    log(f"   object sizes (bytes of JSON): {setup['object_bytes']}")

    log("rendering and backfilling Prometheus ...")
    cluster = synthetic_cluster(nodes, specs, tmpl, args.seed)
    rule_groups = (
        yaml.safe_load(RECORDING_RULES.read_text())["spec"]["groups"]
        if args.recording_rules
        else []
    )
    prom, prom_setup = backfilled_prometheus(
        cluster, workdir, args.prom_step, args.horizon * 60.0, rule_groups
    )
    del cluster
    doc["prometheus"] = asdict(prom_setup)
    doc["prometheus"]["recording_rules"] = [r["record"] for g in rule_groups for r in g["rules"]]
    prom.start()
    stack.callback(prom.stop)
    log(
        f"   {prom_setup.series:,} series x {prom_setup.samples // max(prom_setup.series, 1)} "
        f"samples: rendered in {prom_setup.render_s:.0f} s, backfilled in "
        f"{prom_setup.backfill_s:.0f} s; data until t+{args.horizon} min"
    )
    policy_text, changes = policy_copy(prom.url, args.interval)
    policy_file = workdir / "policy.yaml"
    policy_file.write_text(policy_text)
    policy = parse_policy(policy_text)
    interval = policy.spec.scoring.interval_seconds
    doc["policy"] = {"file": "examples/policy.yaml", "changed": changes}

    watch = NodeWatch(api, policy)
    watch.start()
    stack.callback(watch.stop)
    setup["bench_node_list_s"] = round(watch.list_s, 2)
    api_at_start = apiserver_requests(api.metrics())

    scorer = ScorerProcess(policy_file, prom.url, plane.kubeconfig, workdir)
    scorer.prometheus_pid = prom.pid
    doc["source_at_scorer_start"] = source_version()
    doc["product_files_changed_at_scorer_start"] = product_changes()
    log(f"starting the scorer ({doc['source_at_scorer_start']}): {' '.join(scorer.command[1:])}")
    scorer.start()
    stack.callback(scorer.stop)
    data_until = time.monotonic() + (prom_setup.last_sample - time.time())
    steady = SteadyWindow()
    try:
        observe(
            args, doc, api, scorer, watch, nodes, tmpl, interval, data_until, steady, api_at_start
        )
        doc["apiserver_requests_during_scorer"] = delta(
            apiserver_requests(api.metrics()), api_at_start
        )
    finally:
        final = read_proc(scorer.pid) if scorer.alive() else scorer.last
        exit_code = scorer.stop() if scorer.proc is not None else None
        doc["scorer"] = {
            "command": scorer.command[1:],
            "exit_code": exit_code,
            "problems_count": dict(scorer.problem_count),
            "problem_kinds": dict(scorer.problem_kinds.most_common(12)),
            "problems": scorer.problems,
            "log_tail": scorer.log_tail(),
        }
        summarise(doc, scorer, steady, final)


def observe(
    args: argparse.Namespace,
    doc: dict[str, Any],
    api: Api,
    scorer: ScorerProcess,
    watch: NodeWatch,
    nodes: Sequence[FakeNode],
    tmpl: Mapping[str, Template],
    interval: float,
    data_until: float,
    steady: SteadyWindow,
    api_at_start: Mapping[str, float],
) -> None:
    """The scorer's life: first publication, steady cycles, bursts."""
    log("waiting until every node carries its pool and its composite label ...")
    dumps: list[dict[str, Any]] = []
    doc["stack_dumps"] = dumps
    py_spy = args.py_spy or shutil.which("py-spy")
    pub = wait_publication(
        scorer, watch, len(nodes), args.publish_timeout, dumps, py_spy, args.stack_dumps
    )
    doc["publication"] = pub
    doc["metrics_after_publication"] = scorer.metrics()
    doc["apiserver_requests_to_publication"] = delta(
        apiserver_requests(api.metrics()), api_at_start
    )
    log(f"   publication: {pub}")
    wait_s = interval * 4 + args.publish_timeout
    if scorer.wait_cycle(1, timeout=wait_s) is None:  # the 2nd cycle: the taints are set
        raise RuntimeError("the scorer never finished its second cycle")
    doc["initial_writes_timeline"] = timeline(watch, scorer.started, scorer.cycles[1].at)
    steady.first = len(scorer.cycles) + 1  # the next cycle is the first steady one
    steady.metrics_start = scorer.metrics()
    log(f"measuring {args.steady_cycles} steady cycles from cycle {steady.first} ...")
    profiler = None
    if args.profile and py_spy:
        # Sampled from outside (py-spy reads the process's memory; the scorer is not stopped),
        # only the thread holding the GIL: where the steady cycles' Python CPU goes.
        profile_file = Path(scorer.log_path).with_name("steady-profile.txt")
        profiler = subprocess.Popen(
            [
                py_spy,
                "record",
                "--nonblocking",
                "--gil",
                "--format",
                "raw",
                "--rate",
                "50",
                "--duration",
                str(int(interval * args.steady_cycles)),
                "--output",
                str(profile_file),
                "--pid",
                str(scorer.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    while len(scorer.cycles) < steady.first - 1 + args.steady_cycles:
        got = scorer.wait_cycle(len(scorer.cycles), timeout=wait_s)
        if got is None:
            break
        log(
            f"   cycle {got.index}: {got.duration_s:.2f} s, {got.written} written, "
            f"CPU so far {got.proc.cpu_s:.1f} s, RSS {got.proc.rss_mib:.0f} MiB"
        )
    steady.last = len(scorer.cycles)
    steady.metrics_end = scorer.metrics()
    doc["metrics_after_steady"] = steady.metrics_end
    if profiler is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            profiler.wait(timeout=interval + 30)
        if profiler.poll() is None:
            profiler.terminate()
        doc["steady_profile"] = profile_summary(profile_file)
    bursts: list[dict[str, Any]] = []
    doc["bursts"] = bursts
    for spec in burst_specs(nodes, args.seed):
        if time.monotonic() > data_until - 2 * interval:
            log("   Prometheus data runs out: no more bursts (raise --horizon)")
            break
        log(f"burst: {spec.name} ...")
        result = run_burst(api, scorer, watch, spec, tmpl, args.quiet, interval)
        bursts.append(result)
        shown = (
            "window_s",
            "scorer_write_requests",
            "apiserver_node_status_patches",
            "apiserver_node_patches",
            "apiserver_node_lists",
            "nodes_written",
            "max_status_writes_one_node",
            "periodic_cycle_overlapped",
        )
        log("   " + ", ".join(f"{k}={result.get(k)}" for k in shown))
    # One more cycle line shows whether a burst overlapped a periodic cycle after all.
    scorer.wait_cycle(len(scorer.cycles), timeout=interval * 2 + 60)
    for result in bursts:
        if "error" not in result:
            result["periodic_cycle_overlapped"] = overlapped(scorer.cycles, result)
    doc["metrics_end"] = scorer.metrics()


# -- CLI -----------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=5000, help="fake nodes (default 5000)")
    parser.add_argument("--pods", type=int, default=100000, help="bound pods (default 100000)")
    parser.add_argument("--quick", action="store_true", help="200 nodes, 2,000 pods: smoke")
    parser.add_argument(
        "--steady-cycles", type=int, default=4, help="steady cycles to measure (default 4)"
    )
    parser.add_argument(
        "--interval",
        type=int,
        help="scoring.intervalSeconds of the policy copy (default: the example's 30)",
    )
    parser.add_argument(
        "--publish-timeout",
        type=float,
        default=1200.0,
        help="give up waiting for every node's pool and label after this many s (default 1200)",
    )
    parser.add_argument(
        "--quiet",
        type=float,
        default=4.0,
        help="a burst ends after this many s without a node event (default 4)",
    )
    parser.add_argument(
        "--prom-step", type=float, default=30.0, help="s between backfilled samples (default 30)"
    )
    parser.add_argument(
        "--horizon",
        type=float,
        default=40.0,
        help="minutes of backfilled data after the scorer starts (default 40)",
    )
    parser.add_argument(
        "--recording-rules",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Prometheus evaluates the recording rules the install ships (manifests/components/"
        "prometheus-operator/recording-rules.yaml; default: yes), as where they are installed",
    )
    parser.add_argument(
        "--stack-dumps",
        type=float,
        default=0.0,
        metavar="S",
        help="until every node is published, dump the scorer's Python stacks every S s with "
        "py-spy into the JSON (default 0: never)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the scorer with py-spy over the steady cycles (the GIL holder, 50 Hz) and "
        "put the top functions into the JSON",
    )
    parser.add_argument("--py-spy", help="py-spy binary (default: on PATH)")
    parser.add_argument("--seed", type=int, default=1, help="readings and pod mix seed")
    parser.add_argument("--json", type=Path, help="results file (default bench/results/...)")
    parser.add_argument(
        "--report", type=Path, metavar="JSON", help="print the tables of a results file, no run"
    )
    parser.add_argument("--workdir", type=Path, help="keep logs and data here (default: temp)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

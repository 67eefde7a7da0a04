"""Pod-creation latency through the apiserver: no steering, the webhook, the admission policy.

    .venv/bin/python bench/admission_latency.py                   # 3 modes x 20 s at 50 pods/s, ~2.5 min
    .venv/bin/python bench/admission_latency.py --seconds 60 --rounds 2   # longer, modes alternated
    .venv/bin/python bench/admission_latency.py --modes none,floor,webhook,policy --apiserver-profile /tmp/prof
    .venv/bin/python bench/admission_latency.py --report bench/results/admission-latency-<ts>.json

What a user pays for steering at pod creation, per path. One real control plane (etcd and
kube-apiserver v1.36.2 from ../shared/kube or $KUBE_BIN_DIR, kits.control_plane; no scheduler,
no controller manager: the pods stay Pending and nothing else writes) serves every mode, one
after the other, in the namespace `bench-admission`, labelled as examples/policy.yaml's tenant
dept-a that opted in (its optIn and tenant selectors), so every pod created there is steered
in the steering modes:

- `none`: no admission configuration of the project (neither webhook nor policy);
- `webhook`: `steer webhook serve` (examples/policy.yaml, the arguments of
  manifests/webhook/webhook.yaml: 2 workers, 5 s read timeout, 256 connections) and the
  MutatingWebhookConfiguration of manifests/webhook/admission.yaml as installed (failurePolicy
  Ignore, timeoutSeconds 2, reinvocationPolicy IfNeeded, its namespaceSelector and
  matchConditions), by URL on 127.0.0.1 with the caBundle filled in (kits.service_processes);
- `webhook-both` (not run unless asked): `webhook` with the ValidatingWebhookConfiguration of
  the same manifest as well: what a webhook install adds to every pod creation;
- `policy`: the MutatingAdmissionPolicy `steer-mutation` and its binding, as
  `steer policy admission-policy --mutating -f examples/policy.yaml` prints them (the CLI is run and its
  YAML read); no webhook process;
- `floor` (not run unless asked): the least a MutatingAdmissionPolicy can be, the reference for
  `policy`: one bound to the same pods (steer-mutation's matchConstraints) with no
  matchCondition, no variable, `reinvocationPolicy: Never` and one constant JSONPatch (the trace
  annotation `{"via": "floor"}`). What it costs over `none` is the apiserver's mechanism (the
  dispatcher converts, patches, decodes and defaults the pod), which no CEL can go below.

The project's ValidatingAdmissionPolicies (security, budget) are in none of the modes: an
install has them with either path, and they are not what this compares.

First, on the fresh control plane, --settle seconds (30) of unsteered creates at the rate,
not counted: a new apiserver's first minute is slower (start-up work, caches filling; on the
2-core machine ResourceQuota's admission took 40 ms a pod then, 0.05 ms after), and without it
whichever mode ran first would pay for it.

Before a mode's run its configuration is applied and a dry-run probe pod is created until the
apiserver steers it the mode's way (the trace annotation: the webhook's, or the one the policy
writes with `"via": "admission-policy"`; none for `none`), so no create of the run lands
before the apiserver has loaded the configuration. After the run the configuration is removed
(and the webhook stopped) and every pod of the run deleted, and gone, before the next mode.

The load is open loop: create i is due at i / --rate seconds from the start (default 50 pods/s)
for --warmup + --seconds (3 + 20 s); --clients threads (16) each take the next due create,
sleep until it is due and send it, so no create waits on the previous one's answer. A create
starts late only when every thread is busy; how late is measured (`late`: more than LATE_MS
after its slot), so a run the client could not drive at the rate says so, and
`p99_from_slot_ms` (lag + latency) is what such a run's p99 hides. Each thread has one
keep-alive HTTPS connection with the admin's certificate (http.client: the least client code
between the two timestamps; the TLS handshakes happen in the warm-up). Latency is client-side,
from the request's first byte sent to the response read, over creates answered 201; creates
due in the warm-up are sent but not counted. Every answer is read back: `wrong steering`
counts pods created without the mode's trace (e.g. the webhook timed out and
failurePolicy Ignore let the pod in unsteered: fast, and wrong).

The pods (bench/benchkit/realistic.py): a Deployment's pod as users create it, 5-8 KiB of JSON,
owned by a ReplicaSet, labelled and annotated as a Helm chart's, two containers (the app and a
log shipper) with requests and limits, env, probes, volumes; 500m / 1 GiB, limits 5 % over
(dept-a's budget). Every tenth (--gpu-share 0.1) is the same pod of a GPU job (4 cores,
32 GiB, one nvidia.com/gpu): the example policy's `gpu` class. The webhook and the policy steer
both (scheduler name, preferred terms, tolerations, pool and gate requests, the trace).

Also measured per run, as the apiserver's /metrics and /proc show them: the apiserver's own mean
duration of pod POSTs and of its admission steps, and the CPU time per created pod of the
apiserver, etcd and the webhook's processes. Everything runs on the same machine: on the
2-core machine the client, the apiserver, etcd and the webhook share two cores, so a path's
figures include its CPU competing with the others', where in a cluster the webhook runs on
another node and adds a network hop instead.

The table is printed as markdown on stdout (progress on stderr) and everything (per-run
summaries, per-kind figures, the latencies themselves, the apiserver's metrics) is written to
bench/results/admission-latency-<UTC timestamp>.json (or --json PATH). Not a test: it asserts
nothing and reports what it measures.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import os
import re
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit.api import Api  # noqa: E402
from bench.benchkit.metrics_text import delta  # noqa: E402
from bench.benchkit.procstat import read_proc  # noqa: E402
from bench.benchkit.progress import log  # noqa: E402
from bench.benchkit.provenance import loadavg, product_changes, source_version  # noqa: E402
from bench.benchkit.realistic import pod_bytes, realistic_pod  # noqa: E402
from bench.benchkit.results import (  # noqa: E402
    recorded_args,
    results_file,
    run_workdir,
    utc_stamp,
    write_results,
)
from bench.benchkit.shapes import Shape  # noqa: E402
from bench.benchkit.stats import quantile  # noqa: E402
from kits.control_plane import ControlPlane  # noqa: E402
from kits.service_processes import (  # noqa: E402
    admission_configurations,
    running_webhook,
)
from steer.adapters.policy_file import load_policy_file  # noqa: E402
from steer.core.admission_policy.mutating import TRACE_VIA  # noqa: E402
from steer.core.mutation import read_trace  # noqa: E402
from steer.core.policy import Policy  # noqa: E402
from steer.core.steering import trace_annotation_key  # noqa: E402

EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
WEBHOOK_MANIFEST = ROOT / "manifests" / "webhook" / "webhook.yaml"
NAMESPACE = "bench-admission"
RUN_LABEL = "bench.kube-steer.github.io/admission-run"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
WEBHOOK_TRACE = "webhook"  # the webhook's trace has no `via`; the policy's says TRACE_VIA
LATE_MS = 10.0  # a create started this much after its slot: the client fell behind
PROBE_TIMEOUT_S = 60.0

ModeName = Literal["none", "webhook", "webhook-both", "policy", "floor"]
FLOOR_VIA = "floor"  # the trace `floor`'s constant patch writes


@dataclass(frozen=True)
class Mode:
    name: ModeName
    # The trace a pod created in this mode carries: "webhook", TRACE_VIA, or None (no trace).
    steered_by: str | None
    about: str


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("none", None, "no webhook configuration, no mutating policy"),
        Mode("webhook", WEBHOOK_TRACE, "steer webhook serve + its MutatingWebhookConfiguration"),
        Mode(
            "webhook-both",
            WEBHOOK_TRACE,
            "the webhook + its Mutating and ValidatingWebhookConfiguration",
        ),
        Mode("policy", TRACE_VIA, "the MutatingAdmissionPolicy + binding, no webhook"),
        Mode(
            "floor",
            FLOOR_VIA,
            "a MutatingAdmissionPolicy of one constant patch on the same pods: the mechanism",
        ),
    )
}
DEFAULT_MODES = "none,webhook,policy"


# -- the pods (pure) -------------------------------------------------------------------------


def bench_namespace_labels(policy: Policy) -> dict[str, str]:
    """The namespace labels that opt in and select the policy's first tenant (dept-a in
    examples/policy.yaml): read from the policy, so the pods are steered as it says."""
    tenant = policy.spec.tenants[0]
    return {
        **policy.spec.opt_in.namespace_selector.match_labels,
        **tenant.namespace_selector.match_labels,
    }


def pod_shapes(labels: Mapping[str, str]) -> dict[str, Shape]:
    """The two pods created: a Deployment's service pod and a GPU job's (limits 5 % over the
    requests: dept-a's budget)."""
    return {
        "service": Shape("service", NAMESPACE, labels, cpu_m=500, memory_mi=1024, burst=True),
        "gpu": Shape("gpu-job", NAMESPACE, labels, cpu_m=4000, memory_mi=32768, burst=True, gpus=1),
    }


def pod_kind(index: int, gpu_share: float) -> str:
    """Which pod create `index` sends: a GPU job at every 1/gpu_share-th index (evenly spread,
    the same for every mode), else a service pod."""
    if math.floor((index + 1) * gpu_share) > math.floor(index * gpu_share):
        return "gpu"
    return "service"


def pod_body(template: Mapping[str, Any], name: str, run: str) -> bytes:
    """The template (a realistic pod) named `name` and labelled with its run, as POSTed."""
    metadata = {k: v for k, v in template["metadata"].items() if k != "generateName"}
    metadata["name"] = name
    metadata["labels"] = {**metadata["labels"], RUN_LABEL: run}
    return orjson.dumps({**template, "metadata": metadata})


def steered_by(pod: Mapping[str, Any], trace_key: str) -> str | None:
    """Which path steered a created pod, from its trace: WEBHOOK_TRACE, the policy's
    TRACE_VIA, or None (no trace)."""
    trace = read_trace(pod, trace_key)
    if trace is None:
        return None
    return str(trace.get("via", WEBHOOK_TRACE))


# -- what a run measured (pure) ------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One create call."""

    index: int
    kind: str  # "service" or "gpu"
    warmup: bool  # due in the warm-up: sent, not counted
    lag_s: float  # how late it started after its slot (every client thread was busy)
    latency_s: float  # request sent to response read
    status: int  # HTTP status; 0: no response (a connection error)
    steered_by: str | None  # see `steered_by`
    error: str = ""  # the apiserver's message or the exception, when not 201


@dataclass(frozen=True)
class LatencySummary:
    """A mode's (or a run's) measured creates: latencies of those answered 201, in ms."""

    pods: int  # creates counted (warm-up excluded)
    errors: int  # of those, not answered 201
    wrong_steering: int  # answered 201 without the mode's trace (or, for `none`, with one)
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    mean_ms: float | None
    late: int  # started more than LATE_MS after their slot
    max_lag_ms: float | None
    # p99 of lag + latency: what a create waited from its slot, the answer to a client that
    # fell behind (a late start hides that much delay from the latencies above).
    p99_from_slot_ms: float | None


def summarise(samples: Sequence[Sample], expected: str | None) -> LatencySummary:
    """The summary of the samples not in the warm-up; `expected` is the mode's `steered_by`."""
    counted = [s for s in samples if not s.warmup]
    created = [s for s in counted if s.status == 201]
    latencies = [s.latency_s * 1000 for s in created]
    lags = [s.lag_s * 1000 for s in counted]
    from_slot = [(s.lag_s + s.latency_s) * 1000 for s in created]

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 2)

    return LatencySummary(
        pods=len(counted),
        errors=len(counted) - len(created),
        wrong_steering=sum(1 for s in created if s.steered_by != expected),
        p50_ms=ms(quantile(latencies, 0.50)),
        p99_ms=ms(quantile(latencies, 0.99)),
        max_ms=ms(max(latencies, default=None)),
        mean_ms=ms(sum(latencies) / len(latencies) if latencies else None),
        late=sum(1 for lag in lags if lag > LATE_MS),
        max_lag_ms=ms(max(lags, default=None)),
        p99_from_slot_ms=ms(quantile(from_slot, 0.99)),
    )


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return round(value / base, 2)


def error_counts(samples: Sequence[Sample]) -> dict[str, int]:
    """The distinct errors of the counted creates, most frequent first."""
    counts = Counter(
        s.error or f"HTTP {s.status}" for s in samples if not s.warmup and s.status != 201
    )
    return dict(counts.most_common())


# -- the apiserver's own view (pure) -------------------------------------------------------------

_SERIES = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Histogram sums and counts kept from the apiserver's /metrics: pod POSTs, the admission steps,
# each admission controller, each webhook, each (mutating) admission policy.
_KEPT = (
    "apiserver_request_duration_seconds",
    "apiserver_admission_step_admission_duration_seconds",
    "apiserver_admission_controller_admission_duration_seconds",
    "apiserver_admission_webhook_admission_duration_seconds",
    "apiserver_mutating_admission_policy_check_duration_seconds",
)


def admission_sums(text: str) -> dict[str, float]:
    """The `_sum` and `_count` series of _KEPT in a /metrics text (pod POSTs only for the
    request durations), keyed `name{labels}`."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(_KEPT):
            continue
        match = _SERIES.match(line)
        if match is None:
            continue
        name, labels_text, value = match.groups()
        if not name.endswith(("_sum", "_count")):
            continue
        labels = dict(_LABEL.findall(labels_text or ""))
        if name.startswith("apiserver_request_duration_seconds") and (
            labels.get("resource") != "pods"
            or labels.get("verb") != "POST"
            or labels.get("subresource")
        ):
            continue
        if name.startswith("apiserver_request_duration_seconds"):
            labels = {"dry_run": labels.get("dry_run", "")}
        key = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        out[f"{name}{{{key}}}"] = out.get(f"{name}{{{key}}}", 0.0) + float(value)
    return out


def server_means_ms(sums: Mapping[str, float]) -> dict[str, float]:
    """Mean durations in ms from a delta of `admission_sums`: every `_sum` over its `_count`."""
    out: dict[str, float] = {}
    for key, total in sums.items():
        name, _, labels = key.partition("{")
        if not name.endswith("_sum"):
            continue
        count = sums.get(f"{name[: -len('_sum')]}_count{{{labels}")
        if count:
            out[f"{name[: -len('_sum')]}{{{labels}"] = round(total / count * 1000, 3)
    return out


def pod_post_mean_ms(means: Mapping[str, float]) -> float | None:
    """The apiserver's mean duration of the (not dry-run) pod POSTs."""
    return means.get("apiserver_request_duration_seconds{dry_run=}")


def admit_step_mean_ms(means: Mapping[str, float]) -> float | None:
    """The apiserver's mean duration of the mutating admission step of a create (every
    mutating plugin, the webhook's call or the policy's CEL included; reinvocations too)."""
    return means.get(
        "apiserver_admission_step_admission_duration_seconds"
        "{operation=CREATE,rejected=false,type=admit}"
    )


# -- the table (pure) ------------------------------------------------------------------------


def mode_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per mode, in the order run: the pooled summary and the ratios to `none`."""
    summary: Mapping[str, Any] = doc["summary"]
    base = summary.get("none")
    rows = []
    for name, entry in summary.items():
        row = {"mode": name, **entry}
        if base is not None:
            row["p50_x"] = ratio(entry["p50_ms"], base["p50_ms"])
            row["p99_x"] = ratio(entry["p99_ms"], base["p99_ms"])
            row["apiserver_cpu_x"] = ratio(
                (entry.get("cpu_ms_per_pod") or {}).get("apiserver"),
                (base.get("cpu_ms_per_pod") or {}).get("apiserver"),
            )
        rows.append(row)
    return rows


def markdown(doc: Mapping[str, Any]) -> str:
    def cell(value: Any, digits: int = 1) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.{digits}f}"
        return str(value)

    args = doc["args"]
    lines = [
        f"Pod creation through the apiserver at {args['rate']:g} pods/s for {args['seconds']:g} s "
        f"per mode and round ({doc['rounds']} round(s), {args['clients']} client threads, "
        f"warm-up {args['warmup']:g} s), load average {doc['loadavg_before']} before.",
        "",
        "| mode | pods | errors | wrong steering | p50 ms | p99 ms | max ms | p50 / none "
        "| p99 / none | late starts (p99 from slot ms) | apiserver: POST / admit step, mean ms "
        "| CPU ms/pod (apiserver + etcd + webhook) | apiserver CPU ms/pod (/ none) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in mode_rows(doc):
        cpu = row.get("cpu_ms_per_pod") or {}
        lines.append(
            f"| {row['mode']} | {row['pods']} | {row['errors']} | {row['wrong_steering']} "
            f"| {cell(row['p50_ms'])} | {cell(row['p99_ms'])} | {cell(row['max_ms'])} "
            f"| {cell(row.get('p50_x'), 2)} | {cell(row.get('p99_x'), 2)} "
            f"| {row['late']} ({cell(row.get('p99_from_slot_ms'))}) "
            f"| {cell(row.get('apiserver_post_mean_ms'))} / {cell(row.get('admit_step_mean_ms'))} "
            f"| {cell(cpu.get('total'))} "
            f"| {cell(cpu.get('apiserver'))} ({cell(row.get('apiserver_cpu_x'), 2)}) |"
        )
    return "\n".join(lines)


# -- I/O: the apiserver connection of a client thread --------------------------------------------


class ApiConnection:
    """One keep-alive HTTPS connection to the apiserver as the admin; reopened after an error."""

    def __init__(self, plane: ControlPlane) -> None:
        url = urlsplit(plane.url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.context = ssl.create_default_context(cafile=str(plane.ca_file))
        self.context.load_cert_chain(plane.pki_dir / "admin.crt", plane.pki_dir / "admin.key")
        self.conn: http.client.HTTPSConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(
                self.host, self.port, context=self.context, timeout=60
            )
        try:
            self.conn.request(
                "POST",
                path,
                body,
                {"Content-Type": "application/json", "Accept": "application/json"},
            )
            resp = self.conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def answer_of(status: int, data: bytes, trace_key: str) -> tuple[str | None, str]:
    """(steered_by, error message) of a create's answer."""
    try:
        obj = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError:
        return None, f"HTTP {status}: {data[:200]!r}"
    if status != 201:
        return None, f"HTTP {status}: {str(obj.get('message', ''))[:200]}"
    return steered_by(obj, trace_key), ""


def drive(
    plane: ControlPlane,
    templates: Mapping[str, Mapping[str, Any]],
    run: str,
    args: argparse.Namespace,
    trace_key: str,
) -> list[Sample]:
    """The open-loop load of one run (module docstring): every create at its slot."""
    warmup_slots = round(args.warmup * args.rate)
    total = warmup_slots + round(args.seconds * args.rate)
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    lock = threading.Lock()
    next_index = [0]
    start = time.perf_counter() + 0.5  # every thread connected and waiting

    def client() -> list[Sample]:
        conn = ApiConnection(plane)
        out: list[Sample] = []
        try:
            while True:
                with lock:
                    index = next_index[0]
                    next_index[0] += 1
                if index >= total:
                    return out
                kind = pod_kind(index, args.gpu_share)
                body = pod_body(templates[kind], f"{run}-{index:05d}", run)
                due = start + index / args.rate
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                sent = time.perf_counter()
                try:
                    status, data = conn.post(path, body)
                    done = time.perf_counter()
                    via, message = answer_of(status, data, trace_key)
                except (OSError, http.client.HTTPException) as exc:
                    done = time.perf_counter()
                    status, via, message = 0, None, f"{type(exc).__name__}: {exc}"
                out.append(
                    Sample(
                        index=index,
                        kind=kind,
                        warmup=index < warmup_slots,
                        lag_s=max(0.0, sent - due),
                        latency_s=done - sent,
                        status=status,
                        steered_by=via,
                        error=message,
                    )
                )
        finally:
            conn.close()

    with ThreadPoolExecutor(args.clients, thread_name_prefix="create") as pool:
        futures = [pool.submit(client) for _ in range(args.clients)]
        samples = [s for f in futures for s in f.result()]
    return sorted(samples, key=lambda s: s.index)


# -- I/O: CPU time of the processes involved ------------------------------------------------------


def children(pid: int) -> list[int]:
    """The direct children of `pid` (the webhook's gunicorn workers), from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def cpu_seconds(pids: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """CPU seconds used so far, summed per named group of processes (a process gone since
    counts 0: a group's figure is taken over the same pids at both ends)."""
    out: dict[str, float] = {}
    for name, group in pids.items():
        total = 0.0
        for pid in group:
            with contextlib.suppress(OSError):
                total += read_proc(pid).cpu_s
        out[name] = total
    return out


# -- I/O: the modes on the control plane ----------------------------------------------------------


def webhook_settings() -> tuple[int, list[str]]:
    """The webhook container's `--workers` of manifests/webhook/webhook.yaml, and its other
    arguments the kit does not set itself (it sets policy, certificate, listen addresses and
    kubeconfig)."""
    docs = [d for d in yaml.safe_load_all(WEBHOOK_MANIFEST.read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "webhook"
    )
    args = [a for a in container["args"] if a.startswith("--")]
    workers = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--workers=")), 2)
    own = ("--policy", "--cert", "--key", "--listen", "--metrics-listen", "--workers")
    return workers, [a for a in args if not a.startswith(own)]


def mutating_policy_objects() -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding as `steer policy admission-policy` prints
    them for the example policy."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher",
            "policy",
            "admission-policy",
            "--mutating",
            "-f",
            str(EXAMPLE_POLICY),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    wanted = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    objects = [d for d in docs if d["kind"] in wanted]
    if sorted(d["kind"] for d in objects) != sorted(wanted):
        raise RuntimeError(f"steer policy admission-policy printed {[d['kind'] for d in docs]}")
    return objects


def constant_trace_patch(trace_key: str, via: str) -> str:
    """CEL: one JSONPatch adding the trace annotation `{"via": <via>}` (its key's `/` escaped;
    the bench's pods carry annotations)."""
    path = "/metadata/annotations/" + trace_key.replace("~", "~0").replace("/", "~1")
    value = orjson.dumps({"via": via}).decode()
    return f"[JSONPatch{{op: 'add', path: {json.dumps(path)}, value: {json.dumps(value)}}}]"


def floor_policy_objects(
    compiled: Sequence[Mapping[str, Any]], trace_key: str
) -> list[dict[str, Any]]:
    """The `floor` mode's MutatingAdmissionPolicy and binding: the matchConstraints of
    steer-mutation (`compiled`: `mutating_policy_objects()`), nothing evaluated but one constant
    JSONPatch, never reinvoked."""
    steer_mutation = next(o for o in compiled if o["kind"] == "MutatingAdmissionPolicy")
    constraints = steer_mutation["spec"]["matchConstraints"]
    policy = {
        "apiVersion": steer_mutation["apiVersion"],
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "bench-floor"},
        "spec": {
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "matchConstraints": constraints,
            "mutations": [
                {
                    "patchType": "JSONPatch",
                    "jsonPatch": {"expression": constant_trace_patch(trace_key, FLOOR_VIA)},
                }
            ],
        },
    }
    binding = {
        "apiVersion": steer_mutation["apiVersion"],
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "bench-floor"},
        "spec": {"policyName": "bench-floor", "matchResources": constraints},
    }
    return [policy, binding]


def create_objects(api: Api, objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Create admissionregistration objects; returns their paths (to delete them)."""
    paths = []
    for obj in objects:
        collection = f"{ADMISSION}/{PLURALS[obj['kind']]}"
        api.json("POST", collection, obj)
        paths.append(f"{collection}/{obj['metadata']['name']}")
    return paths


def delete_objects(api: Api, paths: Sequence[str]) -> None:
    for path in paths:
        api.send("DELETE", path, ok=(404,))


class Bench:
    """The runs on one control plane: each mode installed, driven, removed."""

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        policy: Policy,
        templates: Mapping[str, Mapping[str, Any]],
    ) -> None:
        self.plane = plane
        self.workdir = workdir
        self.templates = templates
        self.api = Api(plane, pool=4)
        self.trace_key = trace_annotation_key(policy)
        self.probe_conn = ApiConnection(plane)

    def close(self) -> None:
        self.probe_conn.close()
        self.api.close()

    def create_objects(self, objects: Sequence[Mapping[str, Any]]) -> list[str]:
        return create_objects(self.api, objects)

    def delete_objects(self, paths: Sequence[str]) -> None:
        delete_objects(self.api, paths)

    def probe(self) -> str | None:
        """How the apiserver steers a pod now: a dry-run create of a service pod."""
        body = pod_body(self.templates["service"], "probe", "probe")
        status, data = self.probe_conn.post(f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All", body)
        via, error = answer_of(status, data, self.trace_key)
        if error:
            raise RuntimeError(f"the probe pod was refused: {error}")
        return via

    def wait_steering(self, mode: Mode) -> float:
        """Until a probe pod is steered the mode's way twice in a row; returns the seconds."""
        began = time.monotonic()
        in_a_row = 0
        while time.monotonic() - began < PROBE_TIMEOUT_S:
            in_a_row = in_a_row + 1 if self.probe() == mode.steered_by else 0
            if in_a_row == 2:
                return time.monotonic() - began
            time.sleep(0.2)
        raise RuntimeError(f"{mode.name}: probe pods not steered as {mode.steered_by!r}")

    @contextlib.contextmanager
    def installed(self, mode: Mode) -> Iterator[dict[str, list[int]]]:
        """The mode's configuration in force (and its webhook running) while inside; yields the
        pids whose CPU time counts."""
        pids = {
            "apiserver": self._pid("kube-apiserver"),
            "etcd": self._pid("etcd"),
        }
        paths: list[str] = []
        with contextlib.ExitStack() as stack:
            if mode.name in ("webhook", "webhook-both"):
                workers, extra_args = webhook_settings()
                hook = stack.enter_context(
                    running_webhook(
                        self.plane,
                        EXAMPLE_POLICY,
                        self.workdir,
                        workers=workers,
                        extra_args=extra_args,
                    )
                )
                pids["webhook"] = [hook.process.pid, *children(hook.process.pid)]
                kinds = {"MutatingWebhookConfiguration"}
                if mode.name == "webhook-both":
                    kinds.add("ValidatingWebhookConfiguration")
                configs = admission_configurations(hook.url, hook.ca_bundle)
                stack.callback(self.delete_objects, paths)
                paths += self.create_objects([c for c in configs if c["kind"] in kinds])
            elif mode.name == "policy":
                stack.callback(self.delete_objects, paths)
                paths += self.create_objects(mutating_policy_objects())
            elif mode.name == "floor":
                stack.callback(self.delete_objects, paths)
                paths += self.create_objects(
                    floor_policy_objects(mutating_policy_objects(), self.trace_key)
                )
            took = self.wait_steering(mode)
            log(f"{mode.name}: in force after {took:.1f} s ({', '.join(paths) or 'nothing'})")
            yield pids

    @contextlib.contextmanager
    def profiled(self, run: str, args: argparse.Namespace) -> Iterator[None]:
        """With --apiserver-profile DIR: the apiserver's CPU profile (its /debug/pprof/profile,
        on by default: --profiling) over the run's measured seconds, saved as
        DIR/apiserver-<run>.pprof (read it with `go tool pprof -top`)."""
        if args.apiserver_profile is None:
            yield
            return
        out = args.apiserver_profile / f"apiserver-{run}.pprof"

        def fetch() -> None:
            time.sleep(args.warmup + 0.5)
            with self.api.new_session() as session:
                resp = session.get(
                    f"{self.plane.url}/debug/pprof/profile",
                    params={"seconds": str(max(1, int(args.seconds)))},
                    timeout=args.seconds + 60,
                )
            resp.raise_for_status()
            out.write_bytes(resp.content)
            log(f"{run}: the apiserver's CPU profile written to {out}")

        thread = threading.Thread(target=fetch, name=f"pprof-{run}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            thread.join(timeout=args.seconds + 60)

    def _pid(self, component: str) -> list[int]:
        process = self.plane.components[component].process
        return [process.pid] if process is not None else []

    def delete_run(self, run: str) -> float:
        """Delete the run's pods (Pending, so gone at once) and wait until none is left."""
        began = time.monotonic()
        selector = {"labelSelector": f"{RUN_LABEL}={run}"}
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        self.api.send("DELETE", path, orjson.dumps({"gracePeriodSeconds": 0}), params=selector)
        while self.api.json("GET", path, params={**selector, "limit": "1"}).get("items"):
            time.sleep(0.5)
        return time.monotonic() - began

    def settle(self, args: argparse.Namespace) -> None:
        """Unsteered creates at the rate on the fresh control plane, not counted: its first
        minute is slower (start-up work, caches filling; measured: ResourceQuota's admission
        took 40 ms a pod then, 0.05 ms after)."""
        log(f"settling: {args.settle:g} s of unsteered creates at {args.rate:g} pods/s")
        self.wait_steering(MODES["none"])
        load = argparse.Namespace(**{**vars(args), "warmup": 0.0, "seconds": args.settle})
        samples = drive(self.plane, self.templates, "settle", load, self.trace_key)
        summary = summarise(samples, None)
        log(f"settled: p50 {summary.p50_ms} ms, p99 {summary.p99_ms} ms; deleting")
        self.delete_run("settle")

    def metrics(self) -> dict[str, float]:
        return admission_sums(self.api.metrics())

    def run(
        self, mode: Mode, round_: int, args: argparse.Namespace
    ) -> tuple[dict[str, Any], list[Sample]]:
        templates = self.templates
        run = f"{mode.name}-{round_}"
        with self.installed(mode) as pids:
            load_before = loadavg()
            before_metrics = self.metrics()
            before_cpu = cpu_seconds(pids)
            log(f"{run}: {args.warmup:g} s warm-up + {args.seconds:g} s at {args.rate:g} pods/s")
            began = time.monotonic()
            with self.profiled(run, args):
                samples = drive(self.plane, templates, run, args, self.trace_key)
            elapsed = time.monotonic() - began
            after_cpu = cpu_seconds(pids)
            sums = delta(self.metrics(), before_metrics)
        deleted_s = self.delete_run(run)
        summary = summarise(samples, mode.steered_by)
        created = sum(1 for s in samples if s.status == 201)
        cpu = {k: round((after_cpu[k] - before_cpu[k]) * 1000 / max(created, 1), 3) for k in pids}
        cpu["total"] = round(sum(cpu.values()), 3)
        means = server_means_ms(sums)
        log(
            f"{run}: p50 {summary.p50_ms} ms, p99 {summary.p99_ms} ms, max {summary.max_ms} ms, "
            f"{summary.errors} errors, {summary.wrong_steering} wrongly steered, "
            f"{summary.late} late; pods deleted in {deleted_s:.1f} s"
        )
        counted = [s for s in samples if not s.warmup]
        result = {
            "mode": mode.name,
            "round": round_,
            "summary": asdict(summary),
            "by_kind": {
                kind: asdict(summarise([s for s in samples if s.kind == kind], mode.steered_by))
                for kind in templates
            },
            "errors": error_counts(samples),
            "steered_by": dict(Counter(str(s.steered_by) for s in counted if s.status == 201)),
            "elapsed_s": round(elapsed, 2),
            "achieved_rate": round(len(samples) / max(elapsed, 1e-9), 1),
            "created": created,
            "cpu_ms_per_pod": cpu,
            "apiserver_post_mean_ms": pod_post_mean_ms(means),
            "admit_step_mean_ms": admit_step_mean_ms(means),
            "apiserver_means_ms": means,
            "apiserver_sums": sums,
            "loadavg": load_before,
            "deleted_s": round(deleted_s, 1),
            "latencies_ms": [round(s.latency_s * 1000, 2) for s in counted if s.status == 201],
        }
        return result, samples


# -- main ----------------------------------------------------------------------------------------


def pooled_summary(
    runs: Sequence[Mapping[str, Any]], samples: Sequence[Sample], mode: Mode
) -> dict[str, Any]:
    """A mode's summary over all its runs, with the means of the per-run server figures."""
    entry: dict[str, Any] = asdict(summarise(samples, mode.steered_by))
    for key in ("apiserver_post_mean_ms", "admit_step_mean_ms"):
        means = [r[key] for r in runs if r[key] is not None]
        entry[key] = round(sum(means) / len(means), 2) if means else None
    keys = sorted({k for r in runs for k in r["cpu_ms_per_pod"]})
    entry["cpu_ms_per_pod"] = {
        k: round(sum(r["cpu_ms_per_pod"].get(k, 0.0) for r in runs) / len(runs), 3) for k in keys
    }
    return entry


def chosen_modes(text: str) -> list[Mode]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(MODES))
    if unknown or not names:
        raise SystemExit(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
    return [MODES[n] for n in names]


def run_bench(args: argparse.Namespace) -> int:
    modes = chosen_modes(args.modes)
    policy = load_policy_file(str(EXAMPLE_POLICY))
    labels = bench_namespace_labels(policy)
    templates = {kind: realistic_pod(shape) for kind, shape in pod_shapes(labels).items()}
    workers, webhook_args = webhook_settings()
    stamp = utc_stamp()
    source = source_version()  # now: others may commit while it runs
    out_file = results_file(args.json, "admission-latency", stamp)
    load_before = loadavg()
    began = time.monotonic()
    runs: list[dict[str, Any]] = []
    by_mode: dict[str, list[Sample]] = {m.name: [] for m in modes}
    with contextlib.ExitStack() as stack:
        workdir = run_workdir(stack, args.workdir, "steer-admission-latency-")
        log("starting etcd and kube-apiserver")
        plane = stack.enter_context(
            ControlPlane.start(workdir / "plane", scheduler=False, controller_manager=False)
        )
        plane.ensure_namespace(NAMESPACE, labels)
        bench = Bench(plane, workdir, policy, templates)
        stack.callback(bench.close)
        if args.settle > 0:
            bench.settle(args)
        for round_ in range(1, args.rounds + 1):
            for mode in modes:
                result, samples = bench.run(mode, round_, args)
                runs.append(result)
                by_mode[mode.name] += samples
    doc = {
        "section": "admission-latency",
        "started": stamp,
        "source": source,
        "product_changes": product_changes(),
        "runtime_s": round(time.monotonic() - began, 1),
        "args": recorded_args(args),
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "namespace": {"name": NAMESPACE, "labels": labels},
        "pods": {kind: {"bytes": pod_bytes(t), "template": t} for kind, t in templates.items()},
        "webhook": {"workers": workers, "args": webhook_args},
        "modes": {m.name: {"about": m.about, "steered_by": m.steered_by} for m in modes},
        "summary": {
            m.name: pooled_summary([r for r in runs if r["mode"] == m.name], by_mode[m.name], m)
            for m in modes
        },
        "runs": runs,
    }
    write_results(out_file, doc)
    print(markdown(doc))
    log(f"results written to {out_file}")
    return 1 if any(r["summary"]["errors"] for r in runs) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--modes",
        default=DEFAULT_MODES,
        help=f"comma-separated, run in this order each round, from {', '.join(MODES)} "
        f"(default {DEFAULT_MODES})",
    )
    parser.add_argument("--rate", type=float, default=50.0, help="creates per second (default 50)")
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="measured seconds per run (default 20)"
    )
    parser.add_argument(
        "--warmup", type=float, default=3.0, help="seconds of load per run before (default 3)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=30.0,
        help="seconds of unsteered creates on the fresh control plane before the first run, "
        "not counted (default 30)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every mode (default 1)")
    parser.add_argument(
        "--clients", type=int, default=16, help="client threads sending the creates (default 16)"
    )
    parser.add_argument(
        "--gpu-share",
        type=float,
        default=0.1,
        help="share of the creates that are GPU jobs (default 0.1)",
    )
    parser.add_argument(
        "--json", type=Path, help="results file (default bench/results/admission-latency-<ts>.json)"
    )
    parser.add_argument("--workdir", type=Path, help="keep logs here (default: a temporary folder)")
    parser.add_argument(
        "--apiserver-profile",
        type=Path,
        metavar="DIR",
        help="save the apiserver's CPU profile of each run's measured seconds in DIR "
        "(apiserver-<mode>-<round>.pprof; `go tool pprof -top` reads it)",
    )
    parser.add_argument(
        "--report", type=Path, metavar="JSON", help="print the table of a results file, no run"
    )
    args = parser.parse_args(argv)
    if args.report:
        print(markdown(json.loads(args.report.read_text())))
        return 0
    if not 0 <= args.gpu_share <= 1:
        parser.error(f"--gpu-share: must be 0..1, got {args.gpu_share}")
    if args.rate <= 0 or args.seconds <= 0 or args.warmup < 0 or args.clients < 1:
        parser.error("--rate and --seconds must be > 0, --warmup >= 0, --clients >= 1")
    if args.apiserver_profile is not None:
        args.apiserver_profile.mkdir(parents=True, exist_ok=True)
    return run_bench(args)


if __name__ == "__main__":
    sys.exit(main())

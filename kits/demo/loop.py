"""The whole loop on one machine: `python -m kits.demo` (`make demo`).

On the demo environment (synthetic exporter, real Prometheus, the Kubernetes API stand-in;
kits/demo/environment.py) it starts the product's two services as an operator runs them, each a
subprocess (kits/service_processes.py): `steer scorer run`, which writes the nodes' labels,
taints, gates and pools into the stand-in, and `steer webhook serve` over TLS with certificates
from `certs/`. It then plays the apiserver for the example pods (kits/demo/pods.py): each is
POSTed to the webhook's `/mutate`, the returned JSON Patch applied, the patched pod POSTed to
`/validate`, and the scorer asked where it may go (`POST /explain/pod`). It prints the verdicts
and the scorer's node table, and with `serve` keeps everything up until SIGINT or SIGTERM.

Every process it starts is stopped and every temporary folder removed when it returns, on a
signal too: `stop_on_signals` turns SIGTERM into KeyboardInterrupt, as SIGINT is.
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import jsonpatch
import requests

from kits.demo.environment import DEMO_NODES, DemoEnvironment, demo_environment
from kits.demo.pods import DEMO_NAMESPACES, DemoPod, admission_review, demo_pods
from kits.service_processes import (
    RunningScorer,
    RunningWebhook,
    ServiceError,
    running_scorer,
    running_webhook,
)
from scorer.explain.render import nodes_text
from scorer.explain.view import NodesTable, Served
from steer.core.policy import Policy
from steer.core.steering import trace_annotation_key

Output = Literal["text", "json"]
# The scorer's first cycle writes labels and pools, the second the debounced taints
# (`setAfterCycles: 2`), and with them the closed gates: wait for both.
CYCLES = 2
CYCLE_SECONDS = 2.0  # the demo policy's scoring interval
TOP_ALLOWED = 3  # nodes shown per pod, best first


# -- what each pod got --------------------------------------------------------------------------


@dataclass(frozen=True)
class Steering:
    """What the webhook's patch changed in the pod, in the scheduler's terms."""

    scheduler_name: str | None  # set by the patch, else None
    preferences: Mapping[str, int]  # label key (prefix dropped) → preferred terms on it
    spread: tuple[str, ...]  # topologyKey:whenUnsatisfiable of the constraints added
    requests: Mapping[str, str]  # resources added to the first container's requests
    tolerations: tuple[str, ...]  # key:effect of the tolerations added

    def to_json(self) -> dict[str, Any]:
        return {
            "schedulerName": self.scheduler_name,
            "preferences": dict(self.preferences),
            "spread": list(self.spread),
            "requests": dict(self.requests),
            "tolerations": list(self.tolerations),
        }


@dataclass(frozen=True)
class Placement:
    """The scorer's answer for the patched pod: the best allowed nodes, the excluded ones by
    the first rule that excludes each, and what makes the pod go nowhere."""

    allowed: tuple[tuple[str, int], ...]  # (node, rank), best first
    excluded: Mapping[str, tuple[str, ...]]  # rule → nodes
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "allowed": [{"node": n, "rank": r} for n, r in self.allowed],
            "excluded": {rule: list(nodes) for rule, nodes in self.excluded.items()},
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class PodVerdict:
    demo: DemoPod
    rules: tuple[str, ...]  # the rules in effect, from the trace annotation
    steering: Steering
    allowed: bool
    message: str | None  # the denial, when not allowed
    placement: Placement

    @property
    def mutated(self) -> bool:
        return bool(self.rules)

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": f"{self.demo.namespace}/{self.demo.name}",
            "shows": self.demo.shows,
            "mutated": self.mutated,
            "rules": list(self.rules),
            "steering": self.steering.to_json(),
            "allowed": self.allowed,
            "message": self.message,
            "placement": self.placement.to_json(),
        }


def _short(key: str, policy: Policy) -> str:
    for prefix in (policy.spec.label_prefix, policy.spec.resource_prefix):
        key = key.removeprefix(prefix)
    return key


def steering_of(policy: Policy, before: Mapping[str, Any], after: Mapping[str, Any]) -> Steering:
    old, new = before["spec"], after["spec"]
    affinity = (new.get("affinity") or {}).get("nodeAffinity") or {}
    keys = Counter(
        _short(expr["key"], policy)
        for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        for expr in term["preference"].get("matchExpressions") or []
    )
    was = [
        (c["topologyKey"], c["whenUnsatisfiable"])
        for c in old.get("topologySpreadConstraints") or []
    ]
    spread = tuple(
        f"{c['topologyKey']}:{c['whenUnsatisfiable']}"
        for c in new.get("topologySpreadConstraints") or []
        if (c["topologyKey"], c["whenUnsatisfiable"]) not in was
    )
    old_requests = old["containers"][0].get("resources", {}).get("requests") or {}
    new_requests = new["containers"][0].get("resources", {}).get("requests") or {}
    requests_added = {
        _short(k, policy): str(v) for k, v in new_requests.items() if k not in old_requests
    }
    old_tolerations = old.get("tolerations") or []
    tolerations = tuple(
        f"{_short(t.get('key', '*'), policy)}:{t.get('effect', '*')}"
        for t in new.get("tolerations") or []
        if t not in old_tolerations
    )
    scheduler = new.get("schedulerName")
    return Steering(
        scheduler if scheduler != old.get("schedulerName") else None,
        dict(keys),
        spread,
        requests_added,
        tolerations,
    )


def placement_of(answer: Mapping[str, Any]) -> Placement:
    """From a `POST /explain/pod` answer (scorer/explain/view/pod_explanation.py)."""
    by_rule: dict[str, list[str]] = {}
    for node in answer["excluded"]:
        by_rule.setdefault(node["exclusions"][0]["rule"], []).append(node["node"])
    return Placement(
        tuple((a["node"], int(a["rank"])) for a in answer["allowed"]),
        {rule: tuple(nodes) for rule, nodes in sorted(by_rule.items())},
        tuple(answer["problems"]),
    )


# -- talking to the services as the apiserver does -----------------------------------------------


def _review_response(session: requests.Session, url: str, body: Mapping[str, Any]) -> Any:
    resp = session.post(url, json=body, timeout=10)
    resp.raise_for_status()
    return resp.json()["response"]


def admit(
    policy: Policy,
    demo: DemoPod,
    hook: RunningWebhook,
    hook_session: requests.Session,
    scorer: RunningScorer,
) -> PodVerdict:
    """Mutate, apply the patch, validate the patched pod, then ask the scorer where it goes."""
    mutated = _review_response(
        hook_session,
        f"{hook.url}/mutate",
        admission_review(demo, dict(demo.pod), str(uuid.uuid4())),
    )
    if not mutated["allowed"]:
        raise ServiceError(f"/mutate refused {demo.name}: {mutated.get('status')}")
    pod: dict[str, Any] = dict(demo.pod)
    if mutated.get("patch"):
        ops = json.loads(base64.b64decode(mutated["patch"]))
        pod = jsonpatch.apply_patch(demo.pod, ops)
    validated = _review_response(
        hook_session, f"{hook.url}/validate", admission_review(demo, pod, str(uuid.uuid4()))
    )
    annotations = pod["metadata"].get("annotations") or {}
    trace = json.loads(annotations.get(trace_annotation_key(policy), "{}"))
    with requests.Session() as session:
        session.trust_env = False
        resp = session.post(
            f"{scorer.url}/explain/pod",
            params={"namespace": demo.namespace},
            json=pod,
            timeout=10,
        )
    resp.raise_for_status()
    return PodVerdict(
        demo,
        tuple(trace.get("rules") or ()),
        steering_of(policy, demo.pod, pod),
        bool(validated["allowed"]),
        None if validated["allowed"] else validated["status"]["message"],
        placement_of(resp.json()),
    )


def _cycles_done(scorer: RunningScorer) -> float:
    with requests.Session() as session:
        session.trust_env = False
        text = session.get(f"{scorer.url}/metrics", timeout=5).text
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith('steer_scorer_cycles_total{result="ok"}')
    )


def wait_for_cycles(scorer: RunningScorer, cycles: int, timeout: float = 30.0) -> None:
    scorer.wait_ready()
    deadline = time.monotonic() + timeout
    while _cycles_done(scorer) < cycles:
        if not scorer.running or time.monotonic() > deadline:
            raise ServiceError(f"the scorer did not complete {cycles} cycles:\n{scorer.log()}")
        time.sleep(0.2)


# -- rendering ------------------------------------------------------------------------------------


def _pairs(items: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in items.items())


def verdict_text(v: PodVerdict, prefix: str) -> list[str]:
    """A pod's verdict in four lines or so; label keys shown without `prefix`."""
    s = v.steering

    def short(text: str) -> str:
        return text.replace(prefix, "")

    lines = [f"{v.demo.namespace}/{v.demo.name}: {v.demo.shows}"]
    if v.mutated:
        got = []
        if s.scheduler_name:
            got.append(f"schedulerName {s.scheduler_name}")
        if s.preferences:
            terms = ", ".join(f"{k} x{n}" for k, n in s.preferences.items())
            got.append(f"{sum(s.preferences.values())} preferred terms ({terms})")
        if s.spread:
            got.append("spread " + ", ".join(s.spread))
        if s.requests:
            got.append("requests " + _pairs(s.requests))
        if s.tolerations:
            got.append("tolerates " + ", ".join(s.tolerations))
        lines.append(f"  mutated:  rules {', '.join(short(r) for r in v.rules)}")
        lines += [f"            {line}" for line in _wrap(got, "; ")]
    else:
        lines.append("  mutated:  no")
    lines.append("  admitted: yes" if v.allowed else f"  admitted: DENIED: {v.message}")
    p = v.placement
    excluded = sum(len(nodes) for nodes in p.excluded.values())
    if p.problems:
        lines.append(f"  may go:   nowhere: refused at admission ({excluded} nodes excluded)")
        return lines
    best = ", ".join(f"{n} (rank {r})" for n, r in p.allowed[:TOP_ALLOWED])
    more = len(p.allowed) - TOP_ALLOWED
    where = best + (f", {more} more" if more > 0 else "") if p.allowed else "nowhere"
    if excluded:
        why = "; ".join(f"{short(rule)}: {', '.join(nodes)}" for rule, nodes in p.excluded.items())
        where += f"; {excluded} excluded ({why})"
    lines.append(f"  may go:   {where}")
    return lines


def reserved_text(nodes: Mapping[str, Any], prefix: str) -> list[str]:
    """Which nodes carry each `reserved-for-<class>` label (an `/explain/nodes` answer): the
    table leaves them out, and they are why other pods rank some nodes first."""
    reserved: dict[str, list[str]] = {}
    for row in nodes["nodes"]:
        for key, value in row["labels"].items():
            name = key.removeprefix(prefix)
            if name.startswith("reserved-for-") and value == "true":
                reserved.setdefault(name, []).append(row["node"])
    return [
        f"{name}: {', '.join(held)} (other steered pods rank the nodes without it first)"
        for name, held in sorted(reserved.items())
    ]


def _wrap(parts: Sequence[str], sep: str, width: int = 86) -> list[str]:
    """`parts` joined by `sep`, a new line before a part that would pass `width`."""
    lines = [""]
    for part in parts:
        if lines[-1] and len(lines[-1]) + len(sep) + len(part) > width:
            lines[-1] += sep.rstrip()
            lines.append("")
        lines[-1] += (sep if lines[-1] else "") + part
    return lines


class Progress:
    """A short header per step, on stdout (text) or stderr (JSON: stdout is the document)."""

    def __init__(self, output: Output) -> None:
        self.out: TextIO = sys.stdout if output == "text" else sys.stderr
        self.started = time.monotonic()

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:4.1f}s] {text}", file=self.out, flush=True)


# -- the loop -------------------------------------------------------------------------------------


@contextlib.contextmanager
def running_services(
    env: DemoEnvironment, workdir: Path, progress: Progress
) -> Iterator[tuple[RunningScorer, RunningWebhook]]:
    """`steer scorer run` and `steer webhook serve` (TLS) on the demo environment; yields once
    the scorer has done `CYCLES` cycles and every webhook worker is ready."""
    lease = ["--lease-namespace", "default"]  # the stand-in has no project namespace
    with running_scorer(env, env.policy_file, env.prometheus_url, workdir, extra_args=lease) as sc:
        progress.step(f"scorer: steer scorer run on {sc.url} (pid {sc.process.pid})")
        with running_webhook(env, env.policy_file, workdir, workers=2) as hook:
            progress.step(
                f"webhook: steer webhook serve on {hook.url}, TLS from certs/ "
                f"(gunicorn pid {hook.process.pid}, 2 workers)"
            )
            wait_for_cycles(sc, CYCLES)
            progress.step(f"scorer: {CYCLES} cycles written (labels, taints, gates, pools)")
            yield sc, hook


def run_loop(*, output: Output = "text", serve: bool = False) -> int:
    """The whole loop; returns the exit status. A signal while it starts raises
    KeyboardInterrupt once everything started is stopped."""
    progress = Progress(output)
    progress.step(
        f"environment: synthetic exporter ({DEMO_NODES} GPU nodes), Prometheus, "
        "Kubernetes API stand-in ..."
    )
    with (
        demo_environment(interval_seconds=CYCLE_SECONDS) as env,
        tempfile.TemporaryDirectory(prefix="steer-demo-services-") as tmp,
    ):
        namespaces = ", ".join(
            f"{name} ({labels.get('tenant', 'no tenant')})"
            for name, labels in DEMO_NAMESPACES.items()
        )
        progress.step(
            f"environment: Prometheus {env.prometheus_url} (pid {env.prometheus.pid}), "
            f"API stand-in {env.stub.url} with namespaces {namespaces}"
        )
        policy = env.policy
        with (
            running_services(env, Path(tmp), progress) as (scorer, hook),
            hook.session() as hook_session,
        ):
            progress.step(
                "admission, as the apiserver does it: POST /mutate, apply the JSON Patch, "
                "POST /validate; then where the scorer says it may go (POST /explain/pod); "
                f"keys shown without {policy.spec.label_prefix}"
            )
            verdicts = [admit(policy, demo, hook, hook_session, scorer) for demo in demo_pods()]
            nodes = scorer.get("/explain/nodes")
            if output == "json":
                doc = {
                    "pods": [v.to_json() for v in verdicts],
                    "nodes": nodes,
                    "urls": {
                        "scorer": scorer.url,
                        "webhook": hook.url,
                        "prometheus": env.prometheus_url,
                    },
                }
                print(json.dumps(doc, indent=2), flush=True)
            else:
                for v in verdicts:
                    print("\n".join(verdict_text(v, policy.spec.label_prefix)))
                progress.step("scorer: the node table (`steer explain nodes`)")
                print(nodes_text(NodesTable.from_json(nodes), Served.from_json(nodes)))
                print("\n".join(reserved_text(nodes, policy.spec.label_prefix)), flush=True)
            if serve:
                pids = [env.prometheus.pid, scorer.process.pid, hook.process.pid]
                progress.step(
                    f"serving until Ctrl-C: explain page {scorer.url}/ "
                    f"(pids {' '.join(map(str, pids))})"
                )
                wait_for_signal()
    progress.step("stopped: every process ended, temporary folders removed")
    return 0


def wait_for_signal() -> None:
    """Until SIGINT (KeyboardInterrupt) or SIGTERM (turned into one by `stop_on_signals`)."""
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so every process is stopped; once unwinding starts, further
    signals are ignored, so the stopping itself is not cut short."""

    def unwind(signum: int, _frame: Any) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, unwind) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_args(argv: Sequence[str]) -> tuple[Output, bool] | None:
    """`[--serve] [--output text|json]`, or None when `argv` is not that."""
    output: Output = "text"
    serve = False
    rest = list(argv)
    while rest:
        flag = rest.pop(0)
        if flag == "--serve":
            serve = True
        elif flag == "--output" and rest and rest[0] in ("text", "json"):
            output = "json" if rest.pop(0) == "json" else "text"
        elif flag.startswith("--output=") and flag.split("=", 1)[1] in ("text", "json"):
            output = "json" if flag.endswith("json") else "text"
        else:
            return None
    return output, serve

"""Webhook throughput and latency against a bare allow-all app on the same gunicorn/TLS stack.

    .venv/bin/python bench/webhook_bench.py [--rounds 4] [--wrk-duration 5] [--duration 10]
                                            [--rates 500,1000] [--clients 8]

Both servers run at once, as subprocesses, on 127.0.0.1 with certificates made for the run:
- the webhook (`steer webhook serve`, namespace watch against the API stand-in, metrics on);
- the bare app: `webhook.app.create_app` over a handler that parses the AdmissionReview and
  allows it, served by the same `webhook.serve.run_gunicorn` (same worker class, workers,
  TLS, certificate reload, HTTP code). Only the admission logic differs; the ratio
  goal is judged against it.
- bare-flask (throughput only): the same allow-all as a Flask view, the bare app this
  benchmark used while the webhook answered through Flask. Its ratio tells what the webhook's
  HTTP code saves over Flask, not what its admission logic costs.

Two reviews captured from a real apiserver are sent, each to both servers:
- gpu: a GPU pod of tenant dept-a with required/preferred affinity, tolerations, a spread
  constraint and an init container (the heaviest merge);
- tenant: a ReplicaSet's pod in team-b (tenant dept-b): the patch adds the budget pool
  requests, the budget gate, preferred terms, spread constraints and the schedulerName.
Sent as captured, again and again, each is what a scale-up sends: the pods of one template
(a ReplicaSet's reach admission without a name, as the apiserver names them after), which the
webhook decides once (webhook/decision_cache.py). A third, gpu-new, is the gpu pod with a label
that counts up on every request (bench/webhook_post.lua): every pod unlike the one before, but
in a label no rule reads, which the cache's key leaves out, so they share one verdict (a build
number, a completion index). A fourth, gpu-template-new, counts up in an annotation instead,
which is part of the key: every pod is decided, as the first pod of a new template is, and
pays its cache's key on top. Fixed-rate runs send one body, so they skip both.

Throughput: wrk (bench/webhook_post.lua, keep-alive connections) in alternating rounds. Other
work on a small shared machine only ever slows a round down, so the best round is reported
with the median, and the median of paired ratios (each webhook round over the bare round run
next to it, which cancels a slow drift in the machine's load). CPU time of each server's
processes per request is reported too, median and least (the least disturbed round): it
moves less than req/s when other work competes, and the goal is judged on the least.

Latency at fixed rates: `--clients` hey processes, each with one keep-alive connection
(`-c 1`) sending rate/clients requests/s (`-q`), started 1/rate s apart so their ticks
interleave. (One hey with `-c N` ticks its N workers together: bursts of N requests, which
measure the burst, not the rate.) Latencies come from hey's per-request CSV, without the
first request of each connection (the TLS handshake). A hey worker waiting on a slow answer
skips its ticks, so the achieved rate is checked against the target: a shortfall means the
server did not keep up, and its percentiles then understate the delay.

Results go to bench/results/webhook.json. Not a test: run it by hand, read the figures.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LUA = ROOT / "bench" / "webhook_post.lua"
FIXTURES = ROOT / "tests" / "fixtures" / "admission"
NAMESPACES = {
    "team-a": {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"},
    "team-b": {"tenant": "dept-b", "kube-steer.github.io/enabled": "true"},
}
SERVERS = ("bare", "webhook", "bare-flask")
PACED = ("bare", "webhook")  # the servers of the fixed-rate runs
# The goals of the issue "5,000 nodes and 100,000 pods".
RATIO_GOAL = 0.70
P99_GOAL_MS = 5.0
P99_GOAL_RATE = 1000
# Below this share of the target rate the server did not keep up (see the docstring).
RATE_TOLERANCE = 0.97
# Rounds of one server further apart than this (fastest / slowest) were disturbed.
NOISY_SPREAD = 1.25


@dataclass(frozen=True)
class Review:
    """A benchmark body and what its patch must contain for the run to mean anything."""

    name: str
    fixture: str
    namespace: str | None
    patch_must_contain: tuple[str, ...]
    # A value counts up on every request, so no two pods are alike: "label" (a label no rule
    # reads: the pods share one verdict, webhook/decision_cache.py) or "annotation" (part of
    # the template's key: each pod is decided, as a new template's first pod is).
    distinct: str | None = None


REVIEWS = (
    Review(
        "gpu",
        "pod-create-with-affinity-gpu.json",
        None,
        ("preferredDuringScheduling", "pool-cpu", "avoid-gpu-hot", "steer-binpack"),
    ),
    Review(
        "tenant",
        "pod-create-by-replicaset.json",
        "team-b",
        ("pool-cpu", "pool-memory", "budget-0pct", "topologySpreadConstraints", "steer-spread"),
    ),
    Review(
        "gpu-new",
        "pod-create-with-affinity-gpu.json",
        None,
        ("preferredDuringScheduling", "pool-cpu", "avoid-gpu-hot", "steer-binpack"),
        distinct="label",
    ),
    Review(
        "gpu-template-new",
        "pod-create-with-affinity-gpu.json",
        None,
        ("preferredDuringScheduling", "pool-cpu", "avoid-gpu-hot", "steer-binpack"),
        distinct="annotation",
    ),
)
# The label (or annotation) bench/webhook_post.lua rewrites on every request of a `distinct`
# review.
VARIANT_LABEL = "bench-pod"
VARIANT_PLACEHOLDER = "00000000"


def review_body(review: Review) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / review.fixture).read_text())["body"]
    if review.namespace is not None:
        request = body["request"]
        request["namespace"] = review.namespace
        request["object"]["metadata"]["namespace"] = review.namespace
    if review.distinct is not None:
        where = "labels" if review.distinct == "label" else "annotations"
        body["request"]["object"]["metadata"].setdefault(where, {})[VARIANT_LABEL] = (
            VARIANT_PLACEHOLDER
        )
    return body


# --- the bare app (run in its own process by `serve-bare`) ------------------------------------


class AllowAll:
    """The least an admission server does: parse the review, allow it (webhook.app's surface)."""

    def __init__(self) -> None:
        from webhook.review import DEFAULT_MAX_BODY_BYTES

        self.max_body_bytes = DEFAULT_MAX_BODY_BYTES

    def handle(self, endpoint: str, body: bytes | None) -> Any:
        import orjson

        from webhook.review import Outcome, allow

        review = orjson.loads(body or b"{}")
        return Outcome(200, allow(review["request"]["uid"]), "allowed")

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        return True, {"ready": True}


def serve_bare(args: argparse.Namespace) -> int:
    from webhook.app import create_app
    from webhook.serve import ServerSettings, run_gunicorn

    settings = ServerSettings(
        listen=args.listen,
        cert_file=args.cert,
        key_file=args.key,
        workers=args.workers,
        log_level="warning",
    )
    if args.flask:
        run_gunicorn(settings, lambda _reloader: flask_bare_app())
    else:
        run_gunicorn(settings, lambda _reloader: create_app(AllowAll()))
    return 0


def flask_bare_app() -> Any:
    import orjson
    from flask import Flask, Response, request

    from webhook.review import allow

    app = Flask(__name__)

    @app.post("/mutate")
    def mutate() -> Response:
        review = orjson.loads(request.get_data(cache=False))
        return Response(allow(review["request"]["uid"]), mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        return Response(b'{"ready":true}', mimetype="application/json")

    return app


# --- measuring ------------------------------------------------------------------------------------


def wait_ready(url: str, ca: Path, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server for {url} exited with {process.returncode}")
        try:
            if requests.get(url, verify=str(ca), timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} not ready after {timeout}s")


def run(command: list[str], env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` and its descendants (Linux /proc)."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return total
    return total + sum(cpu_seconds(int(child)) for child in children)


def _seconds(text: str) -> float:
    """A wrk duration ("351.00us", "1.02s", "2.00m") in seconds (wrk.c `format_time_us`)."""
    value = float(re.sub(r"[a-z]+$", "", text))
    unit = re.sub(r"^[0-9.]+", "", text)
    return value * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]


# A line of wrk's "Latency Distribution" (wrk.c `print_stats_latency`: "%7.0f%%", then
# `print_units`, which pads a value whose unit is one letter, such as "1.02s", with a space
# after it, so the line may end in blanks).
_LATENCY_LINE = re.compile(r"^\s*(50|75|90|99)%\s+([0-9.]+[a-z]+)\s*$", re.MULTILINE)


def parse_wrk(out: str) -> dict[str, Any]:
    """What `wrk --latency` printed: requests, requests/s, p50 and p99 (ms), non-2xx responses
    and socket errors. Raises SystemExit naming what is missing, with the output."""
    requests = re.search(r"(\d+) requests in", out)
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    latency = dict(_LATENCY_LINE.findall(out))
    missing = [
        name
        for name, found in (
            ("the request count", requests),
            ("Requests/sec", rate),
            ("the 50% latency", latency.get("50")),
            ("the 99% latency", latency.get("99")),
        )
        if not found
    ]
    if missing or requests is None or rate is None:
        raise SystemExit(f"wrk printed no {', '.join(missing)}:\n{out}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sockets = re.search(r"Socket errors: (.*)", out)
    return {
        "requests": int(requests.group(1)),
        "requests_per_second": float(rate.group(1)),
        "p50_ms": _seconds(latency["50"]) * 1000,
        "p99_ms": _seconds(latency["99"]) * 1000,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": sockets.group(1) if sockets else "",
    }


def wrk(
    url: str, body: Path, duration: int, connections: int, pid: int, *, distinct: bool = False
) -> dict[str, Any]:
    cpu_before = cpu_seconds(pid)
    env = {**os.environ, "STEER_BENCH_BODY": str(body)}
    if distinct:
        env["STEER_BENCH_DISTINCT"] = f'"{VARIANT_PLACEHOLDER}"'
    out = run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(LUA), url],
        env=env,
    )
    cpu = cpu_seconds(pid) - cpu_before
    parsed = parse_wrk(out)
    requests = parsed.pop("requests")
    return {
        **parsed,
        "cpu_us_per_request": cpu / max(requests, 1) * 1e6,
        "load_average": os.getloadavg()[0],
    }


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def paced(url: str, body: Path, duration: int, rate: int, clients: int) -> dict[str, Any]:
    """`rate` requests/s from `clients` one-connection hey processes with interleaved ticks."""
    command = [
        "hey", "-z", f"{duration}s", "-c", "1", "-q", f"{rate / clients:.3f}", "-cpus", "1",
        "-m", "POST", "-T", "application/json", "-D", str(body), "-o", "csv", url,
    ]  # fmt: skip
    processes = []
    for _ in range(clients):
        processes.append(
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
        time.sleep(1 / rate)
    latencies: list[float] = []
    codes: dict[str, int] = {}
    for process in processes:
        out, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"hey failed ({process.returncode}):\n{err}")
        rows = list(csv.DictReader(io.StringIO(out)))
        for row in rows:
            codes[row["status-code"]] = codes.get(row["status-code"], 0) + 1
        # The first request of the connection carries the TLS handshake: a warm-up.
        latencies += [float(row["response-time"]) * 1000 for row in rows[1:]]
    latencies.sort()
    achieved = (len(latencies) + clients) / duration
    return {
        "target_rate": rate,
        "achieved_rate": achieved,
        "rate_kept": achieved >= RATE_TOLERANCE * rate,
        "requests": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p90_ms": percentile(latencies, 90),
        "p99_ms": percentile(latencies, 99),
        "max_ms": latencies[-1],
        "status_codes": codes,
        "load_average": os.getloadavg()[0],
    }


def check_patch(url: str, body: Path, ca: Path, review: Review) -> None:
    """The benchmark only means something if the webhook really mutates this pod."""
    import base64

    import requests

    reply = requests.post(url, data=body.read_bytes(), verify=str(ca), timeout=5)
    response = reply.json().get("response", {})
    patch = base64.b64decode(response.get("patch", "")).decode()
    missing = [text for text in review.patch_must_contain if text not in patch]
    if reply.status_code != 200 or missing:
        raise SystemExit(
            f"the webhook did not patch the {review.name} pod as expected (missing {missing}): "
            f"{reply.status_code} {reply.text[:300]}"
        )


# --- the driver -----------------------------------------------------------------------------------


def drive(args: argparse.Namespace) -> dict[str, Any]:
    for tool in ("wrk", "hey"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: apt-get install -y wrk hey")
    from certs import WebhookIdentity, issue_webhook_certs, write_webhook_certs
    from kits.apistub import ApiStub
    from kits.net import free_port

    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="steer-webhook-bench-"))
    paths = write_webhook_certs(
        tmp / "certs",
        issue_webhook_certs(
            WebhookIdentity("steer-webhook", "kube-steer", ("localhost",), ("127.0.0.1",))
        ),
    )
    reviews = [r for r in REVIEWS if r.name in args.reviews]
    bodies = {}
    for review in reviews:
        bodies[review.name] = tmp / f"{review.name}.json"
        bodies[review.name].write_text(json.dumps(review_body(review)))
    sizes = {name: path.stat().st_size for name, path in bodies.items()}
    stub = ApiStub.start()
    for name, labels in NAMESPACES.items():
        stub.add_namespace(name, labels)
    kubeconfig = stub.kubeconfig(tmp / "kubeconfig")
    ports = {name: free_port() for name in SERVERS}
    common = [
        "--cert", str(paths.cert), "--key", str(paths.key),
        "--workers", str(args.workers),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    logs = {name: (tmp / f"{name}.log").open("wb") for name in SERVERS}
    processes = {
        "webhook": subprocess.Popen(
            [sys.executable, "-m", "launcher", "webhook", "serve", "--policy", str(ROOT / "examples" / "policy.yaml"),
             "--listen", f"127.0.0.1:{ports['webhook']}", "--metrics-listen", f"127.0.0.1:{free_port()}",
             "--kubeconfig", str(kubeconfig), "--log-level", "warning", *common],
            cwd=ROOT, env=env, stdout=logs["webhook"], stderr=subprocess.STDOUT,
        ),
        **{
            name: subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "serve-bare", "--listen", f"127.0.0.1:{ports[name]}",
                 *common, *(["--flask"] if name == "bare-flask" else [])],
                cwd=ROOT, env=env, stdout=logs[name], stderr=subprocess.STDOUT,
            )
            for name in ("bare", "bare-flask")
        },
    }  # fmt: skip
    urls = {name: f"https://127.0.0.1:{port}" for name, port in ports.items()}
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
        r.name: {name: [] for name in SERVERS} for r in reviews
    }
    fixed: list[dict[str, Any]] = []
    try:
        for name in SERVERS:
            wait_ready(f"{urls[name]}/readyz", paths.ca_cert, processes[name])
        for review in reviews:
            check_patch(f"{urls['webhook']}/mutate", bodies[review.name], paths.ca_cert, review)
        for i in range(args.rounds):
            for review in reviews:
                # Alternate which server goes first, so neither always follows the other.
                for name in SERVERS if i % 2 == 0 else SERVERS[::-1]:
                    rounds[review.name][name].append(
                        wrk(f"{urls[name]}/mutate", bodies[review.name], args.wrk_duration,
                            args.connections, processes[name].pid,
                            distinct=review.distinct is not None)
                    )  # fmt: skip
        for rate in args.rates:
            for review in (r for r in reviews if r.distinct is None):  # hey sends one body
                for name in PACED:
                    fixed.append(
                        {
                            "review": review.name,
                            "server": name,
                            **paced(f"{urls[name]}/mutate", bodies[review.name], args.duration,
                                    rate, args.clients),
                        }
                    )  # fmt: skip
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        stub.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    throughput = {name: summarise(by_server) for name, by_server in rounds.items()}
    return {
        "machine": {"cpus": os.cpu_count()},
        "settings": {
            "workers": args.workers,
            "server": "gevent",
            "wrk_connections": args.connections,
            "wrk_seconds_per_round": args.wrk_duration,
            "rounds": args.rounds,
            "hey_seconds": args.duration,
            "hey_clients": args.clients,
            "rates": args.rates,
            "body_bytes": sizes,
            # Other work on the machine skews every figure: compare these with the cpu count.
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "throughput": throughput,
        "fixed_rate": fixed,
    }


def summarise(by_server: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def rps(name: str) -> list[float]:
        return [r["requests_per_second"] for r in by_server[name]]

    def cpu(name: str) -> float:
        return float(statistics.median(r["cpu_us_per_request"] for r in by_server[name]))

    def least_cpu(name: str) -> float:
        return float(min(r["cpu_us_per_request"] for r in by_server[name]))

    paired = [w / b for w, b in zip(rps("webhook"), rps("bare"), strict=True)]
    return {
        "webhook_rps_best": max(rps("webhook")),
        "bare_rps_best": max(rps("bare")),
        "ratio_best": max(rps("webhook")) / max(rps("bare")),
        "webhook_rps_median": statistics.median(rps("webhook")),
        "bare_rps_median": statistics.median(rps("bare")),
        "ratio_median": statistics.median(rps("webhook")) / statistics.median(rps("bare")),
        "ratio_paired_median": statistics.median(paired),
        # The fastest round over the slowest: how much other work disturbed the rounds.
        "webhook_rps_spread": max(rps("webhook")) / min(rps("webhook")),
        "bare_rps_spread": max(rps("bare")) / min(rps("bare")),
        "webhook_cpu_us_per_request": cpu("webhook"),
        "bare_cpu_us_per_request": cpu("bare"),
        "cpu_ratio": cpu("bare") / cpu("webhook"),
        "webhook_least_cpu_us_per_request": least_cpu("webhook"),
        "bare_least_cpu_us_per_request": least_cpu("bare"),
        "bare_flask_least_cpu_us_per_request": least_cpu("bare-flask"),
        # The least disturbed rounds: what each server costs when nothing else competes.
        "least_cpu_ratio": least_cpu("bare") / least_cpu("webhook"),
        "flask_bare_least_cpu_ratio": least_cpu("bare-flask") / least_cpu("webhook"),
        "bare_flask_rps_best": max(rps("bare-flask")),
        "rounds": by_server,
    }


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"wrk: {s['wrk_connections']} keep-alive connections, {s['rounds']} alternating rounds of "
        f"{s['wrk_seconds_per_round']} s; {s['workers']} workers ({s.get('server', 'gthread')}); "
        f"load average {s['load_average_before'][0]:.1f} before, "
        f"{s['load_average_after'][0]:.1f} after, {result['machine']['cpus']} CPUs",
        "",
        "| review | webhook req/s best / median | bare req/s best / median "
        "| ratio best / median / paired | CPU us/req webhook / bare, median (ratio) "
        "| least (ratio) | bare-flask: req/s best, least CPU (ratio) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, t in result["throughput"].items():
        lines.append(
            f"| {name} ({s['body_bytes'][name]} B) "
            f"| {t['webhook_rps_best']:.0f} / {t['webhook_rps_median']:.0f} "
            f"| {t['bare_rps_best']:.0f} / {t['bare_rps_median']:.0f} "
            f"| {t['ratio_best']:.2f} / {t['ratio_median']:.2f} / {t['ratio_paired_median']:.2f} "
            f"| {t['webhook_cpu_us_per_request']:.0f} / {t['bare_cpu_us_per_request']:.0f} "
            f"({t['cpu_ratio']:.2f}) "
            f"| {t['webhook_least_cpu_us_per_request']:.0f} / "
            f"{t['bare_least_cpu_us_per_request']:.0f} ({t['least_cpu_ratio']:.2f}) "
            f"| {t['bare_flask_rps_best']:.0f}, {t['bare_flask_least_cpu_us_per_request']:.0f} "
            f"({t['flask_bare_least_cpu_ratio']:.2f}) |"
        )
    lines += [
        "",
        f"Fixed rate: {s['hey_clients']} hey processes x 1 connection, interleaved ticks, "
        f"{s['hey_seconds']} s each; latency in ms",
        "",
        "| review | rate | server | achieved req/s | p50 | p90 | p99 | max | codes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in result["fixed_rate"]:
        kept = "" if f["rate_kept"] else " (short)"
        lines.append(
            f"| {f['review']} | {f['target_rate']} | {f['server']} | {f['achieved_rate']:.0f}{kept} "
            f"| {f['p50_ms']:.2f} | {f['p90_ms']:.2f} | {f['p99_ms']:.2f} | {f['max_ms']:.1f} "
            f"| {f['status_codes']} |"
        )
    lines += ["", *goals(result)]
    return "\n".join(lines)


def goals(result: dict[str, Any]) -> list[str]:
    """The verdicts. The ratio is judged on CPU time per request in each server's least
    disturbed round: on a shared machine a disturbed bare round can make the webhook look
    faster than doing nothing, in req/s and in a median alike."""
    out = []
    for name, t in result["throughput"].items():
        met = t["least_cpu_ratio"] >= RATIO_GOAL
        spread = max(t["webhook_rps_spread"], t["bare_rps_spread"])
        noisy = f"; rounds vary up to x{spread:.1f}: rerun when the machine is quiet" * (
            spread > NOISY_SPREAD
        )
        out.append(
            f"- throughput ratio >= {RATIO_GOAL:.2f} ({name}): {'met' if met else 'NOT met'} "
            f"(least CPU {t['least_cpu_ratio']:.2f}; req/s paired median "
            f"{t['ratio_paired_median']:.2f}, best {t['ratio_best']:.2f}{noisy})"
        )
    bare_p99 = {
        f["review"]: f["p99_ms"]
        for f in result["fixed_rate"]
        if f["server"] == "bare" and f["target_rate"] == P99_GOAL_RATE
    }
    for f in result["fixed_rate"]:
        if f["server"] == "webhook" and f["target_rate"] == P99_GOAL_RATE:
            met = f["p99_ms"] <= P99_GOAL_MS and f["rate_kept"]
            out.append(
                f"- p99 <= {P99_GOAL_MS:.0f} ms at {P99_GOAL_RATE} req/s ({f['review']}): "
                f"{'met' if met else 'NOT met'} (p99 {f['p99_ms']:.2f} ms at "
                f"{f['achieved_rate']:.0f} req/s; the bare app's p99 {bare_p99[f['review']]:.2f} "
                "ms is what the machine allows)"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    bare = sub.add_parser("serve-bare", help="(internal) serve the bare allow-all app")
    bare.add_argument("--listen", required=True)
    bare.add_argument("--cert", required=True)
    bare.add_argument("--key", required=True)
    bare.add_argument("--workers", type=int, default=2)
    bare.add_argument("--flask", action="store_true", help="the allow-all as a Flask view")

    def numbers(text: str) -> list[int]:
        return [int(n) for n in text.split(",")]

    parser.add_argument("--rounds", type=int, default=4, help="alternating wrk rounds per server")
    parser.add_argument("--wrk-duration", type=int, default=5, help="seconds per wrk round")
    parser.add_argument("--connections", type=int, default=16, help="wrk keep-alive connections")
    parser.add_argument("--duration", type=int, default=10, help="seconds per fixed-rate run")
    parser.add_argument(
        "--rates", type=numbers, default=[500, 1000], help="fixed rates, comma-separated"
    )
    parser.add_argument(
        "--clients", type=int, default=8, help="hey processes (one connection each) per rate"
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (both servers)")
    parser.add_argument(
        "--reviews",
        type=lambda text: text.split(","),
        default=[r.name for r in REVIEWS],
        help=f"reviews to send, comma-separated (default {','.join(r.name for r in REVIEWS)})",
    )
    parser.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / "webhook.json"), help="JSON results file"
    )
    args = parser.parse_args(argv)
    if args.command == "serve-bare":
        return serve_bare(args)
    result = drive(args)
    text = markdown(result)
    result["table"] = text
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

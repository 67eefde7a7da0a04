"""`steer scorer run` as an operator starts it: JSON logs, /metrics counters and build info,
the policy reload errors the docs promise, and a clean stop on SIGTERM."""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.net import free_port
from kits.waiting import wait_until
from steer import __version__
from tests.conftest import EXAMPLE_POLICY
from tests.webhook_harness import ROOT, assert_json_lines, metric_families


def scrape(url: str) -> dict[str, Any]:
    with requests.Session() as session:
        session.trust_env = False
        reply = session.get(f"{url}/metrics", timeout=5)
    reply.raise_for_status()
    return metric_families(reply.text)


def reload_errors(url: str) -> float:
    family = scrape(url)["steer_scorer_policy_reload_errors"]
    assert family.type == "counter"
    return float(next(s.value for s in family.samples if s.name.endswith("_total")))


def test_run_logs_json_counts_reload_errors_and_exports_build_info(
    tmp_path: Path, apistub: ApiStub
) -> None:
    apistub.add_node(synthetic_node("node-1", zone="zone-a", gpus=8))
    policy_file = tmp_path / "policy.yaml"
    shutil.copy(EXAMPLE_POLICY, policy_file)
    kubeconfig = apistub.kubeconfig(tmp_path / "kubeconfig")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_file = tmp_path / "scorer.log"
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    command = [
        *(sys.executable, "-m", "launcher", "scorer", "run"),
        *("--policy", str(policy_file), "--kubeconfig", str(kubeconfig)),
        *("--prometheus", f"http://127.0.0.1:{free_port()}"),  # down: cycles fail and say so
        *("--listen", f"127.0.0.1:{port}", "--no-leader-election"),
        "--authorization=none",  # the API stand-in reviews no tokens: /metrics answers anyone
        *("--log-level", "INFO", "--log-format", "json"),  # upper case works as lower case
    ]
    with log_file.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        wait_until(
            "the scorer serves /metrics, no reload error",
            lambda: reload_errors(url) == 0,
            timeout=20,
            interval=0.2,
            ignoring=(requests.RequestException,),
        )
        build = scrape(url)["steer_scorer_build_info"]
        assert [s.labels for s in build.samples] == [
            {"version": __version__, "python": platform.python_version()}
        ]
        policy_file.write_text("spec: {dimensions: []}\n")
        wait_until(
            "the bad policy counted once",
            lambda: reload_errors(url) == 1,
            timeout=20,
            interval=0.2,
            ignoring=(requests.RequestException,),
        )
        time.sleep(2.5)  # another poll of the same bad content is not another error
        assert reload_errors(url) == 1
        policy_file.write_text("spec: {tenants: 3}\n")
        wait_until(
            "the second bad policy counted",
            lambda: reload_errors(url) == 2,
            timeout=20,
            interval=0.2,
            ignoring=(requests.RequestException,),
        )
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=20)
    assert returncode == 0, log_file.read_text()
    entries = assert_json_lines(log_file.read_text())
    messages = [(e["level"], e["logger"], e["message"]) for e in entries]
    assert any(m[0] == "ERROR" and m[2].startswith("policy not reloaded") for m in messages)
    assert any(m[1] == "scorer.serve" and "shutting down" in m[2] for m in messages)

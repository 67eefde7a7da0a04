"""The demo policy agrees with the example policy, and the self-contained demo (`kits.demo`)
runs end to end: `scorer once`, and the whole loop (`make demo`), which leaves no process and
no temporary folder behind, also when a signal stops it."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests

from kits.demo.cli import main
from kits.demo.environment import demo_policy
from steer.adapters.policy_file import load_policy_file
from steer.presets import POWER_KEPLER_010
from tests.conftest import EXAMPLE_POLICY, ROOT

PREFIX = "kube-steer.github.io/"
# Names the scorer wrote before scores were named as scores: none may come back.
LEGACY_SCORE_NAMES = {"gpu-util", "gpu-free", "gpu-frag", "power", "health", "score-gpu"}


def test_demo_runs_the_example_policy() -> None:
    example = load_policy_file(str(EXAMPLE_POLICY)).doc
    demo = demo_policy("http://127.0.0.1:1234", interval_seconds=5).doc
    assert demo.spec.dimensions == example.spec.dimensions
    assert demo.spec.taints == example.spec.taints and demo.spec.tenants == example.spec.tenants
    assert demo.spec.prometheus.url == "http://127.0.0.1:1234"
    assert demo.spec.scoring.interval_seconds == 5 and demo.metadata.name == "demo"
    # The example's power dimension reads the preset's Kepler >= 0.10 query (its first form).
    (query,) = (line for line in POWER_KEPLER_010.splitlines() if "query:" in line)
    assert query.split("query: ")[1] in EXAMPLE_POLICY.read_text()


def test_demo_once_runs_with_no_external_services(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the demo makes its folders
    assert main(["scorer", "once", "--dry-run", "--output", "json"]) == 0
    assert list(tmp_path.iterdir()) == []  # policy, kubeconfig, Prometheus data: all removed
    body = json.loads(capsys.readouterr().out)
    assert body["queries"] == 8 and body["dryRun"] is True
    assert all(d["ok"] and d["nodes"] == 6 for d in body["dimensions"])
    rows = {n["node"]: n for n in body["nodes"]}
    assert rows["node-3"]["taints"] == [
        "kube-steer.github.io/gpu-hot=true:PreferNoSchedule"
    ]  # 95 % busy
    assert rows["node-6"]["taints"] == [
        "kube-steer.github.io/unhealthy=true:NoSchedule"
    ]  # failing probe
    assert rows["node-4"]["labels"]["kube-steer.github.io/overcommit-pct"] == "10"  # 70 of 64 cores
    # The composite ranks by what a core costs (package watts over requested cores): node-4's
    # cores are the cheapest, node-5's the dearest, whatever the nodes draw in all.
    assert rows["node-4"]["labels"]["kube-steer.github.io/score-core-power"] == "100"
    assert rows["node-5"]["labels"]["kube-steer.github.io/score-core-power"] == "0"
    assert rows["node-4"]["labels"]["kube-steer.github.io/score"] == "80"
    # The labels read right: node-3's GPUs are 95 % busy, so its GPU score is low, and its
    # raw reading says so in its own unit; the watts are the node's real draw.
    node3 = rows["node-3"]
    assert node3["raw"]["gpu-util"] == 95.0
    assert node3["labels"]["kube-steer.github.io/score-gpu-util"] == "10"
    # The exporter draws 650 W. The demo's Prometheus is seconds old: the example's query must
    # read the real draw from a young series (rate() over 5m read 1.2 W for 310 W here).
    assert 640 <= node3["raw"]["power"] <= 660
    assert node3["labels"]["kube-steer.github.io/score-power"] == "0"  # the hungriest node
    assert not [k for k in node3["labels"] if k.removeprefix(PREFIX) in LEGACY_SCORE_NAMES]


def test_demo_table_gives_units_and_says_what_the_labels_mean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["scorer", "once", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split("  ") for line in lines if line.startswith("NODE  "))
    assert [c.strip() for c in header if c.strip()] == [
        "NODE",
        "gpu-util [pct]",
        "gpu-free [gpus]",
        "gpu-frag [ratio]",
        "power [watts]",
        "core-power [watts]",
        "idle-power [watts]",
        "overcommit-pct [pct]",
        "health [ratio]",
    ]
    assert f"labels under {PREFIX} (shown without it):" in lines
    assert (
        "  score-<dimension>, score, score-class-<class>: 0..100, higher is better for placement"
        in lines
    )
    hot = next(line for line in lines if line.startswith("node-3 ") and "score-" in line)
    assert "score-gpu-util=10" in hot and "gpu-hot=true" in hot


# -- the whole loop ------------------------------------------------------------------------------


def _running_parents() -> dict[int, int]:
    """pid → parent pid of every process that has not exited (zombies have)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if state != "Z":
            parents[int(entry.name)] = int(ppid)
    return parents


def descendants(pid: int) -> set[int]:
    """The running processes started by `pid`, at any depth."""
    parents = _running_parents()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_demo_runs_the_whole_loop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scorer, TLS webhook and example pods through admission: each pod's verdict, and where
    the scorer says it may go."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the services' folders go here too
    before = descendants(os.getpid())
    assert main(["--output", "json"]) == 0
    assert descendants(os.getpid()) - before == set()  # Prometheus, scorer, gunicorn: all ended
    assert list(tmp_path.iterdir()) == []
    doc = json.loads(capsys.readouterr().out)
    nodes = {n["node"] for n in doc["nodes"]["nodes"]}
    assert nodes == {f"node-{i}" for i in range(1, 7)}
    pods = {p["pod"]: p for p in doc["pods"]}

    gpu = pods["ml/train-resnet"]
    assert gpu["mutated"] and gpu["allowed"]
    assert gpu["steering"]["schedulerName"] == "steer-binpack"
    assert gpu["steering"]["preferences"] == {"score-class-gpu": 4}  # the class's own score
    # `ml` is in no tenant: its job shares the budget pool (its limits) beside the gate, and
    # counts its two GPUs in the class's device counter.
    assert gpu["steering"]["requests"] == {
        "avoid-gpu-hot": "1",
        "devices-gpu": "2",
        "pool-cpu": "2000",
        "pool-memory": "4096",
    }
    assert "scheduler:steer-binpack" in gpu["rules"]
    # node-3's GPUs are 95 % busy (gate closed), node-6 fails its probe (tainted)
    assert gpu["placement"]["excluded"] == {
        "avoid:gpu-hot": ["node-3"],
        "taint kube-steer.github.io/unhealthy=true:NoSchedule": ["node-6"],
    }
    assert gpu["placement"]["allowed"][0] == {"node": "node-5", "rank": 1}  # idlest GPUs

    chain = [p for name, p in pods.items() if name.startswith("team-a/checkout-")]
    assert len(chain) == 3
    for replica in chain:
        assert replica["allowed"]
        assert {"spread:order-chain", "spread:order-chain-hosts"} <= set(replica["rules"])
        assert replica["steering"]["spread"] == [
            "topology.kubernetes.io/zone:DoNotSchedule",
            "kubernetes.io/hostname:DoNotSchedule",
        ]

    dept_a = pods["team-a/web"]
    assert dept_a["allowed"] and dept_a["steering"]["schedulerName"] == "steer-spread"
    # limits drawn from the pool: 1050m of cpu, 1 GiB in MiB; dept-a has the highest budget,
    # so no budget gate
    assert dept_a["steering"]["requests"] == {"pool-cpu": "1050", "pool-memory": "1024"}
    dept_b = pods["team-b/api"]
    assert dept_b["allowed"] and "gate:budget:0" in dept_b["rules"]
    assert dept_b["steering"]["requests"] == {
        "pool-cpu": "500",
        "pool-memory": "512",
        "budget-0pct": "1",
    }

    denied = pods["team-b/batch-burst"]
    assert denied["mutated"] and not denied["allowed"]
    assert denied["message"].startswith("rule overcommit: ")
    assert 'tenant "dept-b"' in denied["message"] and "overcommitPercent 0" in denied["message"]
    assert denied["placement"]["allowed"] == [] and denied["placement"]["problems"]

    for pod in doc["pods"]:
        placement = pod["placement"]
        placed = {a["node"] for a in placement["allowed"]}
        excluded = {n for held in placement["excluded"].values() for n in held}
        assert placed | excluded == nodes and not placed & excluded  # every node, real ones
        if pod["allowed"]:
            assert placed and "node-6" in excluded


def assert_verdicts_printed(out: str) -> None:
    """The text form of what `test_demo_runs_the_whole_loop` checks in JSON."""
    assert "ml/train-resnet: GPU job" in out
    assert "schedulerName steer-binpack; 4 preferred terms (score-class-gpu x4)" in out
    assert "spread topology.kubernetes.io/zone:DoNotSchedule" in out
    assert "  admitted: DENIED: rule overcommit: " in out
    assert "  may go:   node-5 (rank 1)" in out
    assert re.search(r"^NODE +score-gpu-util .* TAINTS$", out, re.M)  # `steer explain nodes`
    assert re.search(r"^node-3 .* gpu-hot=true:PreferNoSchedule$", out, re.M)


class OutputLines:
    """A process's output read line by line in a thread, so waiting for one can time out."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line)

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                assert self.process.poll() is None, "exited:\n" + "".join(self.lines)
                continue
            self.lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"no {text!r} after {timeout:.0f}s:\n" + "".join(self.lines))

    def rest(self) -> str:
        """Everything after the last line read, once the process has closed its output."""
        self._reader.join(timeout=10)
        while not self._queue.empty():
            self.lines.append(self._queue.get())
        return "".join(self.lines)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_demo_serve_stops_every_process_on_a_signal(tmp_path: Path, signum: int) -> None:
    """`--serve` keeps the services up, the explain page served, until Ctrl-C or SIGTERM; then
    every process it started has ended and every temporary folder is gone. What it printed
    before serving is the verdicts, in text."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    demo = subprocess.Popen(
        [sys.executable, "-m", "kits.demo", "--serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = OutputLines(demo)
        serving = output.wait_for("serving until Ctrl-C", timeout=90)
        match = re.search(r"explain page (\S+) \(pids ([\d ]+)\)", serving)
        assert match, serving
        assert_verdicts_printed("".join(output.lines))
        session = requests.Session()
        session.trust_env = False
        page = session.get(match.group(1), timeout=5)
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
        children = descendants(demo.pid)
        # Prometheus, the scorer, the webhook's gunicorn and its two workers
        assert {int(p) for p in match.group(2).split()} <= children and len(children) >= 5
        demo.send_signal(signum)
        assert demo.wait(timeout=60) == 0
        assert (
            output.rest()
            .rstrip()
            .endswith("stopped: every process ended, temporary folders removed")
        )
        assert children & set(_running_parents()) == set()
        assert list(tmp_path.iterdir()) == []
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()

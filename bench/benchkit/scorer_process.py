"""`steer scorer run` as a child process, its cycle log lines tailed."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import requests

from kits.net import free_port

from . import ROOT
from .metrics_text import scorer_metrics
from .procstat import ProcSample, read_proc

_CYCLE = re.compile(r"cycle: (\d+) nodes, (\d+) changed, (\d+) written, ([\d.]+)s")
_POD_LIST = re.compile(r"pod list: (\d+) bound pods")


@dataclass
class CycleLine:
    index: int
    at: float  # monotonic, when this process read the line
    nodes: int
    changed: int
    written: int
    duration_s: float
    proc: ProcSample
    prometheus: ProcSample | None = None  # the Prometheus the scorer queries, read at once

    @property
    def started(self) -> float:
        return self.at - self.duration_s


class ScorerProcess:
    """`steer scorer run` in its own process; its log tailed for cycle lines (each stamped with
    the process's CPU and memory as read then), its memory sampled every second."""

    def __init__(self, policy_file: Path, prom_url: str, kubeconfig: Path, workdir: Path) -> None:
        self.port = free_port()
        self.log_path = workdir / "scorer.log"
        self.command = [
            sys.executable,
            "-m",
            "launcher",
            "scorer",
            "run",
            "--policy",
            str(policy_file),
            "--prometheus",
            prom_url,
            "--kubeconfig",
            str(kubeconfig),
            "--no-leader-election",
            # The bench reads /metrics without a token (the default asks the apiserver).
            "--authorization",
            "none",
            "--listen",
            f"127.0.0.1:{self.port}",
        ]
        self.cycles: list[CycleLine] = []
        self.samples: list[ProcSample] = []
        self.pod_list: tuple[float, int] | None = None
        self.problems: list[str] = []  # WARNING / ERROR lines and tracebacks
        self.problem_count: Counter[str] = Counter()
        self.problem_kinds: Counter[str] = Counter()  # digits blanked: one entry per message
        self.started = 0.0
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._session = requests.Session()
        self._session.trust_env = False
        self.last: ProcSample | None = None
        # The Prometheus process the scorer queries (when it runs here): its CPU is read at each
        # cycle line beside the scorer's, so a cycle's cost to Prometheus shows next to its own.
        self.prometheus_pid: int | None = None

    def start(self) -> None:
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("wb") as out:
            self.started = time.monotonic()
            self.proc = subprocess.Popen(
                self.command,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        for target, name in ((self._tail, "scorer-log"), (self._sample, "scorer-proc")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _tail(self) -> None:
        with self.log_path.open("rb") as log_file:
            pending = b""
            while True:
                chunk = log_file.readline()
                if not chunk:
                    if self._stop.is_set():
                        return
                    time.sleep(0.05)
                    continue
                pending += chunk
                if not pending.endswith(b"\n"):
                    continue
                self._line(pending.decode(errors="replace").rstrip("\n"))
                pending = b""

    def _line(self, line: str) -> None:
        match = _CYCLE.search(line)
        if match and " scorer.cycle.loop: " in line:
            try:
                proc = read_proc(self.pid)
            except (FileNotFoundError, ProcessLookupError):
                return
            prometheus = None
            if self.prometheus_pid is not None:
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    prometheus = read_proc(self.prometheus_pid)
            with self._cond:
                self.cycles.append(
                    CycleLine(
                        len(self.cycles) + 1,
                        proc.at,
                        int(match[1]),
                        int(match[2]),
                        int(match[3]),
                        float(match[4]),
                        proc,
                        prometheus,
                    )
                )
                self._cond.notify_all()
            return
        match = _POD_LIST.search(line)
        if match:
            self.pod_list = (time.monotonic(), int(match[1]))
        level = next((lv for lv in ("WARNING", "ERROR", "CRITICAL") if f" {lv} " in line), None)
        if level or line.startswith("Traceback") or line.startswith("  "):
            self.problem_count[level or "traceback"] += 1
            self.problem_kinds[re.sub(r"\d+", "#", line.split(" ", 2)[-1])[:200]] += 1
            if len(self.problems) < 60:
                self.problems.append(line[:400])

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            try:
                sample = read_proc(self.pid)
            except (FileNotFoundError, ProcessLookupError):
                return
            self.samples.append(sample)
            self.last = sample

    def wait_cycle(self, after: int, timeout: float) -> CycleLine | None:
        """The first cycle line with index > `after`, or None on timeout / exit."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.cycles) <= after:
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    return None
                self._cond.wait(min(left, 1.0))
            return self.cycles[after]

    def metrics(self) -> dict[str, float]:
        resp = self._session.get(f"http://127.0.0.1:{self.port}/metrics", timeout=30)
        resp.raise_for_status()
        return scorer_metrics(resp.text)

    def stop(self) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    code = self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    code = self.proc.wait()
            else:
                code = self.proc.returncode
        time.sleep(0.3)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._session.close()
        return code

    def log_tail(self, lines: int = 30) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            return []

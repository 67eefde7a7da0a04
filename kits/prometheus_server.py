"""Start the real Prometheus server (Debian package `prometheus`) on loopback for tests, the
demo and the benchmark.

    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    with scraped_cluster(cluster) as (exporter, prom), prom.client() as client:
        result = client.query('avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)')

Scrapes are asynchronous, so tests poll with `wait_for` instead of sleeping. The scrape manager
of Prometheus 2.x applies target changes on a fixed 5 s ticker (its reload interval is clamped
to at least 5 s), so the first scrape lands 5-6 s after `start()` or `set_targets()`: start one
server per test module, not per test. A change to the exporter's state shows up one
`scrape_interval` later. For thousands of nodes, render history with `SyntheticCluster.write_openmetrics` and
`backfill` it before `start()`: promtool writes TSDB blocks that Prometheus loads at startup.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
import yaml
from urllib3.exceptions import InsecureRequestWarning

from kits.net import free_port
from kits.synthetic_exporter import SyntheticCluster, SyntheticExporter
from kits.waiting import wait_until
from steer.adapters.prometheus import PrometheusClient, PrometheusError, QueryResult

INSTALL_HINT = "apt-get install -y prometheus"
JOB_NAME = "synthetic-cluster"
# A selector with this label (e.g. `up{steer_warning_probe="1"}`) is also sent to a remote-read
# endpoint that refuses connections, so the real server answers with a `warnings` entry.
WARNING_PROBE_LABEL = "steer_warning_probe"
_READY_LOG_LINE = "Server is ready to receive web requests."


class PrometheusNotInstalled(RuntimeError):
    pass


class PrometheusStartError(RuntimeError):
    pass


def _duration(seconds: float) -> str:
    """Prometheus config durations take integer units only: 1.5 s must be written 1500ms."""
    return f"{round(seconds * 1000)}ms"


def _which(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise PrometheusNotInstalled(f"{name!r} not found on PATH; install it: {INSTALL_HINT}")
    return path


class PrometheusServer:
    """One real Prometheus process with its own temporary data directory and config.

    `web_config` is written to `--web.config.file` (Prometheus' TLS / basic-auth file, e.g.
    `{"tls_server_config": {"cert_file": ..., "key_file": ...}, "basic_auth_users": {"u": <bcrypt>}}`);
    with TLS the URL becomes https. `client_options` are passed to every `PrometheusClient` the
    server hands out (credentials, `ca_file`). Retention is long by default so that data
    backfilled at old timestamps is not deleted at startup.
    """

    def __init__(
        self,
        targets: Sequence[str] = (),
        *,
        scrape_interval_s: float = 1.0,
        warning_probe: bool = False,
        web_config: Mapping[str, Any] | None = None,
        client_options: Mapping[str, Any] | None = None,
        lookback_delta: str | None = None,
        retention: str = "100y",
        data_dir: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 30.0,
        rule_groups: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.binary = _which("prometheus")
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.warning_probe = warning_probe
        self.web_config = dict(web_config) if web_config else None
        self.client_options = dict(client_options or {})
        self.startup_timeout_s = startup_timeout_s
        self._workdir = Path(tempfile.mkdtemp(prefix="steer-prometheus-"))
        self.data_dir = Path(data_dir) if data_dir else self._workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self._workdir / "prometheus.yml"
        # Rule groups (a PrometheusRule's spec.groups is a rule file's groups), evaluated by
        # the server from its start.
        self.rule_groups = [dict(g) for g in rule_groups]
        self.rules_path = self._workdir / "rules.yml"
        self.log_path = self._workdir / "prometheus.log"
        self._args = [f"--storage.tsdb.retention.time={retention}", *extra_args]
        if lookback_delta:
            self._args.append(f"--query.lookback-delta={lookback_delta}")
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def scheme(self) -> str:
        return "https" if self.web_config and "tls_server_config" in self.web_config else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None and self.running else None

    # -- configuration ------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        interval = _duration(self.scrape_interval_s)
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": JOB_NAME,
                    # The exporters' own instance/node/pod labels must win; see exporter docs.
                    "honor_labels": True,
                    "scrape_timeout": interval,
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }
        if self.rule_groups:
            config["rule_files"] = [str(self.rules_path)]
        if self.warning_probe:
            config["remote_read"] = [
                {
                    "name": "warning-probe",
                    "url": "http://127.0.0.1:1/read",  # port 1: refused at once
                    "read_recent": True,
                    "remote_timeout": "1s",
                    "required_matchers": {WARNING_PROBE_LABEL: "1"},
                }
            ]
        return config

    def _write_config(self) -> None:
        if self.rule_groups:
            self.rules_path.write_text(
                yaml.safe_dump({"groups": self.rule_groups}, sort_keys=False)
            )
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))

    def set_targets(self, targets: Sequence[str]) -> None:
        """Replace the scrape targets; a running server reloads its config (SIGHUP)."""
        self.targets = list(targets)
        self._write_config()
        if self._proc is not None and self.running:
            self._proc.send_signal(signal.SIGHUP)

    # -- data ---------------------------------------------------------------------------------
    def backfill(self, openmetrics_text: str) -> None:
        """Turn OpenMetrics text (samples with timestamps, ending in `# EOF`) into TSDB blocks
        in the data directory. Call before `start()`: Prometheus loads the blocks at startup."""
        path = self._workdir / f"backfill-{time.monotonic_ns()}.om"
        path.write_text(openmetrics_text)
        try:
            self.backfill_file(path)
        finally:
            path.unlink(missing_ok=True)

    def backfill_file(self, path: str | os.PathLike[str]) -> None:
        if self.running:
            raise RuntimeError(
                "backfill: call it before start(); Prometheus reads new blocks at startup"
            )
        proc = subprocess.run(
            [
                _which("promtool"),
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--quiet",
                str(path),
                str(self.data_dir),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"promtool tsdb create-blocks-from openmetrics {path} failed "
                f"(exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
            )

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> PrometheusServer:
        if self.running:
            return self
        self._workdir.mkdir(parents=True, exist_ok=True)
        if self.web_config is not None:
            (self._workdir / "web.yml").write_text(yaml.safe_dump(self.web_config))
        for _attempt in range(3):  # the free port can be taken between probe and bind
            self.port = free_port()
            self._write_config()
            if self._spawn():
                atexit.register(self.stop)
                return self
        raise PrometheusStartError(
            f"prometheus could not bind a free port; log: {self._log_tail()}"
        )

    def _spawn(self) -> bool:
        args = [
            self.binary,
            f"--config.file={self.config_path}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--storage.tsdb.path={self.data_dir}",
            "--web.enable-lifecycle",
            *self._args,
        ]
        if self.web_config is not None:
            args.append(f"--web.config.file={self._workdir / 'web.yml'}")
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + self.startup_timeout_s
        probe = requests.Session()
        probe.trust_env = False
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    if "address already in use" in self._log_tail():
                        self._proc = None
                        return False
                    raise PrometheusStartError(
                        f"prometheus exited with code {self._proc.returncode}; log: {self._log_tail()}"
                    )
                try:
                    with warnings.catch_warnings():  # readiness only: the cert is checked later
                        warnings.simplefilter("ignore", InsecureRequestWarning)
                        resp = probe.get(f"{self.url}/-/ready", timeout=1, verify=False)
                    # With basic auth configured the probe gets 401; trust the log line then.
                    if resp.status_code == 200 or _READY_LOG_LINE in self._log_tail(4000):
                        return True
                except requests.RequestException:
                    pass
                time.sleep(0.05)
        finally:
            probe.close()
        self.stop()
        raise PrometheusStartError(
            f"prometheus not ready after {self.startup_timeout_s}s; log: {self._log_tail()}"
        )

    def stop(self) -> None:
        """Terminate the process (it flushes the head block) and remove the temporary files."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        atexit.unregister(self.stop)
        # A caller-supplied data_dir lives outside the work directory and is kept.
        shutil.rmtree(self._workdir, ignore_errors=True)

    def pause(self) -> None:
        """SIGSTOP: the kernel still accepts connections, nothing answers them, as with a
        Prometheus too loaded to answer within any client timeout. `resume()` undoes it."""
        if self._proc is None or not self.running:
            raise RuntimeError("pause: the server is not running")
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None and self.running:
            self._proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"

    # -- querying -----------------------------------------------------------------------------
    def client(self, **overrides: Any) -> PrometheusClient:
        return PrometheusClient(self.url, **{**self.client_options, **overrides})

    def wait_for(
        self,
        query: str,
        predicate: Callable[[QueryResult], bool] = lambda r: bool(r.samples),
        timeout_s: float = 15.0,
        interval_s: float = 0.1,
    ) -> QueryResult:
        """Poll `query` until `predicate(result)` holds; return that result. Query errors, and
        IndexError/KeyError from the predicate (`r.samples[0]` before the first scrape), count
        as "not yet"; on timeout the last result or error is in the message."""
        with self.client(timeout_s=min(5.0, timeout_s)) as client:
            return wait_until(
                f"query {query!r} satisfies the predicate",
                lambda: client.query(query),
                timeout=timeout_s,
                interval=interval_s,
                until=predicate,
                ignoring=(PrometheusError, IndexError, KeyError),
            )


@contextmanager
def scraped_cluster(
    cluster: SyntheticCluster, **server_options: Any
) -> Iterator[tuple[SyntheticExporter, PrometheusServer]]:
    """Serve `cluster`, start Prometheus scraping it, and yield once the first scrape is stored."""
    with (
        SyntheticExporter(cluster) as exporter,
        PrometheusServer([exporter.target], **server_options) as prom,
    ):
        prom.wait_for(f'up{{job="{JOB_NAME}"}} == 1')
        yield exporter, prom

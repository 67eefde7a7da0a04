"""`steer webhook serve`: the admission app under gunicorn (gevent workers) over TLS.

Choices, and the reasons:
- gunicorn's gevent worker (`webhook.gworker.TLSWorker`): each connection is a greenlet, so a
  slow client holds no thread; each connection has `--read-timeout-seconds` to finish its
  handshake and each request, a worker keeps at most `--max-connections`, and the worker does
  the TLS handshake itself with the context `CertReloader` gives for each new connection:
  it re-reads the certificate and key when their files change (a rotated Secret swaps them)
  and otherwise reuses the context, so a rotation needs no restart and a handshake does not
  parse PEM files every time. While a rotation is half written (new key, old certificate) the
  pair does not load; the previous context keeps serving until both halves match.
- Several workers share the metrics through prometheus-client's multiprocess mode: each
  worker writes memory-mapped files in one directory, and the gunicorn master serves their sum
  on a separate plain-HTTP port (`--metrics-listen`, waitress: `steer.adapters.http_server`),
  so a scrape never competes with admission requests for a worker. The same listener serves each worker's readiness
  detail at `/status` (`webhook.status`); the TLS port's `/readyz` says only ready or not.
- Each worker keeps its own namespace watch and policy reload thread (real threads: the
  worker does not monkey-patch the process): workers are independent processes, and a watch
  per worker is cheaper than any shared-memory map.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from certs.files import load_cert_info
from certs.pki import CertError
from steer.adapters.service_logs import logging_dict_config
from webhook.decision_cache import DEFAULT_ENTRIES as DEFAULT_DECISION_CACHE_ENTRIES
from webhook.decision_cache import DEFAULT_MAX_BYTES as DEFAULT_DECISION_CACHE_BYTES
from webhook.inflight import DEFAULT_BYTES_IN_FLIGHT
from webhook.review import DEFAULT_MAX_BODY_BYTES
from webhook.status import STATUS_PREFIX

log = logging.getLogger(__name__)

WSGIApp = Callable[..., Any]
DEFAULT_LISTEN = "0.0.0.0:8443"
# A bare port: /metrics binds the host of --listen, so a webhook kept on loopback keeps its
# unauthenticated metrics there too.
DEFAULT_METRICS_LISTEN = "9102"
MIN_CONNECTIONS = 8


class ServeError(RuntimeError):
    """The server cannot start; the message names the flag or file and the fix."""


def split_host_port(value: str, flag: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ServeError(f"{flag}: expected HOST:PORT (e.g. 0.0.0.0:8443), got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def metrics_address(listen: str, metrics_listen: str) -> tuple[str, int]:
    """Where /metrics binds: `--metrics-listen` HOST:PORT as given, or a bare PORT on the
    host of `--listen`."""
    if metrics_listen.isdigit():
        host, _ = split_host_port(listen, "--listen")
        if int(metrics_listen) > 65535:
            raise ServeError(f"--metrics-listen: port must be 0..65535, got {metrics_listen}")
        return host, int(metrics_listen)
    return split_host_port(metrics_listen, "--metrics-listen")


class CertReloader:
    """A server TLS context that follows the certificate and key files on disk."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context_class: type[ssl.SSLContext] = ssl.SSLContext  # the server's (gevent's)
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._signature: tuple[tuple[int, int, int], ...] | None = None
        # The files as last seen not to load: judged once, not on every handshake.
        self._failed_signature: tuple[tuple[int, int, int], ...] | None = None
        self._info: dict[str, Any] = {}
        self.loads = 0
        self.reload_errors = 0
        self.last_error: str | None = None

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        # The process is part of the signature: a worker builds its own context after the
        # fork, from the `ssl` its server uses (gevent's, once the worker has patched it).
        out = [(os.getpid(), 0, 0)]
        for path in (self.cert_file, self.key_file):
            st = os.stat(path)  # follows the ..data symlink a Secret volume swaps
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _build(self) -> ssl.SSLContext:
        context = self.context_class(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        context.set_alpn_protocols(["http/1.1"])
        return context

    def context(self) -> ssl.SSLContext:
        """The context for a new connection; raises only if no pair has ever loaded."""
        try:
            signature = self._stat()
        except OSError as exc:
            with self._lock:
                self._failed_signature = None  # files that come back are judged again
                message = f"cannot stat certificate files: {exc}"
                return self._keep(message, new=message != self.last_error)
        if signature == self._signature and self._context is not None and self.last_error is None:
            return self._context
        with self._lock:
            if signature == self._signature and self._context is not None:
                # The files are back to the pair in force (a file moved away and back): the
                # error no longer describes them.
                self.last_error = None
                return self._context
            if signature == self._failed_signature:
                return self._keep(self.last_error or "certificate/key do not load", new=False)
            try:
                context = self._build()
                info = load_cert_info(self.cert_file).as_json()
            except (ssl.SSLError, OSError, CertError, ValueError) as exc:
                self._failed_signature = signature
                message = f"certificate/key do not load ({exc}); keeping the previous pair"
                return self._keep(message, new=True)
            first = self._signature is None or self._signature[0] != signature[0]
            self._context, self._signature, self._info = context, signature, info
            self._failed_signature = None
            self.loads += 1
            self.last_error = None
        log.info(
            "%s TLS certificate %s (notAfter %s)",
            "loaded" if first else "reloaded",
            info.get("fingerprintSHA256"),
            info.get("notAfter"),
        )
        return context

    def _keep(self, message: str, *, new: bool) -> ssl.SSLContext:
        """With the lock held: count and log a newly seen failure, serve the previous pair."""
        if new:
            self.reload_errors += 1
            log.warning("%s", message)
        self.last_error = message
        if self._context is None:
            raise ServeError(message)
        return self._context

    def status(self) -> dict[str, Any]:
        return {
            "loaded": self._context is not None,
            "loads": self.loads,
            "reloadErrors": self.reload_errors,
            "lastError": self.last_error,
            **self._info,
        }


@dataclass(frozen=True)
class ServerSettings:
    """gunicorn settings shared by the webhook and the benchmark's bare app."""

    listen: str
    cert_file: str
    key_file: str
    workers: int = 2
    keepalive_seconds: int = 30
    log_level: str = "info"
    log_format: str = "text"
    # From a connection's first byte to its finished handshake, and from a request's first
    # byte to its last: the apiserver waits at most 30 s (timeoutSeconds), and sends in ms.
    read_timeout_seconds: float = 5.0
    max_connections: int = 256  # per worker
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Per worker: request bodies read at once (webhook/inflight.py).
    max_bytes_in_flight: int = DEFAULT_BYTES_IN_FLIGHT

    def check(self) -> None:
        split_host_port(self.listen, "--listen")
        if self.workers < 1:
            raise ServeError(f"--workers: must be at least 1, got {self.workers}")
        if not 0 < self.read_timeout_seconds <= 300:
            raise ServeError(
                f"--read-timeout-seconds: must be more than 0 and at most 300, got "
                f"{self.read_timeout_seconds:g}"
            )
        if self.max_connections < MIN_CONNECTIONS:
            raise ServeError(
                f"--max-connections: must be at least {MIN_CONNECTIONS}, got {self.max_connections}"
            )
        if self.max_body_bytes < 1024:
            raise ServeError(f"--max-body-bytes: must be at least 1024, got {self.max_body_bytes}")
        # A body over SMALL_BODY may use all but a quarter of the budget: the largest must fit.
        if self.max_bytes_in_flight * 3 // 4 < self.max_body_bytes:
            raise ServeError(
                f"--max-bytes-in-flight: must be at least 4/3 of --max-body-bytes "
                f"({self.max_body_bytes}), so that the largest body allowed fits beside the "
                f"quarter kept for small ones, got {self.max_bytes_in_flight}"
            )
        for flag, path in (("--cert", self.cert_file), ("--key", self.key_file)):
            if not os.path.isfile(path):
                raise ServeError(f"{flag}: no such file {path!r}; run `steer certs generate`")


def gunicorn_config(settings: ServerSettings, reloader: CertReloader) -> dict[str, Any]:
    from webhook.gworker import ConnectionLimits, worker_class

    # gunicorn formats its own lines unless given a logging config; JSON output needs every
    # line to be an object, so then its loggers hand their records to the service's handler.
    logs = (
        {"logconfig_dict": logging_dict_config(settings.log_level, "json")}
        if settings.log_format == "json"
        else {}
    )
    limits = ConnectionLimits(settings.read_timeout_seconds, settings.max_connections)
    return {
        **logs,
        "bind": [settings.listen],
        "workers": settings.workers,
        # TLS is the worker's own (webhook.gworker): gunicorn sees a plain socket and no
        # certificate settings.
        "worker_class": worker_class(limits, reloader),
        "logger_class": "webhook.gworker.ErrorLogger",
        "worker_connections": limits.greenlets,
        "keepalive": settings.keepalive_seconds,
        "timeout": 30,
        "graceful_timeout": 20,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": settings.log_level,
        "proc_name": "steer-webhook",
        # gunicorn >= 25.1 opens a control socket at a fixed per-user path by default; two
        # servers on one machine would fight over it, and nothing here uses it.
        "control_socket_disable": True,
    }


def run_gunicorn(
    settings: ServerSettings,
    loader: Callable[[CertReloader], WSGIApp],
    *,
    extra: dict[str, Any] | None = None,
) -> None:
    """Serve `loader(reloader)` (called in each worker after the fork) until a signal stops it."""
    from gunicorn.app.base import BaseApplication

    settings.check()
    reloader = CertReloader(settings.cert_file, settings.key_file)
    reloader.context()  # fail now, with the file names, if the pair cannot serve at all
    config = {**gunicorn_config(settings, reloader), **(extra or {})}

    class Application(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            for key, value in config.items():
                if key in self.cfg.settings:  # settings newer than the installed gunicorn
                    self.cfg.set(key, value)

        def load(self) -> WSGIApp:
            return loader(reloader)

    Application().run()


def prepare_multiprocess_metrics() -> str:
    """Point prometheus-client at a fresh multiprocess directory before any metric exists.

    The value class is chosen when `prometheus_client.values` is imported; the CLI may have
    imported it already, so it is chosen again here.
    """
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".db") or name.startswith(STATUS_PREFIX):
                os.unlink(os.path.join(directory, name))  # counts from a previous run
    else:
        directory = tempfile.mkdtemp(prefix="steer-webhook-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import values

    untyped: Any = values  # the module is not annotated
    # Each value update checks the process for a fork; the pid it compares is kept up to date
    # by the fork itself instead of asked of the kernel on every update (getpid is a syscall).
    untyped.ValueClass = untyped.MultiProcessValue(process_identifier=process_id)
    return directory


_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def process_id() -> int:
    """This process's pid, as of its last fork (prometheus-client's `process_identifier`)."""
    return _PID[0]


@dataclass(frozen=True)
class WebhookOptions:
    policy_file: str
    server: ServerSettings
    # The SteeringPolicy object to watch instead of `policy_file` (`--policy-resource NAME`).
    policy_resource: str | None = None
    metrics_listen: str | None = DEFAULT_METRICS_LISTEN
    kubeconfig: str | None = None
    namespace_sync_timeout: float = 10.0
    watch_seconds: int = 60
    # Mutation verdicts kept per worker by pod template (webhook/decision_cache.py); 0: none.
    decision_cache_entries: int = DEFAULT_DECISION_CACHE_ENTRIES
    # What those verdicts may weigh together per worker (their patches); 0: none kept.
    decision_cache_bytes: int = DEFAULT_DECISION_CACHE_BYTES


def serve_webhook(options: WebhookOptions) -> None:
    """Check everything that can be checked up front, then serve until SIGTERM/SIGINT."""
    from steer.adapters.kube import make_api_client
    from steer.adapters.kubejson import KubeJson
    from steer.adapters.policy_file import load_policy_file
    from steer.adapters.policy_resource import fetch_policy_object, parse_policy_object

    if options.decision_cache_entries < 0:
        raise ServeError(
            f"--decision-cache-entries: must be 0 (none kept) or more, got "
            f"{options.decision_cache_entries}"
        )
    if options.decision_cache_bytes < 0:
        raise ServeError(
            f"--decision-cache-bytes: must be 0 (none kept) or more, got "
            f"{options.decision_cache_bytes}"
        )
    options.server.check()
    # PolicyError names every problem (or the object that is missing); KubeConfigError says
    # where credentials were sought. A file is judged before credentials are looked for.
    if not options.policy_resource:
        load_policy_file(options.policy_file)
    api = make_api_client(options.kubeconfig)
    if options.policy_resource:
        parse_policy_object(fetch_policy_object(KubeJson(api), options.policy_resource))
    api.close()
    metrics_addr = (
        metrics_address(options.server.listen, options.metrics_listen)
        if options.metrics_listen
        else None
    )
    owned_dir = "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    directory = prepare_multiprocess_metrics()
    master = os.getpid()

    def when_ready(server: Any) -> None:
        # gunicorn's own line says http: the TLS is its workers' (webhook.gworker).
        log.info("admission over TLS on https://%s", options.server.listen)
        if metrics_addr is None:
            return
        from prometheus_client import make_wsgi_app

        from webhook.metrics import multiprocess_registry
        from webhook.status import listener_app, start_listener, worker_statuses

        host, port = metrics_addr
        app = listener_app(
            make_wsgi_app(multiprocess_registry()), lambda: worker_statuses(directory)
        )
        start_listener(host, port, app)
        log.info("metrics on http://%s:%d/metrics, worker status on /status", host, port)

    def child_exit(server: Any, worker: Any) -> None:
        from prometheus_client import multiprocess

        from webhook.status import remove_worker_status

        untyped: Any = multiprocess  # the module is not annotated
        untyped.mark_process_dead(worker.pid)
        remove_worker_status(directory, worker.pid)

    def loader(reloader: CertReloader) -> WSGIApp:
        return build_worker_app(options, reloader)

    try:
        run_gunicorn(
            options.server, loader, extra={"when_ready": when_ready, "child_exit": child_exit}
        )
    finally:
        # Workers are forks of this frame: a worker leaving (SIGTERM, a restart) unwinds through
        # here too and must not take its siblings' metric files with it.
        if owned_dir and os.getpid() == master:
            shutil.rmtree(directory, ignore_errors=True)


def build_worker_app(options: WebhookOptions, reloader: CertReloader) -> WSGIApp:
    """Everything one worker needs, started after the fork: policy reload, namespace watch,
    DRA watches (not waited for: until they sync, claim pods are steered as unknown)."""
    from steer.adapters.kube import make_api_client
    from steer.adapters.policy_file import PolicyWatcher
    from steer.adapters.policy_resource import PolicyResourceWatcher
    from webhook.app import create_app
    from webhook.devices import watch_devices
    from webhook.handler import AdmissionHandler, start_status_pump
    from webhook.inflight import BytesInFlight
    from webhook.metrics import WebhookMetrics
    from webhook.namespaces import NamespaceCache

    policy: PolicyWatcher | PolicyResourceWatcher = (
        PolicyResourceWatcher(make_api_client(options.kubeconfig), options.policy_resource)
        if options.policy_resource
        else PolicyWatcher(options.policy_file)
    )
    policy.start()
    cache = NamespaceCache(
        lambda: make_api_client(options.kubeconfig), watch_seconds=options.watch_seconds
    )
    cache.start()
    devices = watch_devices(
        lambda: make_api_client(options.kubeconfig), watch_seconds=options.watch_seconds
    )
    if not cache.wait_synced(options.namespace_sync_timeout):
        log.warning(
            "namespace cache not synced after %.0fs (%s); /readyz stays 503 until it is",
            options.namespace_sync_timeout,
            cache.status().last_error,
        )
    metrics = WebhookMetrics(deferred=True)
    handler = AdmissionHandler(
        policy,
        cache,
        metrics,
        max_body_bytes=options.server.max_body_bytes,
        cert_status=reloader.status,
        devices=devices,
        decision_cache_entries=options.decision_cache_entries,
        decision_cache_bytes=options.decision_cache_bytes,
    )
    start_status_pump(handler, status_dir=os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    # The last second's counts, as the worker exits (a restart, a scale-down, SIGTERM).
    atexit.register(metrics.flush)
    app = create_app(
        handler,
        BytesInFlight(options.server.max_bytes_in_flight),
        refused=metrics.refused_for_room,
    )
    # What exists now (modules, the policy, its plans: ~57,000 objects) lives as long as the
    # worker. Frozen, a full collection no longer walks it, which paused every request in the
    # worker for ~25 ms.
    gc.freeze()
    return app

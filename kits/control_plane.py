"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler and, when
asked, kube-controller-manager, for the end-to-end suite and the placement benchmark.

    with ControlPlane.start(controller_manager=True) as cp:
        cp.add_node("gpu-1", cpu="32", memory="256Gi", gpus=8, zone="zone-a")
        cp.restart_scheduler(profiles=Path("manifests/scheduler/profiles.yaml"))
        api = cp.api_client()

The shape is an envtest's: anyone holding the four binaries can run it. They come from
`KUBE_BIN_DIR` when set, or else from the `kube-v*-linux-amd64.tar.xz` beside the repository
(`../shared/kube/`, as CI lays it out), unpacked once into a cache folder (`KUBE_CACHE_DIR`,
default `~/.cache/kube-steer`). The PKI is made by the product's `certs.pki`; every listener
takes a free loopback port, so two control planes can run side by side; `stop()` ends every
process by PID and removes the work folder.

A control plane without kubelets differs from a cluster (see ../shared/kube/README.md): Nodes are
API objects whose status the tests write (`add_node`), pods are bound but never run and must be
deleted with grace period 0 (`delete_pods`), and TaintNodesByCondition is off so a Node is not
born tainted `not-ready`. Real kubelets, kubemark hollow nodes, are in kits.hollow_nodes;
the plane stops them with itself (`attach`).

`start(audit_groups=[...])` has the apiserver write an audit log (`audit_events()`): one JSON
line per request of a user in those groups, at the Metadata level (who, verb, object, response
code), e.g. to check that a role grants what its process uses and nothing more. Off by default.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes import client

from certs.pki import IssuedCert, issue_cert, new_ca
from kits.net import free_port
from steer.adapters.kube import make_api_client

ROOT = Path(__file__).resolve().parents[1]
SHARED_KUBE = ROOT.parent / "shared" / "kube"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
# Controllers that need kubelets or a cloud; the rest (ServiceAccounts, ReplicaSets, GC) run.
KCM_CONTROLLERS = (
    "*,-node-lifecycle-controller,-node-ipam-controller,-cloud-node-lifecycle-controller,"
    "-service-lb-controller,-node-route-controller"
)
GPU = "nvidia.com/gpu"


def ready_node_status(name: str, capacity: Mapping[str, str]) -> dict[str, Any]:
    """The status of a Ready Node nothing runs on (no kubelet reports it): capacity as
    allocatable, a Ready condition from now and its hostname address."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "fake node",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
        "addresses": [{"type": "Hostname", "address": name}],
    }


def audit_policy(groups: Sequence[str]) -> dict[str, Any]:
    """An audit Policy that logs the requests of users in `groups` at the Metadata level (user,
    verb, objectRef, requestURI, responseStatus; no bodies) and nothing else. A request is
    logged when its response starts (a watch) and when it completes, not when it arrives."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "userGroups": list(groups)},
            {"level": "None"},
        ],
    }


class ControlPlaneError(RuntimeError):
    """A component could not be found, started, or did not become ready (log tail included)."""


# -- binaries ---------------------------------------------------------------------------------


def find_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding the four binaries: `bin_dir`, $KUBE_BIN_DIR, or the unpacked tarball."""
    chosen = bin_dir or os.environ.get("KUBE_BIN_DIR")
    if chosen:
        folder = Path(chosen)
        missing = [b for b in BINARIES if not os.access(folder / b, os.X_OK)]
        if missing:
            raise ControlPlaneError(
                f"KUBE_BIN_DIR={folder}: missing or not executable: {', '.join(missing)}"
            )
        return folder
    return unpack_release(SHARED_KUBE)


def cache_root() -> Path:
    """Where unpacked binaries are kept between runs: $KUBE_CACHE_DIR, $XDG_CACHE_HOME, ~/.cache."""
    base = os.environ.get("KUBE_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) if base else Path.home() / ".cache" / "kube-steer"


def unpack_release(kube_dir: Path) -> Path:
    """Unpack `kube-v*-linux-amd64.tar.xz` (and kubectl) once into the cache; return the folder.

    The unpacked folder appears atomically (rename), under a file lock, so parallel runs and an
    interrupted unpack never see half a binary."""
    tarballs = sorted(kube_dir.glob("kube-v*-linux-amd64.tar.xz"))
    if not tarballs:
        raise ControlPlaneError(
            f"no Kubernetes binaries: set KUBE_BIN_DIR to a folder with {', '.join(BINARIES)}, "
            f"or put kube-v*-linux-amd64.tar.xz in {kube_dir}"
        )
    tarball = tarballs[-1]
    version = tarball.name.removesuffix("-linux-amd64.tar.xz")
    cache = cache_root()
    target = cache / version
    if all((target / b).exists() for b in BINARIES):
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all((target / b).exists() for b in BINARIES):
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache))
        with tarfile.open(tarball, "r:xz") as tar:
            tar.extractall(staging, filter="data")
        # The tarball may hold the binaries at its top or in one folder.
        for binary in BINARIES:
            found = next(staging.rglob(binary), None)
            if found is None:
                raise ControlPlaneError(f"{tarball} holds no {binary}")
            if found.parent != staging:
                found.rename(staging / binary)
            (staging / binary).chmod(0o755)
        kubectl_xz = next(iter(sorted(kube_dir.glob("kubectl-v*-linux-amd64.xz"))), None)
        if kubectl_xz is not None:
            import lzma

            (staging / "kubectl").write_bytes(lzma.decompress(kubectl_xz.read_bytes()))
            (staging / "kubectl").chmod(0o755)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


# -- PKI ----------------------------------------------------------------------------------------


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:  # the service-account signing key
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class Pki:
    """One CA and the leaf certificates a control plane needs, made by the product's own issuer
    (`certs.pki`: ECDSA P-256), valid 2 days."""

    DAYS = 2

    def __init__(self) -> None:
        self.ca = new_ca(days=self.DAYS)

    def leaf(
        self,
        common_name: str,
        *,
        groups: Sequence[str] = (),
        server: bool = False,
        dns: Sequence[str] = (),
        ips: Sequence[str] = (),
    ) -> IssuedCert:
        """A serving certificate for `dns`/`ips`, or (`server=False`) a client certificate for
        the user `common_name` in `groups`."""
        return issue_cert(
            self.ca,
            common_name,
            purpose="server" if server else "client",
            organizations=groups,
            dns_names=dns,
            ips=ips,
            days=self.DAYS,
        )


def _write(path: Path, data: bytes | str, mode: int = 0o600) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)
    return path


def kubeconfig_text(server: str, ca_pem: bytes, user: str, pem: IssuedCert) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64(pem.cert_pem),
                        "client-key-data": b64(pem.key_pem),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
            "current-context": "e2e",
        }
    )


# -- processes ----------------------------------------------------------------------------------


@dataclass
class Component:
    name: str
    args: list[str]
    log: Path
    ready_url: str = ""
    process: subprocess.Popen[bytes] | None = None

    def spawn(self, command: Sequence[str], pass_fds: Sequence[int] = ()) -> None:
        """Run `command` + `args`, appending to `log`, in its own process group (so `stop()`
        ends it whole)."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Stoppable(Protocol):
    """Anything `ControlPlane.stop()` ends with it (kits.hollow_nodes.HollowNode)."""

    def stop(self) -> None: ...


@dataclass
class ControlPlane:
    """A running control plane. Build it with `ControlPlane.start()`; use it as a context manager."""

    workdir: Path
    bin_dir: Path
    ports: dict[str, int]
    pki: Pki
    components: dict[str, Component] = field(default_factory=dict)
    # Processes started against this plane (hollow nodes): stopped first by `stop()`.
    attached: list[Stoppable] = field(default_factory=list)
    scheduler_config: Path | None = None
    _owns_workdir: bool = True
    _api: client.ApiClient | None = None
    # Set when the apiserver writes an audit log (`start(audit_groups=...)`).
    audit_log: Path | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        workdir: str | os.PathLike[str] | None = None,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        controller_manager: bool = False,
        scheduler: bool = True,
        scheduler_profiles: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        apiserver_args: Sequence[str] = (),
        audit_groups: Sequence[str] = (),
    ) -> ControlPlane:
        """Start etcd and kube-apiserver, then the scheduler (optionally with a profiles file or
        `KubeSchedulerConfiguration` mapping) and the controller manager; wait until each is ready.

        `audit_groups`: the apiserver logs every request of a user in one of these groups
        (`audit_policy`), read back with `audit_events()`; no audit log when empty."""
        found = find_binaries(bin_dir)
        owns = workdir is None
        folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="steer-kube-"))
        folder.mkdir(parents=True, exist_ok=True)
        ports = {
            name: free_port()
            for name in ("etcd", "etcd-peer", "apiserver", "scheduler", "controller-manager")
        }
        plane = cls(folder, found, ports, Pki(), _owns_workdir=owns)
        atexit.register(plane.stop)
        try:
            plane._write_pki()
            plane._start_etcd()
            plane._start_apiserver([*apiserver_args, *plane._audit_args(audit_groups)])
            if scheduler:
                plane.restart_scheduler(scheduler_profiles)
            if controller_manager:
                plane._start_controller_manager()
        except BaseException:
            plane.stop()
            raise
        return plane

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the attached hollow nodes, then every component (controller manager and
        scheduler first, etcd last), and remove the work folder if this control plane made it."""
        while self.attached:
            self.attached.pop().stop()
        for name in ("kube-controller-manager", "kube-scheduler", "kube-apiserver", "etcd"):
            component = self.components.get(name)
            if component is not None:
                component.stop()
        if self._api is not None:
            self._api.close()
            self._api = None
        atexit.unregister(self.stop)
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- addresses and credentials ------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def logs_dir(self) -> Path:
        """Every component's log, and the hollow nodes' (`<name>.log`)."""
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return logs

    def attach(self, part: Stoppable) -> None:
        """Have `stop()` stop `part` (before the apiserver goes, so it can deregister cleanly)."""
        if part not in self.attached:
            self.attached.append(part)

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (`O=system:masters`)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    def api_client(self) -> client.ApiClient:
        """A shared admin ApiClient (closed by `stop()`)."""
        if self._api is None:
            self._api = make_api_client(str(self.kubeconfig))
        return self._api

    def user_kubeconfig(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig for a client-certificate user (RBAC applies), e.g. to test a role."""
        safe = user.replace(":", "_").replace("/", "_")
        pem = self.pki.leaf(user, groups=groups)
        path = self.workdir / f"{safe}.kubeconfig"
        return _write(path, kubeconfig_text(self.url, self.pki.ca.cert_pem, user, pem))

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> str:
        """Run the kubectl shipped beside the binaries (if any) with the admin kubeconfig."""
        kubectl = self.bin_dir / "kubectl"
        if not kubectl.exists():
            found = shutil.which("kubectl")
            if found is None:
                raise ControlPlaneError("no kubectl beside the binaries nor on PATH")
            kubectl = Path(found)
        done = subprocess.run(
            [str(kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    # -- the audit log --------------------------------------------------------------------------

    def _audit_args(self, groups: Sequence[str]) -> list[str]:
        if not groups:
            return []
        policy = _write(
            self.workdir / "audit-policy.yaml", yaml.safe_dump(audit_policy(groups)), 0o644
        )
        self.audit_log = self.logs_dir / "audit.log"
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # each event is written before the response
            "--audit-log-maxsize=0",  # one file, never rotated
        ]

    def audit_offset(self) -> int:
        """Where the audit log ends now: `audit_events(since=...)` reads what comes after."""
        if self.audit_log is None:
            raise ControlPlaneError("this control plane writes no audit log (audit_groups)")
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def audit_events(self, since: int = 0) -> list[dict[str, Any]]:
        """The audit events logged from byte `since` (`audit_offset()`) on, oldest first (one
        per request and stage: `ResponseStarted` opens a watch, `ResponseComplete` ends any
        request)."""
        if self.audit_log is None:
            raise ControlPlaneError("this control plane writes no audit log (audit_groups)")
        if not self.audit_log.exists():
            return []
        with self.audit_log.open("rb") as log:
            log.seek(since)
            data = log.read()
        # The last line may be half written while the apiserver runs.
        lines = data.split(b"\n")
        return [json.loads(line) for line in lines[:-1] if line.strip()]

    # -- components ---------------------------------------------------------------------------

    def _write_pki(self) -> None:
        pki = self.pki_dir
        pki.mkdir(parents=True, exist_ok=True)
        _write(pki / "ca.crt", self.pki.ca.cert_pem, 0o644)
        serving = self.pki.leaf(
            "kube-apiserver",
            server=True,
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ips=("127.0.0.1", "10.96.0.1"),
        )
        _write(pki / "apiserver.crt", serving.cert_pem, 0o644)
        _write(pki / "apiserver.key", serving.key_pem)
        for name, cn in (
            ("scheduler", "kube-scheduler"),
            ("controller-manager", "kube-controller-manager"),
        ):
            pem = self.pki.leaf(cn, server=True, dns=("localhost",), ips=("127.0.0.1",))
            _write(pki / f"{name}-serving.crt", pem.cert_pem, 0o644)
            _write(pki / f"{name}-serving.key", pem.key_pem)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write(pki / "sa.key", _pem_key(sa_key))
        _write(
            pki / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        )
        admin = self.pki.leaf("admin", groups=["system:masters"])
        _write(pki / "admin.crt", admin.cert_pem, 0o644)
        _write(pki / "admin.key", admin.key_pem)
        _write(self.kubeconfig, kubeconfig_text(self.url, self.pki.ca.cert_pem, "admin", admin))
        for name, user in (
            ("scheduler", "system:kube-scheduler"),
            ("controller-manager", "system:kube-controller-manager"),
        ):
            pem = self.pki.leaf(user)
            _write(
                self.workdir / f"{name}.kubeconfig",
                kubeconfig_text(self.url, self.pki.ca.cert_pem, user, pem),
            )

    def _launch(self, name: str, args: list[str], ready_url: str, timeout: float) -> Component:
        component = Component(name, args, self.logs_dir / f"{name}.log", ready_url)
        component.spawn([str(self.bin_dir / name)])
        self.components[name] = component
        self._wait_ready(component, timeout)
        return component

    def _wait_ready(self, component: Component, timeout: float) -> None:
        session = requests.Session()
        session.trust_env = False  # this machine sets REQUESTS_CA_BUNDLE
        session.verify = str(self.ca_file)
        session.cert = (str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        deadline = time.monotonic() + timeout
        last = ""
        try:
            while time.monotonic() < deadline:
                if not component.running:
                    raise ControlPlaneError(
                        f"{component.name} exited with code "
                        f"{component.process.returncode if component.process else '?'}; "
                        f"log tail:\n{component.log_tail()}"
                    )
                try:
                    resp = session.get(component.ready_url, timeout=2)
                    if resp.status_code == 200:
                        return
                    last = f"HTTP {resp.status_code}: {resp.text[:300]}"
                except requests.RequestException as exc:
                    last = str(exc)
                time.sleep(0.2)
        finally:
            session.close()
        component.stop()
        raise ControlPlaneError(
            f"{component.name} not ready after {timeout:.0f}s ({last}); log tail:\n"
            f"{component.log_tail()}"
        )

    def _start_etcd(self) -> None:
        client_url = f"http://127.0.0.1:{self.ports['etcd']}"
        peer_url = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._launch(
            "etcd",
            [
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                "--log-level=warn",
            ],
            f"{client_url}/health",
            60,
        )

    def _start_apiserver(self, extra: Sequence[str]) -> None:
        pki = self.pki_dir
        self._launch(
            "kube-apiserver",
            [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=Node,RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                # No kubelet will ever clear a not-ready taint on our Node objects.
                "--disable-admission-plugins=TaintNodesByCondition",
                "--allow-privileged=true",
                # 127.0.0.1 is not a valid endpoint address for the `kubernetes` Service.
                "--endpoint-reconciler-type=none",
                *extra,
            ],
            f"{self.url}/readyz",
            180,
        )

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, its graceful shutdown) while etcd, the scheduler and
        every client keep running: they see connections refused until `start_apiserver_again`."""
        self.components["kube-apiserver"].stop()

    def start_apiserver_again(self, timeout: float = 180) -> None:
        """Start kube-apiserver again with the arguments it had, on the same port and etcd
        (so with the same objects and resourceVersions); returns once it is ready."""
        component = self.components["kube-apiserver"]
        component.spawn([str(self.bin_dir / component.name)])
        self._wait_ready(component, timeout)

    def stop_scheduler(self) -> None:
        """Stop kube-scheduler, if running: pods created meanwhile stay Pending."""
        old = self.components.pop("kube-scheduler", None)
        if old is not None:
            old.stop()

    def restart_scheduler(
        self,
        profiles: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        client_qps: float | None = None,
        client_burst: int | None = None,
    ) -> Component:
        """(Re)start kube-scheduler, with the profiles of a `KubeSchedulerConfiguration` (a file
        such as manifests/scheduler/profiles.yaml, or a mapping) or the stock defaults.

        The connection and leader-election settings of the given configuration are replaced
        by this control plane's; everything else (profiles, plugin config) is passed as is, so
        a profile the real scheduler rejects raises ControlPlaneError with its log.
        `client_qps`/`client_burst` raise the scheduler's API client limits (default 50/100),
        which otherwise cap bindings per second in a benchmark; burst defaults to the qps."""
        self.stop_scheduler()
        if profiles is None:
            config: dict[str, Any] = {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
            }
        elif isinstance(profiles, Mapping):
            config = dict(profiles)
        else:
            config = yaml.safe_load(Path(profiles).read_text())
        connection: dict[str, Any] = {"kubeconfig": str(self.workdir / "scheduler.kubeconfig")}
        if client_qps is not None:
            connection["qps"] = client_qps
            connection["burst"] = int(client_qps)
        if client_burst is not None:
            connection["burst"] = client_burst
        config["clientConnection"] = connection
        config["leaderElection"] = {"leaderElect": False}
        self.scheduler_config = _write(
            self.workdir / "scheduler-config.yaml", yaml.safe_dump(config), 0o644
        )
        pki = self.pki_dir
        kubeconfig = self.workdir / "scheduler.kubeconfig"
        return self._launch(
            "kube-scheduler",
            [
                f"--config={self.scheduler_config}",
                f"--secure-port={self.ports['scheduler']}",
                "--bind-address=127.0.0.1",
                f"--tls-cert-file={pki / 'scheduler-serving.crt'}",
                f"--tls-private-key-file={pki / 'scheduler-serving.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
            ],
            f"https://127.0.0.1:{self.ports['scheduler']}/readyz",
            120,
        )

    def _start_controller_manager(self) -> None:
        pki = self.pki_dir
        kubeconfig = self.workdir / "controller-manager.kubeconfig"
        _write(pki / "ca.key", self.pki.ca.key_pem)
        self._launch(
            "kube-controller-manager",
            [
                f"--secure-port={self.ports['controller-manager']}",
                "--bind-address=127.0.0.1",
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--tls-cert-file={pki / 'controller-manager-serving.crt'}",
                f"--tls-private-key-file={pki / 'controller-manager-serving.key'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--allocate-node-cidrs=false",
                f"--controllers={KCM_CONTROLLERS}",
            ],
            f"https://127.0.0.1:{self.ports['controller-manager']}/healthz",
            120,
        )

    def scheduler_metrics(self) -> str:
        """The scheduler's /metrics text (read with the admin certificate)."""
        return self._scheduler_get("/metrics", timeout=10).text

    def scheduler_cpu_profile(self, seconds: int) -> bytes:
        """The scheduler's own CPU profile over the next `seconds` (`/debug/pprof/profile`, Go's
        pprof format: `go tool pprof -top FILE`)."""
        return self._scheduler_get(
            "/debug/pprof/profile", params={"seconds": str(seconds)}, timeout=seconds + 30
        ).content

    def _scheduler_get(
        self, path: str, *, params: Mapping[str, str] | None = None, timeout: float
    ) -> requests.Response:
        pki = self.pki_dir
        with requests.Session() as session:
            session.trust_env = False
            resp = session.get(
                f"https://127.0.0.1:{self.ports['scheduler']}{path}",
                params=params,
                verify=str(self.ca_file),
                cert=(str(pki / "admin.crt"), str(pki / "admin.key")),
                timeout=timeout,
            )
        resp.raise_for_status()
        return resp

    # -- what a kubelet-less cluster needs ------------------------------------------------------

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create (or relabel) a namespace and its `default` ServiceAccount, which pods need and
        only the controller manager would otherwise make."""
        core: Any = client.CoreV1Api(self.api_client())
        body = {"metadata": {"name": name, "labels": dict(labels or {})}}
        try:
            core.create_namespace(body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            core.patch_namespace(name, {"metadata": {"labels": dict(labels or {})}})
        try:
            core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def add_node(
        self,
        name: str,
        *,
        cpu: str = "8",
        memory: str = "32Gi",
        pods: int = 110,
        gpus: int = 0,
        zone: str | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] = (),
        extra_capacity: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a Ready Node with the given capacity (= allocatable), zone and labels."""
        core: Any = client.CoreV1Api(self.api_client())
        node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        if zone:
            node_labels["topology.kubernetes.io/zone"] = zone
        node_labels.update(labels or {})
        spec: dict[str, Any] = {}
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        core.create_node({"metadata": {"name": name, "labels": node_labels}, "spec": spec})
        capacity = {"cpu": cpu, "memory": memory, "pods": str(pods)}
        if gpus:
            capacity[GPU] = str(gpus)
        capacity.update(extra_capacity or {})
        status = {"status": ready_node_status(name, capacity)}
        node: dict[str, Any] = self.api_client().sanitize_for_serialization(
            core.patch_node_status(name, status)
        )
        return node

    def delete_pods(self, namespace: str, label_selector: str | None = None) -> int:
        """Delete pods with grace period 0 (nothing runs them, so nothing would confirm a
        graceful stop); returns how many were deleted."""
        core: Any = client.CoreV1Api(self.api_client())
        kwargs = {"label_selector": label_selector} if label_selector else {}
        pods = core.list_namespaced_pod(namespace, **kwargs).items
        for pod in pods:
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        return len(pods)

    def wait_for_bindings(
        self, namespace: str, names: Iterable[str], timeout: float = 60.0
    ) -> dict[str, str | None]:
        """Wait until each named pod is bound (or the timeout passes); name → node or None."""
        core: Any = client.CoreV1Api(self.api_client())
        wanted = set(names)
        bound: dict[str, str | None] = dict.fromkeys(wanted)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pod in core.list_namespaced_pod(namespace).items:
                if pod.metadata.name in wanted:
                    bound[pod.metadata.name] = pod.spec.node_name
            if all(bound.values()):
                break
            time.sleep(0.2)
        return bound


@contextlib.contextmanager
def control_plane(**kwargs: Any) -> Iterator[ControlPlane]:
    plane = ControlPlane.start(**kwargs)
    try:
        yield plane
    finally:
        plane.stop()

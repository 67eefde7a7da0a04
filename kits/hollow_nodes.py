"""Real kubelets for the test kit: kubemark hollow nodes (the kubelet's own code over a fake
container runtime) registered with a `ControlPlane`.

    node = HollowNode(plane, "hollow-1", zone="zone-a", extended_resources={"nvidia.com/gpu": 8})
    node.start()                  # registered and Ready
    node.advertise({"example.com/foo": "1000"})
    ...
    node.restart()                # a kubelet restart: every bound pod is admitted again

What fake Node objects cannot show and these can: a kubelet that restarts re-admits every pod
bound to it against the node as it is *now* (labels, status.allocatable), and turns a pod that
no longer fits `Failed` (`NodeAffinity`, `OutOf<resource>`). See ../shared/kube/README.md.

Each node authenticates as `system:node:<name>` (group `system:nodes`), so the apiserver's Node
authorizer applies as in a cluster. kubemark keeps its root dir and its fake runtime's socket in
a hard-coded /tmp; where a private mount namespace is allowed (root, or unprivileged user
namespaces) the node gets its own /tmp under the control plane's work folder, so nothing is
left behind. Every node is stopped by `ControlPlane.stop()` and at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import lzma
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kits.control_plane import (
    SHARED_KUBE,
    Component,
    ControlPlane,
    ControlPlaneError,
    cache_root,
    kubeconfig_text,
)
from kits.net import free_port
from steer.adapters.kubejson import MERGE_PATCH, KubeApiError, KubeJson

ZONE = "topology.kubernetes.io/zone"
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
# Run inside the node's mount namespace: its own folder becomes /tmp, and kubemark is executed
# through an inherited descriptor because its path may itself be under the hidden /tmp.
_PRIVATE_TMP = 'fd=$1; shift; mount --bind "$0" /tmp && exec "/proc/self/fd/$fd" "$@"'
_ROOT_DIR_LOG = re.compile(r"Using (/tmp/hollow-kubelet\.\d+) as root dir")
_FINISHED = ("Succeeded", "Failed")


# -- the binary ---------------------------------------------------------------------------------


def find_kubemark() -> Path:
    """The kubemark binary: $KUBEMARK, else $KUBE_BIN_DIR/kubemark, else the .xz beside the
    repository (../shared/kube) unpacked once into the binaries' cache."""
    return find_xz_binary("kubemark")


def find_xz_binary(binary: str) -> Path:
    """A binary shipped as `<binary>-v*-linux-amd64.xz` (kubemark, the descheduler): $BINARY,
    else $KUBE_BIN_DIR/<binary>, else the .xz in ../shared/kube unpacked once into the cache."""
    variable = binary.upper()
    chosen = os.environ.get(variable)
    if chosen:
        if not os.access(chosen, os.X_OK):
            raise ControlPlaneError(f"{variable}={chosen}: missing or not executable")
        return Path(chosen)
    bin_dir = os.environ.get("KUBE_BIN_DIR")
    if bin_dir and os.access(Path(bin_dir) / binary, os.X_OK):
        return Path(bin_dir) / binary
    return unpack_xz_binary(SHARED_KUBE, binary)


def unpack_xz_binary(kube_dir: Path, binary: str) -> Path:
    """Decompress `<binary>-v*-linux-amd64.xz` into `<cache>/<binary>-v*/<binary>` once.

    The binary appears by rename, under a file lock, so parallel runs and an interrupted
    unpack never see half of it (as `unpack_release` does for the tarball)."""
    found = sorted(kube_dir.glob(f"{binary}-v*-linux-amd64.xz"))
    if not found:
        raise ControlPlaneError(
            f"no {binary}: set {binary.upper()} to the binary, or put "
            f"{binary}-v*-linux-amd64.xz in {kube_dir}"
        )
    packed = found[-1]
    version = packed.name.removesuffix("-linux-amd64.xz")
    target = cache_root() / version / binary
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        fd, staging = tempfile.mkstemp(prefix=f".{binary}-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out, lzma.open(packed) as src:
                shutil.copyfileobj(src, out, 1 << 20)
            os.chmod(staging, 0o755)
            os.replace(staging, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staging)
            raise
    return target


_private_tmp_prefix: list[str] | None = None
_probe_lock = threading.Lock()


def _namespace_prefix() -> list[str]:
    """`unshare` arguments that give a process its own mounts, or [] where that is refused
    (checked once: root may, other users only with unprivileged user namespaces)."""
    global _private_tmp_prefix
    with _probe_lock:
        if _private_tmp_prefix is None:
            prefix = ["unshare", "--mount"]
            if os.geteuid() != 0:
                prefix = ["unshare", "--user", "--map-root-user", "--mount"]
            try:
                done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
                ok = done.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            _private_tmp_prefix = prefix if ok else []
        return _private_tmp_prefix


# -- pods -----------------------------------------------------------------------------------------


class PodPhaseError(AssertionError):
    """Pods did not reach the awaited phase: one finished otherwise, or time ran out."""


@dataclass(frozen=True)
class PodState:
    """What the kubelet says about a pod: `Failed`/`NodeAffinity`/"Pod was rejected: ..."."""

    phase: str
    reason: str = ""
    message: str = ""
    node: str = ""
    ready: bool = False  # the Ready condition is True and every container is running
    resource_version: str = ""


def pod_state(plane: ControlPlane, namespace: str, name: str) -> PodState:
    pod = KubeJson(plane.api_client()).request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return _state(pod)


def _state(pod: Mapping[str, Any]) -> PodState:
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    containers = status.get("containerStatuses") or []
    running = bool(containers) and all("running" in (c.get("state") or {}) for c in containers)
    return PodState(
        phase=status.get("phase", ""),
        reason=status.get("reason", ""),
        message=status.get("message", ""),
        node=(pod.get("spec") or {}).get("nodeName", ""),
        ready=conditions.get("Ready") == "True" and running,
        resource_version=pod["metadata"].get("resourceVersion", ""),
    )


def wait_pods_phase(
    plane: ControlPlane,
    namespace: str,
    names: Iterable[str],
    phase: str = "Running",
    timeout: float = 30.0,
) -> dict[str, PodState]:
    """Wait until every named pod is in `phase`; name → state. A pod that finishes in another
    phase (say `Failed` while `Running` is awaited) fails at once, with its reason."""
    wanted = list(names)
    states: dict[str, PodState] = {}
    deadline = time.monotonic() + timeout
    while True:
        for name in wanted:
            try:
                states[name] = pod_state(plane, namespace, name)
            except KubeApiError as exc:
                states[name] = PodState(phase=f"(unreadable: HTTP {exc.status})")
        if all(s.phase == phase for s in states.values()):
            return states
        finished = {n: s for n, s in states.items() if s.phase in _FINISHED and s.phase != phase}
        if finished or time.monotonic() >= deadline:
            why = "finished otherwise" if finished else f"not within {timeout:.0f}s"
            raise PodPhaseError(f"pods in {namespace} not {phase} ({why}): {states}")
        time.sleep(0.2)


def wait_pods_running(
    plane: ControlPlane, namespace: str, names: Iterable[str], timeout: float = 30.0
) -> dict[str, PodState]:
    return wait_pods_phase(plane, namespace, names, "Running", timeout)


# -- hollow nodes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessUsage:
    rss_bytes: int
    cpu_seconds: float  # user + system since the process started


@dataclass(eq=False)
class HollowNode:
    """One kubemark hollow node against `plane`: the real kubelet, fake containers.

    Capacity is the fake cAdvisor's (`cpu: 1`, `memory: 3840Mi`) plus `extended_resources`;
    `taints` are `{"key", "value", "effect"}` and, as with a real kubelet, apply only when the
    Node is first registered. `port` stays the same across restarts."""

    plane: ControlPlane
    name: str
    zone: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    extended_resources: Mapping[str, str | int] = field(default_factory=dict)
    max_pods: int = 110
    port: int = field(default_factory=lambda: free_port("0.0.0.0"))  # kubelets bind 0.0.0.0
    extra_args: Sequence[str] = ()
    _component: Component | None = field(default=None, init=False, repr=False)
    _private_tmp: bool = field(default=False, init=False, repr=False)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def folder(self) -> Path:
        """The node's kubeconfig and, in its own mount namespace, its /tmp."""
        return self.plane.workdir / "hollow" / self.name

    @property
    def log(self) -> Path:
        return self.plane.logs_dir / f"hollow-{self.name}.log"

    @property
    def running(self) -> bool:
        return self._component is not None and self._component.running

    @property
    def pid(self) -> int | None:
        component = self._component
        return component.process.pid if component and component.process else None

    def start(self, timeout: float = 60.0) -> HollowNode:
        """Start the kubelet and wait until the Node is registered and `Ready=True`. When the Node
        was there already (a restart finds the old `Ready=True`), wait as well for this process
        to renew the node's Lease; a new kubelet creates its Lease only ~10 s later."""
        if self.running:
            return self
        kubemark = find_kubemark()
        self.folder.mkdir(parents=True, exist_ok=True)
        user = f"system:node:{self.name}"
        pem = self.plane.pki.leaf(user, groups=["system:nodes"])
        kubeconfig = self.folder / "kubeconfig"
        kubeconfig.write_text(
            kubeconfig_text(self.plane.url, self.plane.pki.ca.cert_pem, user, pem)
        )
        kubeconfig.chmod(0o600)
        prefix = _namespace_prefix()
        self._private_tmp = bool(prefix)
        seen = "/tmp/kubeconfig" if self._private_tmp else str(kubeconfig)
        component = Component(f"hollow-{self.name}", self._args(seen), self.log)
        with self.log.open("a") as log:
            log.write(f"--- kube-steer: starting hollow node {self.name} at {_now()}\n")
        self.plane.attach(self)
        atexit.register(self.stop)
        started = datetime.now(UTC)
        registered = self._exists()
        if self._private_tmp:
            binary = os.open(kubemark, os.O_RDONLY)
            try:
                wrapper = [*prefix, "sh", "-c", _PRIVATE_TMP, str(self.folder), str(binary)]
                component.spawn(wrapper, pass_fds=(binary,))
            finally:
                os.close(binary)
        else:
            component.spawn([str(kubemark)])
        self._component = component
        try:
            self._wait_ready(started, registered, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _args(self, kubeconfig: str) -> list[str]:
        labels = dict(self.labels)
        if self.zone:
            labels[ZONE] = self.zone
        args = [
            "--morph=kubelet",
            f"--name={self.name}",
            f"--kubeconfig={kubeconfig}",
            f"--kubelet-port={self.port}",
            "--kubelet-read-only-port=0",
            # No container runtime on the host: the fake image service, not containerd's.
            "--use-host-image-service=false",
            f"--max-pods={self.max_pods}",
        ]
        if labels:
            args.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
        if self.taints:
            args.append("--register-with-taints=" + ",".join(_taint(t) for t in self.taints))
        if self.extended_resources:
            pairs = ",".join(f"{k}={v}" for k, v in self.extended_resources.items())
            args.append(f"--extended-resources={pairs}")
        return [*args, *self.extra_args]

    def _exists(self) -> bool:
        try:
            self.read()
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _wait_ready(self, started: datetime, registered: bool, timeout: float) -> None:
        api = KubeJson(self.plane.api_client())
        deadline = time.monotonic() + timeout
        last = "not registered"
        while time.monotonic() < deadline:
            if not self.running:
                component = self._component
                code = component.process.returncode if component and component.process else "?"
                raise ControlPlaneError(
                    f"hollow node {self.name} exited with code {code}; log tail:\n{self.log_tail()}"
                )
            try:
                ready = _condition(api.request("GET", f"/api/v1/nodes/{self.name}"), "Ready")
                if ready == "True" and not registered:
                    return
                lease = api.request("GET", f"{NODE_LEASES}/{self.name}")
                renewed = lease["spec"].get("renewTime", "")
                if ready == "True" and renewed and datetime.fromisoformat(renewed) >= started:
                    return
                last = f"Ready={ready}, lease renewed {renewed or 'never'}"
            except KubeApiError as exc:
                last = str(exc)
            time.sleep(0.2)
        self.stop()
        raise ControlPlaneError(
            f"hollow node {self.name} not Ready after {timeout:.0f}s ({last}); log tail:\n"
            f"{self.log_tail()}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the kubelet's process group, wait, and remove what it left in /tmp. The Node
        object stays (as when a kubelet stops); `delete()` removes it."""
        component, self._component = self._component, None
        atexit.unregister(self.stop)
        if component is None:
            return
        component.stop(timeout)
        if self._private_tmp:
            for leftover in self.folder.iterdir():
                if leftover.name != "kubeconfig":
                    _remove(leftover)
        else:
            with contextlib.suppress(FileNotFoundError):
                for root in set(_ROOT_DIR_LOG.findall(self.log.read_text(errors="replace"))):
                    _remove(Path(root))

    def restart(self, timeout: float = 60.0, *, settle: bool = True) -> None:
        """A kubelet restart: stop, start with the same name and port. With `settle`, also wait
        until the new kubelet has admitted again every pod that was bound to the node and not
        finished: written it `Running` and ready, or rejected it `Failed`.

        A rejected pod takes ~10 s to show `Failed`: the kubelet's status manager holds back a
        terminal phase until the pod worker confirms no container runs, and its next periodic
        sync (10 s) writes it; meanwhile the pod reads `Running` with no conditions."""
        self.stop()
        before = {
            (p["metadata"]["namespace"], p["metadata"]["name"]): _state(p) for p in self.pods()
        }
        pending = {key: s for key, s in before.items() if s.phase not in _FINISHED}
        self.start(timeout)
        if settle:
            self._wait_readmitted(pending, timeout)

    def _wait_readmitted(self, before: Mapping[tuple[str, str], PodState], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = dict(before)
        while waiting:
            for (namespace, name), old in list(waiting.items()):
                try:
                    now = pod_state(self.plane, namespace, name)
                except KubeApiError as exc:
                    if exc.status == 404:
                        del waiting[(namespace, name)]
                    continue
                rewritten = now.resource_version != old.resource_version
                if rewritten and (now.phase in _FINISHED or (now.phase == "Running" and now.ready)):
                    del waiting[(namespace, name)]
            if waiting and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"hollow node {self.name}: after a restart, no new status within "
                    f"{timeout:.0f}s for {sorted(waiting)}"
                )
            if waiting:
                time.sleep(0.2)

    def delete(self) -> None:
        """Stop the kubelet, delete the pods bound to the node (grace 0) and the Node."""
        self.stop()
        api = KubeJson(self.plane.api_client())
        for pod in self.pods():
            meta = pod["metadata"]
            with contextlib.suppress(KubeApiError):
                api.request(
                    "DELETE",
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    query={"gracePeriodSeconds": 0},
                )
        with contextlib.suppress(KubeApiError):
            api.request("DELETE", f"/api/v1/nodes/{self.name}")

    # -- the Node and its pods ----------------------------------------------------------------

    def read(self) -> dict[str, Any]:
        return KubeJson(self.plane.api_client()).request("GET", f"/api/v1/nodes/{self.name}")

    def pods(self) -> list[dict[str, Any]]:
        """The pods bound to this node, in every namespace."""
        return KubeJson(self.plane.api_client()).list_all(
            "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={self.name}"}
        )

    def advertise(self, resources: Mapping[str, str | int | None]) -> dict[str, Any]:
        """Set each resource in `status.capacity` and `status.allocatable` (None removes it),
        as a device plugin or the scorer would; the kubelet keeps what it does not own."""
        values = {k: (None if v is None else str(v)) for k, v in resources.items()}
        return KubeJson(self.plane.api_client()).request(
            "PATCH",
            f"/api/v1/nodes/{self.name}/status",
            body={"status": {"capacity": values, "allocatable": values}},
            content_type=MERGE_PATCH,
        )

    def label(self, labels: Mapping[str, str | None]) -> dict[str, Any]:
        """Set (or with None remove) Node labels. The kubelet puts back the well-known ones it
        registered with (zone, hostname, os, arch) when it restarts; other labels stay."""
        return KubeJson(self.plane.api_client()).request(
            "PATCH",
            f"/api/v1/nodes/{self.name}",
            body={"metadata": {"labels": dict(labels)}},
            content_type=MERGE_PATCH,
        )

    # -- diagnostics ----------------------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def usage(self) -> ProcessUsage:
        """RSS and CPU time of the running kubelet (zeros when stopped)."""
        pid = self.pid
        if pid is None or not self.running:
            return ProcessUsage(0, 0.0)
        rss = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
        rss_kib = int(rss.group(1)) if rss else 0
        # Fields after the parenthesised command name; utime and stime are the 12th and 13th.
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return ProcessUsage(rss_kib * 1024, (int(stat[11]) + int(stat[12])) / ticks)


def start_all(nodes: Iterable[HollowNode], timeout: float = 60.0) -> list[HollowNode]:
    """Start hollow nodes side by side (each takes a second or two to register)."""
    return _each(nodes, lambda node: node.start(timeout))


def restart_all(nodes: Iterable[HollowNode], timeout: float = 60.0) -> list[HollowNode]:
    """Restart hollow nodes side by side, each settling as `HollowNode.restart` does."""

    def restart(node: HollowNode) -> HollowNode:
        node.restart(timeout)
        return node

    return _each(nodes, restart)


def rolling_restart(nodes: Iterable[HollowNode], timeout: float = 60.0) -> None:
    """Restart nodes one after another, each Ready (and its pods admitted again) before the next,
    as an upgrade of the kubelets would."""
    for node in nodes:
        node.restart(timeout)


def _each(nodes: Iterable[HollowNode], act: Callable[[HollowNode], HollowNode]) -> list[HollowNode]:
    chosen = list(nodes)
    if not chosen:
        return []
    with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
        return list(pool.map(act, chosen))


def _taint(taint: Mapping[str, str]) -> str:
    value = taint.get("value")
    key = f"{taint['key']}={value}" if value else taint["key"]
    return f"{key}:{taint['effect']}"


def _condition(node: Mapping[str, Any], kind: str) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status", ""))
    return ""


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

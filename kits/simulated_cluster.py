"""A simulated cluster whose metrics follow the live Kubernetes API: the exporters a GPU cluster
would run (DCGM, Kepler, kube-state-metrics, blackbox), derived from the Node and Pod objects of
a kubelet-less control plane, for the placement benchmark.

    cluster = SimCluster(PowerModel(), external_gpu_util={"gpu-5": 95})
    with ApiPoller(api_client, cluster), SyntheticExporter(cluster) as exporter:
        ...  # a Prometheus scraping exporter.target (honor_labels: true) sees the pods bind

`SyntheticCluster` (kits.synthetic_exporter) is state a test sets by hand; here the state is what
the apiserver holds. Both render through `kits.synthetic_exporter.Exposition` (the series
names, types and labels written once) and are served by its `SyntheticExporter`. `ApiPoller`
lists nodes, pods, ResourceSlices and ResourceClaims every `interval_s` (1 s) and hands the raw
JSON to `SimCluster.update`; tests call `update` with dicts directly, no cluster needed.
Every scrape evaluates the state at that moment:

- **DCGM** (`DCGM_FI_DEV_GPU_UTIL` %, `DCGM_FI_DEV_FB_USED` / `DCGM_FI_DEV_FB_FREE` MiB; labels
  `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `hostname` = node name (`Hostname` with
  `dcgm_host_label`, as releases before dcgm-exporter #655 wrote it), and on a GPU a pod
  holds `namespace`, `pod`, `container`, as dcgm-exporter's Kubernetes mode adds them), one
  series per GPU of each node with `nvidia.com/gpu` allocatable. A bound pod requesting N GPUs is given the N
  lowest free GPU indices of its node (kept while the pod exists, in (creationTimestamp, name)
  order for pods first seen together, as a device plugin would), and those GPUs report
  `job_gpu_util` % and `job_fb_mib` MiB used. A node with GPUs through DRA (devices of
  `gpu.nvidia.com` in a ResourceSlice naming it, kits.dra; such a node advertises no
  `nvidia.com/gpu`) has one series per device instead: `gpu` its `index`, `UUID` its `uuid`;
  a device that an allocated ResourceClaim holds is busy as above, its holder being the first
  pod the claim's `reservedFor` names (dcgm-exporter's Kubernetes mode reads the holder of a
  DRA device from the kubelet's pod-resources API as it does for a device-plugin GPU).
  `external_gpu_util` marks nodes busy from outside Kubernetes (no pods): all their GPUs
  report that utilisation and `external_fb_mib` MiB used, whatever the scheduler believes is
  free. The two loads add up (capped at 100 % / the framebuffer size) on a GPU that has both.
- **Kepler >= 0.10** (the default; `kits.synthetic_exporter.Exposition.cpu_power`):
  `kepler_node_cpu_watts{node_name, path, zone}` and its `_active_` / `_idle_` parts, the
  matching `_joules_total` counters, and `kepler_node_cpu_usage_ratio{node_name}`. The usage
  ratio is the CPU cores the node's bound pods request over its allocatable cores (0..1). The
  CPU meter reads the node's modelled draw without its GPUs' busy share (idle watts + watts per
  requested core: Kepler reads the CPU's RAPL zones, which no discrete GPU is part of; its
  EP-003 proposal, docs/developer/proposal/EP-003-GPU-Power-Monitoring.md: "Kepler currently
  measures only CPU power via Intel RAPL"), split over the `package` and `dram` zones
  (`DRAM_SHARE`), so `sum by (node_name) (kepler_node_cpu_watts)` is that draw; on a CPU node
  it is the node's watts. As in Kepler, active =
  total x usage ratio and idle = total - active: active watts per requested core read about
  total / allocatable cores, not the model's marginal watts per core.
- **Kepler 0.7** (`kepler_styles=("0.7",)`, for comparisons)
  `kepler_node_platform_joules_total{instance=<node>, mode=idle|dynamic, source="acpi"}`:
  counters integrating `PowerModel.node_watts` over time (the idle part in `mode="idle"`, the
  rest in `mode="dynamic"`, so `sum by (instance) (rate(...))` is the node's watts), and
  `kepler_node_package_joules_total{mode="dynamic"}`: the requested cores' dynamic CPU watts.
  Every counter starts at 0 when a node first appears.
- **kube-state-metrics** `kube_node_status_allocatable{node, resource, unit}` (cpu/core,
  memory/byte, pods/integer, nvidia_com_gpu/integer), and `kube_pod_container_resource_requests`
  / `_limits{namespace, pod, uid, container, node, resource, unit}` for every container of every
  pod in the API (an unbound pod has `node=""`, as in KSM), except pods that finished.
- **blackbox** `probe_success{instance=<node>, node=<node>, job="node-health"}`: 1 while the
  node's Ready condition is True. The `job` label is the one the example policy's health query
  selects; scrape with `honor_labels: true` so it (and `instance`) survive.

The power model is linear: idle watts (GPU nodes idle higher) + watts per requested CPU core of
the bound pods + watts per GPU times its busy share (1 for a GPU given to a pod, the external
utilisation / 100 otherwise); a node's `node.kubernetes.io/instance-type` may pick its own idle
and per-core watts (`PowerModel.types`). Node names double as Kepler's `node_name` (0.7:
`instance`) and DCGM's `hostname`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from kits.dra import API as DRA_API
from kits.dra import GpuDevice, allocations, slice_gpus
from kits.synthetic_exporter import (
    CpuMeter,
    DcgmHostLabel,
    Exposition,
    Family,
    KeplerStyle,
    cpu_usage_ratio,
    dcgm_labels,
)
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.core.quantity import QuantityError, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
FB_TOTAL_MIB = 81920.0
_FINISHED = ("Succeeded", "Failed")

Json = Mapping[str, Any]


def ksm_resource(name: str) -> str:
    """kube-state-metrics' label value for a resource name (`nvidia.com/gpu` → `nvidia_com_gpu`)."""
    return "".join(c if c.isalnum() else "_" for c in name)


def quantity(value: Any) -> float:
    """A Kubernetes quantity as a float (0 for a malformed one: metrics must not crash)."""
    try:
        return float(parse_quantity(value))
    except QuantityError:
        return 0.0


INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclass(frozen=True)
class NodePower:
    """What one instance type draws: idle watts and dynamic watts per requested CPU core."""

    idle_w: float
    per_core_w: float


@dataclass(frozen=True)
class PowerModel:
    """Node watts = idle + per_core_w x requested CPU cores of bound pods + per_gpu_w x busy GPUs.

    `types` overrides idle and per-core watts by the node's `node.kubernetes.io/instance-type`
    label (a node of another type, or none, takes the defaults)."""

    cpu_node_idle_w: float = 150.0
    gpu_node_idle_w: float = 800.0
    per_core_w: float = 6.0
    per_gpu_w: float = 300.0
    types: Mapping[str, NodePower] = field(default_factory=dict)

    def node_watts(
        self, *, gpu_node: bool, cores: float, busy_gpus: float, instance_type: str | None = None
    ) -> float:
        return (
            self.idle_watts(gpu_node, instance_type)
            + self.core_watts(instance_type) * cores
            + self.per_gpu_w * busy_gpus
        )

    def idle_watts(self, gpu_node: bool, instance_type: str | None = None) -> float:
        spec = self.types.get(instance_type or "")
        if spec is not None:
            return spec.idle_w
        return self.gpu_node_idle_w if gpu_node else self.cpu_node_idle_w

    def core_watts(self, instance_type: str | None = None) -> float:
        """Dynamic watts per requested CPU core."""
        spec = self.types.get(instance_type or "")
        return self.per_core_w if spec is None else spec.per_core_w


@dataclass(frozen=True)
class SimContainer:
    name: str
    requests: Mapping[str, float]  # KSM resource names and units (cores, bytes, integers)
    limits: Mapping[str, float]


@dataclass(frozen=True)
class SimPod:
    uid: str
    namespace: str
    name: str
    node: str  # "" while unbound
    created: str
    containers: tuple[SimContainer, ...]

    @property
    def cores(self) -> float:
        return sum(c.requests.get("cpu", 0.0) for c in self.containers)

    @property
    def gpus(self) -> int:
        # Extended resources: requests equal limits, and a limit alone implies the request.
        key = ksm_resource(GPU_RESOURCE)
        return int(sum(c.requests.get(key, c.limits.get(key, 0.0)) for c in self.containers))

    @classmethod
    def from_api(cls, pod: Json) -> SimPod:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        containers = []
        for c in spec.get("containers") or ():
            resources = c.get("resources") or {}
            containers.append(
                SimContainer(
                    name=c.get("name", ""),
                    requests={
                        ksm_resource(k): quantity(v)
                        for k, v in (resources.get("requests") or {}).items()
                    },
                    limits={
                        ksm_resource(k): quantity(v)
                        for k, v in (resources.get("limits") or {}).items()
                    },
                )
            )
        name, namespace = meta.get("name", ""), meta.get("namespace", "")
        return cls(
            uid=meta.get("uid") or str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{namespace}/{name}")),
            namespace=namespace,
            name=name,
            node=spec.get("nodeName") or "",
            created=meta.get("creationTimestamp") or "",
            containers=tuple(containers),
        )


@dataclass
class SimNode:
    name: str
    allocatable: dict[str, float]  # KSM resource names
    ready: bool = True
    instance_type: str | None = None
    platform_joules: float = 0.0
    idle_joules: float = 0.0
    cpu_dynamic_joules: float = 0.0
    cpu: CpuMeter = field(default_factory=CpuMeter)  # Kepler >= 0.10's counters

    @property
    def gpus(self) -> int:
        return int(self.allocatable.get(ksm_resource(GPU_RESOURCE), 0))

    @classmethod
    def from_api(cls, node: Json) -> SimNode:
        status = node.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        return cls(
            name=(node.get("metadata") or {}).get("name", ""),
            allocatable={
                ksm_resource(k): quantity(v) for k, v in (status.get("allocatable") or {}).items()
            },
            ready=ready,
            instance_type=((node.get("metadata") or {}).get("labels") or {}).get(
                INSTANCE_TYPE_LABEL
            ),
        )


@dataclass
class _Gpu:
    util: float = 0.0
    fb_used: float = 0.0
    busy: float = 0.0  # share counted by the power model
    pod: str = ""  # uid of the pod holding it
    device: GpuDevice | None = None  # a DRA device: its index and UUID label the series


@dataclass
class SimCluster:
    """The cluster's state as the apiserver last reported it, plus external GPU load; thread-safe.
    `kepler_styles` picks the Kepler families served: ("0.10",), ("0.7",) or both."""

    power: PowerModel = field(default_factory=PowerModel)
    external_gpu_util: Mapping[str, float] = field(default_factory=dict)
    external_fb_mib: float = 16384.0
    job_gpu_util: float = 85.0
    job_fb_mib: float = 60000.0
    fb_total_mib: float = FB_TOTAL_MIB
    kepler_styles: Sequence[KeplerStyle] = ("0.10",)
    dcgm_host_label: DcgmHostLabel = "hostname"

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, SimNode] = {}
        self._pods: dict[str, SimPod] = {}
        self._assigned: dict[str, tuple[str, tuple[int, ...]]] = {}  # uid → (node, indices)
        self._devices: dict[str, tuple[GpuDevice, ...]] = {}  # node → its DRA GPUs
        self._claimed: dict[tuple[str, str, str], str] = {}  # (driver, pool, device) → pod uid
        self._last_t: float | None = None
        self.updates = 0

    # -- state ----------------------------------------------------------------------------------
    def update(
        self,
        nodes: Iterable[Json],
        pods: Iterable[Json],
        now: float | None = None,
        *,
        slices: Iterable[Json] = (),
        claims: Iterable[Json] = (),
    ) -> None:
        """Replace the state with these Node, Pod, ResourceSlice and ResourceClaim objects (API
        JSON), first integrating the energy of the old state up to `now`."""
        moment = time.time() if now is None else now
        slices = list(slices)
        devices: dict[str, list[GpuDevice]] = {}
        for device in slice_gpus(slices):
            devices.setdefault(device.node, []).append(device)
        new_nodes = [SimNode.from_api(n) for n in nodes]
        new_pods = [
            SimPod.from_api(p)
            for p in pods
            if ((p.get("status") or {}).get("phase") not in _FINISHED)
        ]
        with self._lock:
            self._advance(moment)
            kept = {}
            for n in new_nodes:
                old = self._nodes.get(n.name)
                if old is not None:
                    n.platform_joules, n.idle_joules = old.platform_joules, old.idle_joules
                    n.cpu_dynamic_joules, n.cpu = old.cpu_dynamic_joules, old.cpu
                kept[n.name] = n
            self._nodes = kept
            self._pods = {p.uid: p for p in new_pods}
            self._devices = {node: tuple(found) for node, found in devices.items()}
            uid_of = {f"{p.namespace}/{p.name}": p.uid for p in new_pods}
            self._claimed = {}
            for allocation in allocations(claims, slices):
                holder = next((uid_of[k] for k in allocation.pods if k in uid_of), "")
                for held in allocation.devices:
                    self._claimed[held] = holder
            self._assign_gpus()
            self.updates += 1

    def _assign_gpus(self) -> None:
        # Forget pods that left (or moved, which a bound pod never does) and nodes that went.
        self._assigned = {
            uid: (node, idx)
            for uid, (node, idx) in self._assigned.items()
            if uid in self._pods and self._pods[uid].node == node and node in self._nodes
        }
        used: dict[str, set[int]] = {}
        for node, idx in self._assigned.values():
            used.setdefault(node, set()).update(idx)
        waiting = sorted(
            (
                p
                for p in self._pods.values()
                if p.node in self._nodes and p.gpus > 0 and p.node not in self._devices
            ),
            key=lambda p: (p.created, p.namespace, p.name),
        )
        for pod in waiting:
            if pod.uid in self._assigned:
                continue
            taken = used.setdefault(pod.node, set())
            free = [i for i in range(self._nodes[pod.node].gpus) if i not in taken]
            chosen = tuple(free[: pod.gpus])  # fewer if the node has too few: never crash
            taken.update(chosen)
            self._assigned[pod.uid] = (pod.node, chosen)

    def _gpus(self, node: SimNode) -> list[_Gpu]:
        """The node's GPUs now: its DRA devices if a ResourceSlice lists any, else as many as
        its `nvidia.com/gpu` allocatable."""
        ext = float(self.external_gpu_util.get(node.name, 0.0))
        devices = self._devices.get(node.name)

        def idle(device: GpuDevice | None = None) -> _Gpu:
            used = self.external_fb_mib if ext else 0.0
            return _Gpu(util=ext, fb_used=used, busy=ext / 100, device=device)

        if devices:
            gpus = []
            for d in devices:
                gpu = idle(d)
                holder = self._claimed.get((d.driver, d.pool, d.name))
                if holder is not None:
                    self._give(gpu, holder)
                gpus.append(gpu)
            return gpus
        gpus = [idle() for _ in range(node.gpus)]
        for uid, (name, idx) in self._assigned.items():
            if name != node.name:
                continue
            for i in idx:
                self._give(gpus[i], uid)
        return gpus

    def _give(self, gpu: _Gpu, uid: str) -> None:
        """A pod's job runs on the GPU (uid "" for a claim no listed pod reserves: busy all the
        same, as the device is allocated)."""
        gpu.util = min(100.0, gpu.util + self.job_gpu_util)
        gpu.fb_used = min(self.fb_total_mib, gpu.fb_used + self.job_fb_mib)
        gpu.busy, gpu.pod = 1.0, uid

    def _is_gpu_node(self, node: SimNode) -> bool:
        return node.gpus > 0 or bool(self._devices.get(node.name))

    def _cores(self, node: SimNode) -> float:
        """CPU cores the node's bound pods request."""
        return sum(p.cores for p in self._pods.values() if p.node == node.name)

    def _usage_ratio(self, node: SimNode) -> float:
        return cpu_usage_ratio(self._cores(node), node.allocatable.get("cpu", 0.0))

    def _watts(self, node: SimNode) -> tuple[float, float, float]:
        """(total, idle, dynamic CPU) watts of a node in the current state."""
        cores = self._cores(node)
        busy = sum(g.busy for g in self._gpus(node))
        gpu_node = self._is_gpu_node(node)
        kind = node.instance_type
        total = self.power.node_watts(
            gpu_node=gpu_node, cores=cores, busy_gpus=busy, instance_type=kind
        )
        return total, self.power.idle_watts(gpu_node, kind), self.power.core_watts(kind) * cores

    def _advance(self, now: float) -> None:
        if self._last_t is not None and now > self._last_t:
            dt = now - self._last_t
            for node in self._nodes.values():
                total, idle, cpu = self._watts(node)
                node.platform_joules += total * dt
                node.idle_joules += idle * dt
                node.cpu_dynamic_joules += cpu * dt
                node.cpu.advance(idle + cpu, self._usage_ratio(node), dt)
        if self._last_t is None or now > self._last_t:
            self._last_t = now

    # -- views ----------------------------------------------------------------------------------
    def node_watts(self) -> dict[str, float]:
        """Each node's watts in the current state."""
        with self._lock:
            return {name: self._watts(node)[0] for name, node in self._nodes.items()}

    def gpu_assignment(self) -> dict[str, dict[int, str]]:
        """node → GPU index → `namespace/name` of the pod holding it (DRA devices by their
        `index`)."""
        with self._lock:
            out: dict[str, dict[int, str]] = {}
            for uid, (node, idx) in self._assigned.items():
                pod = self._pods[uid]
                for i in idx:
                    out.setdefault(node, {})[i] = f"{pod.namespace}/{pod.name}"
            for node, devices in self._devices.items():
                for d in devices:
                    holder = self._pods.get(self._claimed.get((d.driver, d.pool, d.name), ""))
                    if holder is not None:
                        out.setdefault(node, {})[d.index] = f"{holder.namespace}/{holder.name}"
            return out

    def families(self, now: float | None = None) -> list[Family]:
        """Every series at `now` (advances the energy counters to it)."""
        moment = time.time() if now is None else now
        with self._lock:
            self._advance(moment)
            out = Exposition()
            for node in self._nodes.values():
                for i, gpu in enumerate(self._gpus(node)):
                    index = gpu.device.index if gpu.device is not None else i
                    labels = dcgm_labels(node.name, index, host_label=self.dcgm_host_label)
                    if gpu.device is not None:
                        labels["UUID"] = gpu.device.uuid
                    holder = self._pods.get(gpu.pod) if gpu.pod else None
                    if holder is not None:
                        # dcgm-exporter's Kubernetes mode (kubelet pod-resources): the pod
                        # holding the GPU; GPUs no pod holds carry no such labels.
                        labels.update(
                            namespace=holder.namespace,
                            pod=holder.name,
                            container=holder.containers[0].name if holder.containers else "",
                        )
                    out.gpu(
                        labels,
                        util_pct=round(gpu.util),
                        fb_used_mib=round(gpu.fb_used),
                        fb_free_mib=round(self.fb_total_mib - gpu.fb_used),
                    )
                if "0.10" in self.kepler_styles:
                    _, idle, cpu = self._watts(node)
                    out.cpu_power(
                        node.name,
                        watts=idle + cpu,  # RAPL: the CPU and memory, no GPU
                        usage_ratio=self._usage_ratio(node),
                        meter=node.cpu,
                    )
                if "0.7" in self.kepler_styles:
                    out.platform_joules(
                        node.name,
                        dynamic=node.platform_joules - node.idle_joules,
                        idle=node.idle_joules,
                    )
                    out.package_joules(node.name, dynamic=node.cpu_dynamic_joules, idle=0.0)
                out.allocatable(node.name, node.allocatable)
                out.probe(node.name, node.ready)
            for pod in self._pods.values():
                for c in pod.containers:
                    out.container_resources(
                        namespace=pod.namespace,
                        pod=pod.name,
                        uid=pod.uid,
                        container=c.name,
                        node=pod.node,
                        requests=c.requests,
                        limits=c.limits,
                    )
            return out.families()


# -- live wiring ---------------------------------------------------------------------------------


class ApiPoller:
    """Lists nodes, pods, ResourceSlices and ResourceClaims every `interval_s` and feeds them
    to a `SimCluster` (a thread). An apiserver that serves no `resource.k8s.io/v1` has none.

    Give it its own ApiClient: the connection pool is not shared with the caller's threads."""

    def __init__(
        self, api: client.ApiClient, cluster: SimCluster, *, interval_s: float = 1.0
    ) -> None:
        self.api = api
        self.cluster = cluster
        self.interval_s = interval_s
        self.errors = 0
        self._dra_served: bool | None = None  # learnt on the first list
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> None:
        core = client.CoreV1Api(self.api)
        # Raw JSON (no model objects): cheaper, and what SimCluster reads.
        node_resp: Any = core.list_node(_preload_content=False)
        pod_resp: Any = core.list_pod_for_all_namespaces(_preload_content=False)
        nodes = json.loads(node_resp.data)["items"]
        pods = json.loads(pod_resp.data)["items"]
        slices = self._dra_items(f"{DRA_API}/resourceslices")
        claims = self._dra_items(f"{DRA_API}/resourceclaims")
        self.cluster.update(nodes, pods, slices=slices, claims=claims)

    def _dra_items(self, path: str) -> list[dict[str, Any]]:
        if self._dra_served is False:
            return []
        try:
            items = KubeJson(self.api).list_all(path)
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            self._dra_served = False
            return []
        self._dra_served = True
        return items

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll_once()
            except Exception:  # a transient API error must not stop the metrics
                self.errors += 1

    def start(self) -> ApiPoller:
        self.poll_once()
        self._thread = threading.Thread(target=self._run, name="simcluster-poller", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> ApiPoller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""A synthetic cluster exporter: the series that real exporters publish, for N nodes with G GPUs.

One HTTP endpoint serves, for every node of a mutable `SyntheticCluster`:

- NVIDIA DCGM exporter: `DCGM_FI_DEV_GPU_UTIL` (%), `DCGM_FI_DEV_FB_USED` / `DCGM_FI_DEV_FB_FREE`
  (MiB), `DCGM_FI_DEV_POWER_USAGE` (W), labelled `gpu`, `UUID`, `pci_bus_id`, `device`,
  `modelName` and `hostname` (the node name, as the Helm chart sets it through NODE_NAME;
  dcgm-exporter releases before #655 wrote `Hostname`: `dcgm_host_label="Hostname"`).
- Kepler >= 0.10 (the default style): `kepler_node_cpu_joules_total` / `_watts`, their
  `_active_` and `_idle_` parts, labelled `node_name`, `path`, `zone` (`package` and `dram`,
  sharing the node's CPU watts by `DRAM_SHARE`), and `kepler_node_cpu_usage_ratio{node_name}`.
  As in Kepler (internal/monitor/node.go, calculateNodePower), active = total x usage ratio and
  idle = total - active, in every zone; the counters integrate the watts over time.
- Kepler 0.7.x (`kepler_styles=("0.7",)`): `kepler_node_platform_joules_total{instance,mode,
  source}` and `kepler_node_package_joules_total{instance,mode,package,source}`, where
  `instance` is the node name and `mode` is `dynamic` or `idle`.
- kube-state-metrics: `kube_node_status_allocatable` / `_capacity{node,resource,unit}` and
  `kube_pod_container_resource_requests` / `_limits{namespace,pod,uid,container,node,resource,
  unit}` (`cpu`/`core`, `memory`/`byte`, `nvidia_com_gpu`/`integer`, as KSM sanitises names).
- blackbox exporter: `probe_success{instance,node}`.

Scrape it with `honor_labels: true`. The real exporters run one per node (or one per cluster
for kube-state-metrics) and their `instance`, `namespace`, `pod` and `node` labels describe the
workload, not the scrape target; since one synthetic endpoint speaks for every node, Prometheus
would otherwise overwrite `instance` with the exporter's address and keep the node name only as
`exported_instance`, and Kepler 0.7 queries `by (instance)` would see a single node::

    scrape_configs:
      - job_name: synthetic-cluster
        honor_labels: true
        static_configs: [{targets: ["127.0.0.1:PORT"]}]

Tests change the state between scrapes (`set_gpu_util`, `hide`, `remove_node`, ...); a series
that stops being exported gets a staleness marker at the next scrape, exactly as in production.
`write_openmetrics` renders the same series over a time range for `promtool` backfilling.
Scale: prometheus-client needs ~3 s to expose 5,000 nodes x 8 GPUs (215,000 samples), so
live scraping suits a few hundred nodes; render larger clusters with `write_openmetrics`
(~1.5 s per timestamp at that size) and backfill them.
"""

from __future__ import annotations

import copy
import math
import random
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import IO, Literal, Protocol, Self
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

GIB = 1024**3
GPU_MODEL = "NVIDIA A100-SXM4-80GB"
KeplerStyle = Literal["0.7", "0.10"]
DcgmHostLabel = Literal["hostname", "Hostname"]
_KSM_UNITS = {"cpu": "core", "memory": "byte", "nvidia_com_gpu": "integer", "pods": "integer"}
_IDLE_SHARE = 0.4  # Kepler 0.7 splits node energy into idle and dynamic parts
# Kepler >= 0.10 meters the CPU's RAPL zones: `package` (cores and uncore) and `dram` (memory,
# a separate zone). The synthetic CPU watts are split between the two at this fixed share (DRAM
# draws roughly a tenth to a fifth of a server's package + DRAM power), so summing both zones
# gives the whole CPU figure back.
DRAM_SHARE = 0.15
KEPLER_ZONES = (("package", 1 - DRAM_SHARE), ("dram", DRAM_SHARE))


@dataclass
class Gpu:
    labels: dict[str, str]  # DCGM's identifying labels, fixed for the GPU's life
    util_pct: float = 0.0
    fb_used_mib: float = 0.0
    fb_total_mib: float = 81920.0  # A100-SXM4-80GB
    power_w: float = 60.0


@dataclass
class Container:
    """Requests and limits keyed by kube-state-metrics resource name, in its units."""

    namespace: str
    pod: str
    container: str
    requests: dict[str, float]
    limits: dict[str, float]

    @property
    def uid(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.namespace}/{self.pod}"))


@dataclass
class CpuMeter:
    """Kepler >= 0.10's node CPU energy counters. Each interval's energy is split by the CPU
    usage ratio over it: that share is `active`, the rest `idle` (so idle = joules - active)."""

    joules: float = 0.0
    active_joules: float = 0.0

    def advance(self, watts: float, usage_ratio: float, dt: float) -> None:
        self.joules += watts * dt
        self.active_joules += watts * usage_ratio * dt


@dataclass
class Node:
    name: str
    gpus: list[Gpu]
    allocatable: dict[str, float] = field(default_factory=dict)
    platform_watts: float = 300.0
    package_watts: float = 120.0  # the CPU total: Kepler 0.7's package, 0.10's package + dram
    cpu_usage: float | None = None  # ratio 0..1; None: requested cores / allocatable cores
    probe_ok: bool = True
    containers: list[Container] = field(default_factory=list)
    hidden: set[str] = field(default_factory=set)  # series names this node stops exporting
    platform_joules: float = 0.0
    cpu: CpuMeter = field(default_factory=CpuMeter)

    def usage_ratio(self) -> float:
        if self.cpu_usage is not None:
            return self.cpu_usage
        cores = self.allocatable.get("cpu", 0.0)
        requested = sum(c.requests.get("cpu", 0.0) for c in self.containers)
        return cpu_usage_ratio(requested, cores)


Kind = Literal["gauge", "counter"]


@dataclass(frozen=True)
class Family:
    """Exporter-neutral metric family; `name` is the full series name (counters end in _total)."""

    name: str
    kind: Kind
    help: str
    samples: list[tuple[dict[str, str], float]]


# Every series the synthetic exporters publish: its type and HELP text, as the real exporter
# writes them.
SERIES: dict[str, tuple[Kind, str]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "kepler_node_platform_joules_total": ("counter", "Aggregated value in platform_joules"),
    "kepler_node_package_joules_total": ("counter", "Aggregated value in package_joules"),
    "kepler_node_cpu_joules_total": (
        "counter",
        "Energy consumption of cpu at node level in joules",
    ),
    "kepler_node_cpu_watts": ("gauge", "Power consumption of cpu at node level in watts"),
    "kepler_node_cpu_active_joules_total": (
        "counter",
        "Energy consumption of cpu in active state at node level in joules",
    ),
    "kepler_node_cpu_active_watts": (
        "gauge",
        "Power consumption of cpu in active state at node level in watts",
    ),
    "kepler_node_cpu_idle_joules_total": (
        "counter",
        "Energy consumption of cpu in idle state at node level in joules",
    ),
    "kepler_node_cpu_idle_watts": (
        "gauge",
        "Power consumption of cpu in idle state at node level in watts",
    ),
    "kepler_node_cpu_usage_ratio": (
        "gauge",
        "CPU usage ratio of a node (value between 0.0 and 1.0)",
    ),
    "kube_node_status_allocatable": (
        "gauge",
        "The allocatable for different resources of a node.",
    ),
    "kube_node_status_capacity": ("gauge", "The capacity for different resources of a node."),
    "kube_pod_container_resource_requests": ("gauge", "The number of requests resource."),
    "kube_pod_container_resource_limits": ("gauge", "The number of limits resource."),
    "probe_success": ("gauge", "Displays whether or not the probe was a success"),
}
# The job name the example policy's health query selects (honor_labels keeps it).
HEALTH_JOB = "node-health"


class Exposition:
    """The families of one scrape, built sample by sample under the real exporters' names and
    labels: `SyntheticCluster` (state set by hand) and `SimCluster` (state read from an API)
    both render through it. Series named in `hidden` are dropped (set it per node: a node
    that stops exporting a series)."""

    def __init__(self) -> None:
        self.hidden: AbstractSet[str] = frozenset()
        self._families: dict[str, Family] = {}

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        if name in self.hidden:
            return
        family = self._families.get(name)
        if family is None:
            kind, help_ = SERIES[name]
            family = self._families[name] = Family(name, kind, help_, [])
        family.samples.append((labels, value))

    def gpu(
        self, labels: dict[str, str], *, util_pct: float, fb_used_mib: float, fb_free_mib: float
    ) -> None:
        """One GPU's DCGM utilisation and framebuffer series."""
        self.add("DCGM_FI_DEV_GPU_UTIL", labels, util_pct)
        self.add("DCGM_FI_DEV_FB_USED", labels, fb_used_mib)
        self.add("DCGM_FI_DEV_FB_FREE", labels, fb_free_mib)

    def platform_joules(self, node: str, *, dynamic: float, idle: float) -> None:
        """Kepler 0.7's node energy counter, split into its dynamic and idle parts."""
        for mode, joules in (("dynamic", dynamic), ("idle", idle)):
            labels = {"instance": node, "mode": mode, "source": "acpi"}
            self.add("kepler_node_platform_joules_total", labels, joules)

    def package_joules(self, node: str, *, dynamic: float, idle: float) -> None:
        """Kepler 0.7's CPU package energy counter (one package), dynamic and idle parts."""
        for mode, joules in (("dynamic", dynamic), ("idle", idle)):
            labels = {"instance": node, "mode": mode, "package": "0", "source": "rapl-sysfs"}
            self.add("kepler_node_package_joules_total", labels, joules)

    def cpu_power(self, node: str, *, watts: float, usage_ratio: float, meter: CpuMeter) -> None:
        """Kepler >= 0.10's node CPU families, one series per RAPL zone (`KEPLER_ZONES`), and
        the node's CPU usage ratio that splits each zone into active and idle."""
        active_w = watts * usage_ratio
        idle_joules = meter.joules - meter.active_joules
        for zone, share in KEPLER_ZONES:
            labels = {
                "node_name": node,
                "path": f"/sys/class/powercap/intel-rapl/energy_{zone}",
                "zone": zone,
            }
            self.add("kepler_node_cpu_joules_total", labels, share * meter.joules)
            self.add("kepler_node_cpu_watts", labels, share * watts)
            self.add("kepler_node_cpu_active_joules_total", labels, share * meter.active_joules)
            self.add("kepler_node_cpu_active_watts", labels, share * active_w)
            self.add("kepler_node_cpu_idle_joules_total", labels, share * idle_joules)
            self.add("kepler_node_cpu_idle_watts", labels, share * (watts - active_w))
        self.add("kepler_node_cpu_usage_ratio", {"node_name": node}, usage_ratio)

    def allocatable(self, node: str, amounts: Mapping[str, float]) -> None:
        """kube-state-metrics' allocatable, keyed by its resource names (`nvidia_com_gpu`)."""
        for resource, amount in amounts.items():
            labels = {"node": node, "resource": resource, "unit": ksm_unit(resource)}
            self.add("kube_node_status_allocatable", labels, amount)
            # The simulation reserves nothing for the system: capacity = allocatable.
            self.add("kube_node_status_capacity", labels, amount)

    def container_resources(
        self,
        *,
        namespace: str,
        pod: str,
        uid: str,
        container: str,
        node: str,
        requests: Mapping[str, float],
        limits: Mapping[str, float],
    ) -> None:
        """kube-state-metrics' requests and limits of one container (`node=""` while unbound)."""
        base = {"namespace": namespace, "pod": pod, "uid": uid, "container": container}
        for series, amounts in (
            ("kube_pod_container_resource_requests", requests),
            ("kube_pod_container_resource_limits", limits),
        ):
            for resource, amount in amounts.items():
                labels = {**base, "node": node, "resource": resource, "unit": ksm_unit(resource)}
                self.add(series, labels, amount)

    def probe(self, node: str, ok: bool) -> None:
        """The blackbox exporter's probe of a node."""
        labels = {"instance": node, "node": node, "job": HEALTH_JOB}
        self.add("probe_success", labels, 1.0 if ok else 0.0)

    def families(self) -> list[Family]:
        return list(self._families.values())


def cpu_usage_ratio(requested_cores: float, allocatable_cores: float) -> float:
    """Requested over allocatable cores, within 0..1 (0 on a node with no CPU reported)."""
    if allocatable_cores <= 0:
        return 0.0
    return min(1.0, max(0.0, requested_cores / allocatable_cores))


def ksm_unit(resource: str) -> str:
    """The `unit` label kube-state-metrics gives a resource."""
    return _KSM_UNITS.get(resource, "integer")


def dcgm_labels(
    node: str, index: int, model: str = GPU_MODEL, host_label: DcgmHostLabel = "hostname"
) -> dict[str, str]:
    """DCGM's identifying labels of a GPU, stable for a node name and index. The node is in
    `hostname` (dcgm-exporter #655 and later; the Helm chart sets it to the node's name), or in
    `Hostname` as releases before it wrote it."""
    return {
        "gpu": str(index),
        "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/{index}')}",
        "pci_bus_id": f"00000000:{0x07 + index:02X}:00.0",
        "device": f"nvidia{index}",
        "modelName": model,
        host_label: node,
    }


class SyntheticCluster:
    """Mutable, thread-safe cluster state: nodes `node-1..node-N`, GPUs idle (0 %, 0 MiB used
    of 80 GiB), 300 W platform and 120 W CPU power, probes up, no pods. `noise_pct`
    multiplies GPU utilisation and power by a seeded uniform factor in [1-x%, 1+x%] each time
    they are read (utilisation stays within 0..100); memory and resources stay exact.
    `kepler_styles` picks the Kepler families: ("0.10",) by default, ("0.7",) for the old ones,
    both for a migration. A node's CPU usage ratio (Kepler >= 0.10) is its containers' CPU
    requests over its allocatable cores (0 with none) unless `set_cpu_usage` fixes it."""

    def __init__(
        self,
        nodes: int = 3,
        gpus_per_node: int = 8,
        *,
        seed: int = 0,
        noise_pct: float = 0.0,
        node_prefix: str = "node-",
        kepler_styles: Sequence[KeplerStyle] = ("0.10",),
        dcgm_host_label: DcgmHostLabel = "hostname",
    ) -> None:
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self.noise_pct = noise_pct
        self.kepler_styles = tuple(kepler_styles)
        self.dcgm_host_label: DcgmHostLabel = dcgm_host_label
        self._nodes: dict[str, Node] = {}
        self._last_eval: float | None = None
        for i in range(1, nodes + 1):
            self.add_node(f"{node_prefix}{i}", gpus=gpus_per_node)

    # -- mutation ---------------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        *,
        gpus: int = 8,
        gpu_model: str = GPU_MODEL,
        cpu_cores: float = 64,
        memory_gib: float = 512,
    ) -> None:
        with self._lock:
            alloc = {"cpu": cpu_cores, "memory": memory_gib * GIB, "pods": 110.0}
            if gpus:
                alloc["nvidia_com_gpu"] = float(gpus)
            gpu_list = [
                Gpu(dcgm_labels(name, i, gpu_model, self.dcgm_host_label)) for i in range(gpus)
            ]
            self._nodes[name] = Node(name, gpu_list, allocatable=alloc)

    def remove_node(self, name: str) -> None:
        with self._lock:
            del self._nodes[self._node(name).name]

    def set_gpu_util(self, node: str, util_pct: float, gpu: int | None = None) -> None:
        """Set one GPU's utilisation, or every GPU of the node when `gpu` is None."""
        with self._lock:
            for g in self._gpus(node, gpu):
                g.util_pct = util_pct

    def set_gpu_memory(self, node: str, used_mib: float, gpu: int | None = None) -> None:
        with self._lock:
            for g in self._gpus(node, gpu):
                g.fb_used_mib = min(used_mib, g.fb_total_mib)

    def set_power(
        self, node: str, *, platform_watts: float | None = None, package_watts: float | None = None
    ) -> None:
        """`platform_watts`: Kepler 0.7's node platform. `package_watts`: the CPU, Kepler 0.7's
        package and Kepler >= 0.10's `package` + `dram` zones together."""
        with self._lock:
            n = self._node(node)
            n.platform_watts = n.platform_watts if platform_watts is None else platform_watts
            n.package_watts = n.package_watts if package_watts is None else package_watts

    def set_cpu_usage(self, node: str, ratio: float | None) -> None:
        """Fix the node's CPU usage ratio (0..1), or None to follow its containers' requests."""
        if ratio is not None and not 0.0 <= ratio <= 1.0:
            raise ValueError(f"cpu usage ratio of {node!r}: must be 0..1, got {ratio}")
        with self._lock:
            self._node(node).cpu_usage = ratio

    def set_probe(self, node: str, ok: bool) -> None:
        with self._lock:
            self._node(node).probe_ok = ok

    def add_container(
        self,
        node: str,
        namespace: str,
        pod: str,
        *,
        container: str = "main",
        requests: Mapping[str, float],
        limits: Mapping[str, float] | None = None,
    ) -> None:
        """Resources use kube-state-metrics names and units: cpu cores, memory bytes."""
        with self._lock:
            c = Container(namespace, pod, container, dict(requests), dict(limits or {}))
            self._node(node).containers.append(c)

    def hide(self, node: str, series: str) -> None:
        """Stop exporting `series` (full name, e.g. `DCGM_FI_DEV_GPU_UTIL`) for `node`."""
        with self._lock:
            self._node(node).hidden.add(series)

    def show(self, node: str, series: str) -> None:
        with self._lock:
            self._node(node).hidden.discard(series)

    @property
    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def _node(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(
                f"node {name!r} is not in the synthetic cluster; have {list(self._nodes)}"
            ) from None

    def _gpus(self, node: str, gpu: int | None) -> list[Gpu]:
        gpus = self._node(node).gpus
        if gpu is None:
            return gpus
        if not 0 <= gpu < len(gpus):
            raise IndexError(f"gpu: node {node!r} has GPUs 0..{len(gpus) - 1}, got {gpu}")
        return [gpus[gpu]]

    # -- rendering --------------------------------------------------------------------------
    def _noisy(self, value: float) -> float:
        if not self.noise_pct:
            return value
        return value * (1 + self._rng.uniform(-self.noise_pct, self.noise_pct) / 100)

    def families(self, now: float) -> list[Family]:
        """Evaluate every series at `now` (unix seconds); advances the energy counters."""
        with self._lock:
            dt = 0.0 if self._last_eval is None else max(0.0, now - self._last_eval)
            self._last_eval = now
            out = Exposition()
            for n in self._nodes.values():
                platform_w, package_w = self._noisy(n.platform_watts), self._noisy(n.package_watts)
                usage = n.usage_ratio()
                n.platform_joules += platform_w * dt
                n.cpu.advance(package_w, usage, dt)
                out.hidden = n.hidden
                self._dcgm(n, out)
                self._kepler(n, out, package_w, usage)
                out.allocatable(n.name, n.allocatable)
                for c in n.containers:
                    out.container_resources(
                        namespace=c.namespace,
                        pod=c.pod,
                        uid=c.uid,
                        container=c.container,
                        node=n.name,
                        requests=c.requests,
                        limits=c.limits,
                    )
                out.probe(n.name, n.probe_ok)
            return out.families()

    def _dcgm(self, n: Node, out: Exposition) -> None:
        for g in n.gpus:
            util = self._noisy(g.util_pct)
            if math.isfinite(util):  # NaN and ±Inf go out as set: what a failing GPU reads
                util = round(min(100.0, max(0.0, util)))
            out.gpu(
                g.labels,
                util_pct=util,
                fb_used_mib=round(g.fb_used_mib),
                fb_free_mib=round(g.fb_total_mib - g.fb_used_mib),
            )
            out.add("DCGM_FI_DEV_POWER_USAGE", g.labels, self._noisy(g.power_w))

    def _kepler(self, n: Node, out: Exposition, package_w: float, usage: float) -> None:
        if "0.7" in self.kepler_styles:
            platform, package = n.platform_joules, n.cpu.joules
            out.platform_joules(
                n.name, dynamic=platform * (1 - _IDLE_SHARE), idle=platform * _IDLE_SHARE
            )
            out.package_joules(
                n.name, dynamic=package * (1 - _IDLE_SHARE), idle=package * _IDLE_SHARE
            )
        if "0.10" in self.kepler_styles:
            out.cpu_power(n.name, watts=package_w, usage_ratio=usage, meter=n.cpu)

    def write_openmetrics(
        self,
        out: IO[str],
        timestamps: Iterable[float],
        target: Mapping[str, str] | None = None,
    ) -> None:
        """Write the series at each timestamp (ascending, unix seconds) as OpenMetrics text for
        `promtool tsdb create-blocks-from openmetrics`. Works on a copy: the live counters and
        noise sequence of this cluster are left as they are. `target` labels (`job`,
        `instance`) are added where a series has none of its own, as a scrape with
        honor_labels adds them: the history is then the same series a live scrape continues."""
        with self._lock:
            snapshot = copy.deepcopy(self)
        snapshot._last_eval = None
        # The snapshot does not change while it is rendered, so every call to `families`
        # lists the same series in the same order: render each label set once.
        series: dict[str, tuple[Family, list[str], list[list[tuple[float, float]]]]] = {}
        for ts in timestamps:
            for fam in snapshot.families(ts):
                if fam.name not in series:
                    texts = [label_text({**(target or {}), **labels}) for labels, _ in fam.samples]
                    series[fam.name] = (fam, texts, [[] for _ in texts])
                points = series[fam.name][2]
                for i, (_, value) in enumerate(fam.samples):
                    points[i].append((ts, value))
        for name, (fam, texts, points) in series.items():
            family_name = name.removesuffix("_total") if fam.kind == "counter" else name
            out.write(f"# HELP {family_name} {fam.help}\n# TYPE {family_name} {fam.kind}\n")
            for text, series_points in zip(texts, points, strict=True):
                out.writelines(
                    f"{name}{{{text}}} {_format(value)} {ts:.3f}\n" for ts, value in series_points
                )
        out.write("# EOF\n")

    def __deepcopy__(self, memo: dict[int, object]) -> SyntheticCluster:
        clone = SyntheticCluster.__new__(SyntheticCluster)
        clone.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_lock"})
        clone._lock = threading.RLock()
        clone._nodes = copy.deepcopy(self._nodes, memo)
        clone._rng = copy.deepcopy(self._rng, memo)
        return clone


def label_text(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class FamilySource(Protocol):
    """What an exporter serves: `SyntheticCluster`, `kits.simulated_cluster.SimCluster`."""

    def families(self, now: float) -> list[Family]: ...


class SyntheticCollector(Collector):
    """prometheus-client collector that renders a cluster's families at scrape time."""

    def __init__(self, cluster: FamilySource) -> None:
        self.cluster = cluster

    def collect(self) -> Iterator[Metric]:
        for fam in self.cluster.families(time.time()):
            family_name = fam.name.removesuffix("_total") if fam.kind == "counter" else fam.name
            metric = Metric(family_name, fam.help, fam.kind)
            for labels, value in fam.samples:
                metric.add_sample(fam.name, labels, value)
            yield metric


class SyntheticExporter:
    """Serves a cluster's families (a `SyntheticCluster` or a `SimCluster`) on 127.0.0.1
    (port 0 = a free port) until `stop()`: the one exporter the tests, the demo and the
    benchmarks start."""

    def __init__(self, cluster: FamilySource, *, port: int = 0) -> None:
        self.cluster = cluster
        self._requested_port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SyntheticCollector(cluster))
        self._server: WSGIServer | None = None
        self.port = 0

    @property
    def target(self) -> str:
        """`host:port` for a Prometheus static_config."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}/metrics"

    def start(self) -> Self:
        server, _thread = start_http_server(
            self._requested_port, addr="127.0.0.1", registry=self.registry
        )
        self._server = server
        self.port = server.server_port
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

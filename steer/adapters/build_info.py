"""`<service>_build_info`: which kube-steer and which Python a process runs, as a metric.

The usual Prometheus idiom: a gauge fixed at 1 whose labels carry the versions, so a query can
join them onto any other series of the process (`* on (instance) group_left (version)`).
"""

from __future__ import annotations

import platform
from collections.abc import Iterable

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from steer import __version__


class BuildInfoCollector(Collector):
    def __init__(self, prefix: str) -> None:
        self.name = f"{prefix}_build_info"

    def collect(self) -> Iterable[Metric]:
        info = GaugeMetricFamily(
            self.name,
            "The kube-steer version and the Python version this process runs (value is always 1).",
            labels=["version", "python"],
        )
        info.add_metric([__version__, platform.python_version()], 1)
        yield info

"""Data sources of the scorer's dimensions, behind one interface (`Source`, base.py).

`spec.dimensions[].source` names the source; `SOURCES` makes one of each kind on first use.
"""

from __future__ import annotations

from collections.abc import Callable

from scorer.sources.base import Readings, Source, SourceContext, SourceFailed
from scorer.sources.http_json import HttpJsonSource
from scorer.sources.kubernetes import KubernetesApiSource
from scorer.sources.prometheus import PrometheusSource

SOURCES: dict[str, Callable[[SourceContext], Source]] = {
    "prometheus": PrometheusSource,
    "kubernetes": KubernetesApiSource,
    "http": HttpJsonSource,
}

__all__ = ["SOURCES", "Readings", "Source", "SourceContext", "SourceFailed"]

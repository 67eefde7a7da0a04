"""Data sources of the scorer's dimensions, behind one interface (`Source`, base.py).

`spec.dimensions[].source` names the source; `SOURCES` makes one of each kind on first use.
"""

from __future__ import annotations

from collections.abc import Callable

from scorer.cycle.sources.base import Readings, Source, SourceContext, SourceFailed, SourceRequest
from scorer.cycle.sources.http_json import HttpJsonSource
from scorer.cycle.sources.kubernetes import KubernetesApiSource
from scorer.cycle.sources.prometheus import PrometheusSource

SOURCES: dict[str, Callable[[SourceContext], Source]] = {
    "prometheus": PrometheusSource,
    "kubernetes": KubernetesApiSource,
    "http": HttpJsonSource,
}

__all__ = ["SOURCES", "Readings", "Source", "SourceContext", "SourceFailed", "SourceRequest"]

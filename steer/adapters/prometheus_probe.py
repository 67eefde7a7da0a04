"""What Prometheus holds for the metrics a dimension reads: the facts
`steer.core.datacheck.diagnose` explains a silent dimension from.

One index read for every metric name (`/api/v1/label/__name__/values`, shared by all the
dimensions of one check), and per metric the query reads that exists, one instant query of a
few of its series for their label names. The scorer asks only for dimensions that resolve
nothing or too little, and at most every few minutes (scorer/cycle/sources/prometheus.py); `steer
policy check` asks for every dimension once.
"""

from __future__ import annotations

from collections.abc import Iterable

from steer.adapters.prometheus import PrometheusClient
from steer.core.datacheck import MetricFacts, PrometheusFacts

# Series per metric whose labels are read: enough to see every label an exporter sets (they
# carry the same label names), bounded so a metric of a million series costs no more.
SERIES_SAMPLE = 20


def metric_index(client: PrometheusClient) -> frozenset[str]:
    return frozenset(client.label_values("__name__"))


def probe(
    client: PrometheusClient, metrics: Iterable[str], names: frozenset[str] | None = None
) -> PrometheusFacts:
    """Facts for `metrics`; `names` is the metric index when the caller already read it."""
    index = metric_index(client) if names is None else names
    facts = []
    for metric in metrics:
        if metric not in index:
            facts.append(MetricFacts(metric, present=False))
            continue
        answer = client.query(f"topk({SERIES_SAMPLE}, {metric})")
        labels = frozenset(
            name for sample in answer.samples for name in sample.labels if name != "__name__"
        )
        # A name the index still lists may have no current series (an exporter gone since the
        # last head compaction): absent, as far as the query is concerned.
        facts.append(MetricFacts(metric, present=bool(answer.samples), label_names=labels))
    return PrometheusFacts(index, tuple(facts))

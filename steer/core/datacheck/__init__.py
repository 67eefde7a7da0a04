"""What a dimension's data lacks, said with its cause and its fix.

A dimension can be wrong in ways a query does not report: its metric is absent (an exporter
upgrade renamed it), its node label is spelled otherwise, its label values are not node names
(the exporter's pod name, a scrape address), it covers fewer nodes than it should, or its values
contradict its unit (a ratio where a percent was declared). Everything here is pure: the scorer
(each cycle, from its reading) and `steer policy check` (before install, from Prometheus) hand
in what they saw and get `DataProblem`s back.

- `problems.py`: `DataProblem` and its kinds;
- `units.py`: what values each unit accepts, and the scale a contradiction points to;
- `identities.py`: what a label value that names no node is (pod name, scrape address);
- `promql.py`: the metric names a query reads;
- `exporters.py`: the metric families of the exporters the presets know, by release;
- `vet.py`: one reading against its unit and its expected nodes;
- `diagnose.py`: why a query resolves nothing, from what Prometheus holds.
"""

from steer.core.datacheck.diagnose import MetricFacts, PrometheusFacts, diagnose
from steer.core.datacheck.problems import DataProblem, ProblemKind
from steer.core.datacheck.vet import NodeLike, ReadingFacts, Vetted, expected_nodes, vet_reading

__all__ = [
    "DataProblem",
    "MetricFacts",
    "NodeLike",
    "ProblemKind",
    "PrometheusFacts",
    "ReadingFacts",
    "Vetted",
    "diagnose",
    "expected_nodes",
    "vet_reading",
]

"""What `/explain` says, as typed values: built once by the producers (scorer/explain/nodes.py,
pod.py), rendered by `to_json()` for the HTTP answer and `steer scorer once --output json`, and
read back by `from_json()` where the CLI renders its tables from the scorer's answer
(scorer/explain/render.py).

Pure data: no planning, no I/O. Numbers are as answered (rounded by the producer); times are
RFC 3339 text. `to_json()` returns keys in the order the answer has always had, so the JSON is
unchanged; `from_json(x.to_json()) == x` for every type of the package.

One module a view: `nodes_table` (`/explain/nodes`), `node_detail` (`/explain/node/NAME`),
`pod_explanation` (`/explain/pod`, with the scheduler's own verdict on a live pod),
`audit_report` (`/explain/audit`) and `served` (what the answering replica adds to each).
"""

from scorer.explain.view.audit_report import AuditedPod, AuditReport, RuleCount
from scorer.explain.view.node_detail import (
    BudgetPools,
    CompositeValue,
    ConditionValue,
    CounterView,
    DeviceView,
    DimensionValue,
    FloorView,
    GateView,
    NodeDetail,
    PoolView,
)
from scorer.explain.view.nodes_table import (
    DeviceCount,
    DimensionCell,
    DimensionStatus,
    NodeRow,
    NodesTable,
    PoolCell,
)
from scorer.explain.view.pod_explanation import (
    AdmissionView,
    DeviceAskView,
    Exclusion,
    NodeVerdict,
    PodExplanation,
    PodScheduled,
    SchedulerVerdict,
    SchedulingEvent,
)
from scorer.explain.view.served import Served

__all__ = [
    "AdmissionView",
    "AuditReport",
    "AuditedPod",
    "BudgetPools",
    "CompositeValue",
    "ConditionValue",
    "CounterView",
    "DeviceAskView",
    "DeviceCount",
    "DeviceView",
    "DimensionCell",
    "DimensionStatus",
    "DimensionValue",
    "Exclusion",
    "FloorView",
    "GateView",
    "NodeDetail",
    "NodeRow",
    "NodeVerdict",
    "NodesTable",
    "PodExplanation",
    "PodScheduled",
    "PoolCell",
    "PoolView",
    "RuleCount",
    "SchedulerVerdict",
    "SchedulingEvent",
    "Served",
]

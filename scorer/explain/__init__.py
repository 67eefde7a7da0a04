"""Why a node carries its labels, and where a pod may go: the answers behind `/explain`.

One view model, many renderers. The producers build typed views once: `nodes` (a
`CyclePlan` into the node rows and the node detail), `pod` (the scheduler's filters and
ranking on the steered pod), `scheduler` (what the kube-scheduler said of a live pod: its
`PodScheduled` condition and latest `FailedScheduling` event), `audit` (the audited pods as
placed, judged by `pod` as enforce mode would have steered them) and `blocked` (whether
kube-steer's rules keep a pod Pending); `view` (a package, one module a view, imported from there) holds the frozen
types with their `to_json()` (the HTTP answer, `steer scorer once --output json`) and
`from_json()` (the CLI reading the answer back); `render` draws the CLI's tables from the
views, and the explain page (scorer/page/) draws the same JSON in a browser; `table` is the
text plan of `steer scorer once`. All pure: the HTTP and the argument parsing are in
scorer/app.py and scorer/cli.py.
"""

from scorer.explain.audit import audit_report
from scorer.explain.nodes import (
    budget_pools,
    detail_view,
    node_detail,
    node_row,
    nodes_table,
    nodes_view,
    row_view,
)
from scorer.explain.pod import effective_labels, effective_taints, explain_pod
from scorer.explain.scheduler import latest_failed_scheduling, scheduler_verdict
from scorer.explain.table import plan_table

__all__ = [
    "audit_report",
    "budget_pools",
    "detail_view",
    "effective_labels",
    "effective_taints",
    "explain_pod",
    "latest_failed_scheduling",
    "node_detail",
    "node_row",
    "nodes_table",
    "nodes_view",
    "plan_table",
    "row_view",
    "scheduler_verdict",
]
